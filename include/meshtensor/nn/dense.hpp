#pragma once
// Dense: a fully connected layer from one named dim to another, as an einsum, so any split of the
// input, output or batch dims works (Mesh-TensorFlow's dense with `batch:rows; d_ff:cols`).

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/einsum.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/random.hpp"

namespace meshtensor::nn {

/**
 * y = x w + b from dim `in` to dim `out`: the output has x's dims with `in` replaced by `out`, in
 * its place. w [in, out] starts uniform in ±1/sqrt(in) (PyTorch's Linear), b [out] at zero.
 * `layout` splits the parameters: "d_ff:cols" splits w's and b's `d_ff`. Where `in` and `out`
 * share a name (model -> model), w's output dim is `<out>_out`, renamed in the result.
 *
 * ```cpp
 * nn::Dense<float> up(mesh, params, "ff/up", Dim("model", 512), Dim("d_ff", 2048), seed,
 *                     true, "d_ff:cols");
 * auto h = gelu(up(x));   // x [batch, seq, model] -> [batch, seq, d_ff]
 * ```
 */
template <class T = float>
class Dense {
 public:
  Dense(Mesh& mesh, Parameters<T>& params, const std::string& name, const Dim& in, const Dim& out,
        std::uint64_t seed, bool bias = true, const Layout& layout = {})
      : name_(name),
        in_(in),
        out_(out),
        weight_out_(in.name == out.name ? out.name + "_out" : out.name) {
    const double bound = 1.0 / std::sqrt(double(in.size));
    weight_ = params.add(name + "/weight",
                         random_uniform<T>(mesh, Shape{in, Dim(weight_out_, out.size)}, layout,
                                           seed, name + "/weight", -bound, bound));
    if (bias) bias_ = params.add(name + "/bias", zeros<T>(mesh, Shape{out}, layout));
  }

  /// The layer on activations of type A: T, or bfloat16 with fp32 parameters (rounded for the
  /// call; their gradients summed into fp32).
  template <class A>
  Tensor<A> operator()(const Tensor<A>& x) const {
    if (!x.shape().contains(in_.name) || x.shape().dim(in_.name).size != in_.size)
      throw ShapeError("Dense " + name_ + ": input " + x.shape().to_string() + " needs dim " +
                       detail::quote(in_.name) + " of size " + std::to_string(in_.size));
    if (in_.name != out_.name && x.shape().contains(out_.name))
      throw ShapeError("Dense " + name_ + ": input " + x.shape().to_string() +
                       " already has the output dim " + detail::quote(out_.name));
    std::vector<std::string> output;
    for (const auto& dim : x.shape())
      output.push_back(dim.name == in_.name ? weight_out_ : dim.name);
    Tensor<A> y = einsum({x, cast<A>(weight_)}, DimNames(output));
    if (weight_out_ != out_.name) y = rename(std::move(y), weight_out_, out_.name);
    return bias_.defined() ? std::move(y) + bias_ : y;
  }

  const Tensor<T>& weight() const { return weight_; }
  const Tensor<T>& bias() const { return bias_; }
  const Dim& in() const { return in_; }
  const Dim& out() const { return out_; }

 private:
  std::string name_;
  Dim in_, out_;
  std::string weight_out_;
  Tensor<T> weight_, bias_;
};

}  // namespace meshtensor::nn
