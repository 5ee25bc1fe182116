#pragma once
// Embedding: a learned table of vectors, one per token of a vocabulary, looked up by id.

#include <cstdint>
#include <string>

#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/ops/embedding.hpp"
#include "meshtensor/tensor/random.hpp"

namespace meshtensor::nn {

/**
 * A table [vocab, model] drawn from N(0, 1) (PyTorch's Embedding); the layer maps ids [...] to
 * [..., model]. `layout` splits the table over the vocabulary ("vocab:cols") or the model dim.
 *
 * ```cpp
 * nn::Embedding<float> embed(mesh, params, "embed", Dim("vocab", 64), Dim("model", 256), seed);
 * auto h = embed(tokens);   // [batch, seq] -> [batch, seq, model]
 * ```
 */
template <class T = float>
class Embedding {
 public:
  Embedding(Mesh& mesh, Parameters<T>& params, const std::string& name, const Dim& vocab,
            const Dim& model, std::uint64_t seed, const Layout& layout = {})
      : vocab_(vocab.name),
        table_(params.add(name + "/table", random_normal<T>(mesh, Shape{vocab, model}, layout, seed,
                                                            name + "/table", 0.0, 1.0))) {}

  template <class I>
  Tensor<T> operator()(const Tensor<I>& ids) const {
    return embedding(ids, table_, vocab_);
  }

  const Tensor<T>& table() const { return table_; }
  const std::string& vocab() const { return vocab_; }

 private:
  std::string vocab_;
  Tensor<T> table_;
};

}  // namespace meshtensor::nn
