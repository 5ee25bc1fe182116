#pragma once
// A decoder-only transformer (GPT-style, pre-norm) written once against global shapes with named
// dims: batch, seq (query positions), kseq (key positions), model, heads, d_head, d_ff, vocab.
// The layout alone decides the parallelism, as in Mesh-TensorFlow: `batch:rows` is data
// parallelism, `heads:cols; d_ff:cols` splits attention by heads and the feed-forward layer by its
// hidden units (Megatron's split), each finished by one all-reduce that einsum inserts.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace transformer {

namespace mt = meshtensor;
namespace nn = meshtensor::nn;

struct Config {
  std::int64_t vocab = 11, length = 16, model = 64, heads = 4, d_head = 16, d_ff = 256;
  int layers = 2;
  std::uint64_t seed = 1;
};

/// Causal multi-head self-attention: queries, keys and values [model] -> [heads, d_head].
class Attention {
 public:
  Attention(mt::Mesh& mesh, nn::Parameters<float>& params, const std::string& name, const Config& c,
            const mt::Layout& layout)
      : scale_(float(1.0 / std::sqrt(double(c.d_head)))) {
    const mt::Dim model("model", c.model), heads("heads", c.heads), d_head("d_head", c.d_head);
    auto weight = [&](const std::string& what, const mt::Shape& shape, std::int64_t fan_in) {
      return params.add(name + "/" + what,
                        mt::random_normal<float>(mesh, shape, layout, c.seed, name + "/" + what,
                                                 0.0, 1.0 / std::sqrt(double(fan_in))));
    };
    query_ = weight("query", {model, heads, d_head}, c.model);
    key_ = weight("key", {model, heads, d_head}, c.model);
    value_ = weight("value", {model, heads, d_head}, c.model);
    out_ = weight("out", {heads, d_head, model}, c.heads * c.d_head);
    // -1e9 where a key comes after its query: softmax gives it no weight.
    mask_ =
        mt::generate<float>(mesh, {mt::Dim("seq", c.length), mt::Dim("kseq", c.length)}, layout,
                            [](const mt::Index& i) { return i["kseq"] > i["seq"] ? -1e9f : 0.0f; });
  }

  /// x [batch, seq, model] -> [batch, seq, model].
  mt::Tensor<float> operator()(const mt::Tensor<float>& x) const {
    const mt::DimNames per_head("batch, seq, heads, d_head");
    auto q = mt::einsum({x, query_}, per_head);
    auto k = mt::rename(mt::einsum({x, key_}, per_head), "seq", "kseq");
    auto v = mt::rename(mt::einsum({x, value_}, per_head), "seq", "kseq");
    auto scores = mt::einsum({q, k}, "batch, heads, seq, kseq") * scale_ + mask_;
    auto attended = mt::einsum({mt::softmax(scores, "kseq"), v}, per_head);
    return mt::einsum({attended, out_}, "batch, seq, model");
  }

 private:
  float scale_;
  mt::Tensor<float> query_, key_, value_, out_, mask_;
};

/// One pre-norm block: x + attention(norm(x)), then x + feed_forward(norm(x)).
class Block {
 public:
  Block(mt::Mesh& mesh, nn::Parameters<float>& params, const std::string& name, const Config& c,
        const mt::Layout& layout)
      : attention_norm_(mesh, params, name + "/attention_norm", {mt::Dim("model", c.model)}, 1e-5,
                        layout),
        attention_(mesh, params, name + "/attention", c, layout),
        ff_norm_(mesh, params, name + "/ff_norm", {mt::Dim("model", c.model)}, 1e-5, layout),
        up_(mesh, params, name + "/up", mt::Dim("model", c.model), mt::Dim("d_ff", c.d_ff), c.seed,
            true, layout),
        down_(mesh, params, name + "/down", mt::Dim("d_ff", c.d_ff), mt::Dim("model", c.model),
              c.seed, true, layout) {}

  mt::Tensor<float> operator()(mt::Tensor<float> x) const {
    x = x + attention_(attention_norm_(x));
    return x + down_(mt::gelu(up_(ff_norm_(x))));
  }

 private:
  nn::LayerNorm<float> attention_norm_;
  Attention attention_;
  nn::LayerNorm<float> ff_norm_;
  nn::Dense<float> up_, down_;
};

class Transformer {
 public:
  Transformer(mt::Mesh& mesh, const Config& c, const mt::Layout& layout)
      : embed_(mesh, params_, "embed", mt::Dim("vocab", c.vocab), mt::Dim("model", c.model), c.seed,
               layout),
        final_norm_(mesh, params_, "final_norm", {mt::Dim("model", c.model)}, 1e-5, layout),
        head_(mesh, params_, "head", mt::Dim("model", c.model), mt::Dim("vocab", c.vocab), c.seed,
              true, layout) {
    position_ = params_.add(
        "position",
        mt::random_normal<float>(mesh, {mt::Dim("seq", c.length), mt::Dim("model", c.model)},
                                 layout, c.seed, "position", 0.0, 0.02));
    for (int b = 0; b < c.layers; ++b)
      blocks_.emplace_back(mesh, params_, "block" + std::to_string(b), c, layout);
  }

  /// tokens [batch, seq] -> logits [batch, seq, vocab].
  mt::Tensor<float> operator()(const mt::Tensor<float>& tokens) const {
    auto x = embed_(tokens) + position_;
    for (const auto& block : blocks_) x = block(std::move(x));
    return head_(final_norm_(x));
  }

  nn::Parameters<float>& parameters() { return params_; }

 private:
  nn::Parameters<float> params_;
  nn::Embedding<float> embed_;
  mt::Tensor<float> position_;
  std::vector<Block> blocks_;
  nn::LayerNorm<float> final_norm_;
  nn::Dense<float> head_;
};

}  // namespace transformer
