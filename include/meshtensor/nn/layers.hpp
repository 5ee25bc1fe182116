#pragma once
// Layers: parameters made once (named, initialised from a seed) and applied to tensors of any
// layout. Convolutions map a channel dim to a channel dim of the same name and a new size, so
// layers stack like the boxes of a network figure.

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/autodiff/recompute.hpp"
#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/nn/init.hpp"
#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/conv_concat.hpp"
#include "meshtensor/ops/conv_norm_conv.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/norm_conv.hpp"
#include "meshtensor/ops/norm_pool_conv.hpp"
#include "meshtensor/ops/norm_up_conv.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/create.hpp"

namespace meshtensor::nn {

/**
 * Convolution (or transposed convolution) from `in` channels to `out` channels, with bias. The
 * weight [kx, ky, kz, <in>, <in>_out] is He-normal initialised; the bias starts at zero.
 *
 * ```cpp
 * Conv<float> conv(mesh, params, "enc0/conv1", Dim{"channels", 1}, Dim{"channels", 8},
 *                  Window("x, y, z").kernel(3).padding("same"), seed);
 * auto h = conv(x);   // [batch, x, y, z, channels=8]
 * ```
 */
template <class T = float>
class Conv {
 public:
  Conv(Mesh& mesh, Parameters<T>& params, const std::string& name, const Dim& in, const Dim& out,
       Window window, std::uint64_t seed, bool transposed = false, bool bias = true,
       const Layout& layout = {})
      : window_(std::move(window)),
        channels_(in.name),
        out_name_(in.name + "_out"),
        output_name_(out.name),
        transposed_(transposed) {
    if (!window_.has_kernel())
      throw Error("Conv " + name + ": the window needs a kernel size, e.g. .kernel(3)");
    std::vector<Dim> dims;
    std::int64_t taps = 1;
    for (std::size_t i = 0; i < window_.spatial().size(); ++i) {
      dims.emplace_back(detail::kernel_dim(window_.spatial()[i]), window_.kernel_sizes()[i]);
      taps *= window_.kernel_sizes()[i];
    }
    dims.push_back(in);
    dims.emplace_back(out_name_, out.size);
    // Fan-in is what each output sums over: every tap of every input channel (for a transposed
    // convolution, the taps that reach one output: about taps / stride^d).
    const std::int64_t fan_in = taps * (transposed ? out.size : in.size);
    weight_ = params.add(name + "/weight",
                         he_normal<T>(mesh, Shape(dims), layout, seed, name + "/weight", fan_in));
    if (bias)
      bias_ =
          params.add(name + "/bias", zeros<T>(mesh, Shape{Dim(output_name_, out.size)}, layout));
  }

  /// The layer on activations of type A: T, or bfloat16 with fp32 parameters (rounded for the
  /// call; their gradients summed into fp32).
  template <class A>
  Tensor<A> operator()(const Tensor<A>& x) const {
    return finish(transposed_ ? conv_transpose(x, weight_, window_, channels_)
                              : conv(x, weight_, window_, channels_));
  }

  /// The layer's output from its convolution's `y` (computed by this layer's op or by one fused
  /// with it): the output-channel dim renamed, then the bias added.
  template <class A>
  Tensor<A> finish(Tensor<A> y) const {
    y = rename(std::move(y), out_name_, output_name_);  // both in place: y is ours alone
    return bias_.defined() ? std::move(y) + bias_ : y;
  }

  const Tensor<T>& weight() const { return weight_; }
  const Tensor<T>& bias() const { return bias_; }
  const Window& window() const { return window_; }
  bool transposed() const { return transposed_; }
  /// The input's channel dim, the weight's output-channel dim and the name the output gives it.
  const std::string& channels() const { return channels_; }
  const std::string& weight_output_channels() const { return out_name_; }
  const std::string& output_channels() const { return output_name_; }

 private:
  Window window_;
  std::string channels_, out_name_, output_name_;
  bool transposed_;
  Tensor<T> weight_, bias_;
};

/// The kinds of normalisation a block can use.
enum class NormKind { batch, instance, group, none };

inline NormKind parse_norm(const std::string& name) {
  if (name == "batch") return NormKind::batch;
  if (name == "instance") return NormKind::instance;
  if (name == "group") return NormKind::group;
  if (name == "none") return NormKind::none;
  throw Error("normalisation " + detail::quote(name) +
              " is not known; valid values are \"batch\", \"instance\", \"group\" and \"none\"");
}

/**
 * Batch, instance or group normalisation with a learned per-channel scale (gamma = 1) and shift
 * (beta = 0). Batch norm keeps running statistics (momentum 0.1, unbiased variance, as PyTorch) and
 * uses them when `training` is false.
 */
template <class T = float>
class Norm {
 public:
  Norm(Mesh& mesh, Parameters<T>& params, const std::string& name, NormKind kind,
       const Dim& channels, const DimNames& spatial, std::int64_t groups = 4, double momentum = 0.1,
       double epsilon = 1e-5, const Layout& layout = {})
      : kind_(kind),
        channels_(channels.name),
        spatial_(spatial),
        groups_(groups),
        momentum_(momentum),
        epsilon_(epsilon) {
    if (kind_ == NormKind::none) return;
    if ((kind_ == NormKind::instance || kind_ == NormKind::group) && spatial_.empty())
      throw Error("Norm " + name + ": instance and group norm take statistics over spatial dims;" +
                  " name them, e.g. \"x, y, z\"");
    const Shape shape{channels};
    gamma_ = params.add(name + "/gamma", full<T>(mesh, shape, layout, T(1)));
    beta_ = params.add(name + "/beta", zeros<T>(mesh, shape, layout));
    if (kind_ == NormKind::batch) {
      running_mean_ = params.add_state(name + "/running_mean", zeros<T>(mesh, shape, layout));
      running_var_ = params.add_state(name + "/running_var", full<T>(mesh, shape, layout, T(1)));
    }
    if (kind_ == NormKind::group && channels.size % groups_ != 0)
      throw Error("Norm " + name + ": " + std::to_string(channels.size) +
                  " channels do not split into " + std::to_string(groups_) + " groups");
  }

  /// Batch norm (or none) over every dim but `channels`: features without spatial dims too.
  Norm(Mesh& mesh, Parameters<T>& params, const std::string& name, NormKind kind,
       const Dim& channels)
      : Norm(mesh, params, name, kind, channels, DimNames{}) {}

  /// The normalised x, then `activation` (fused into batch norm's passes). x may be bfloat16 with
  /// fp32 parameters: batch statistics, gamma and beta and their gradients stay fp32.
  template <class A>
  Tensor<A> operator()(const Tensor<A>& x, bool training,
                       Activation activation = Activation::none) {
    if (kind_ == NormKind::batch && training) return batch_statistics(x, activation);
    auto y = normalized(x, training);
    return activation == Activation::relu ? relu(y) : y;
  }

  NormKind kind() const { return kind_; }
  const std::string& channels() const { return channels_; }
  double epsilon() const { return epsilon_; }
  const Tensor<T>& gamma() const { return gamma_; }
  const Tensor<T>& beta() const { return beta_; }

  /// Batch norm's running statistics moved towards a batch's `moments` (not while backward
  /// recomputes a forward: the statistics were taken the first time).
  void update_running(Mesh& mesh, const Moments<T>& moments) {
    if (autodiff::recomputing(mesh)) return;
    autodiff::NoGrad no_grad(mesh);
    const T m = T(momentum_);
    const double n = double(moments.count);
    const T unbias = T(n > 1 ? n / (n - 1) : 1.0);
    // Updated in place (the checkpoint holds these tensors), by ops: where the processor computes
    // on a device the statistics stay in its memory.
    auto update = [&](Tensor<T>& running, const Tensor<T>& batch, T weight) {
      const auto next = running * (T(1) - m) + relayout(batch, running.layout().layout()) * weight;
      kernels::copy_values(next.array().data(), std::int64_t(next.array().size()),
                           running.array().data());
    };
    update(running_mean_, moments.mean, m);
    update(running_var_, moments.variance, m * unbias);
  }

 private:
  template <class A>
  Tensor<A> normalized(const Tensor<A>& x, bool training) {
    // Instance and group norm of bfloat16 x take gamma and beta rounded to bfloat16 (their
    // gradients come back through the cast, summed in bfloat16).
    switch (kind_) {
      case NormKind::none:
        return x;
      case NormKind::instance:
        return instance_norm(x, cast<A>(gamma_), cast<A>(beta_), spatial_, epsilon_);
      case NormKind::group:
        return group_norm(x, cast<A>(gamma_), cast<A>(beta_), groups_, spatial_, channels_,
                          epsilon_);
      case NormKind::batch:
        break;
    }
    if (training) return batch_statistics(x, Activation::none);
    if constexpr (std::is_same_v<A, T>) {
      return (x - running_mean_) * (inverse_std() * gamma_) + beta_;
    } else {  // x * scale + shift, the per-channel coefficients computed in fp32, then rounded
      const Tensor<T> scale = inverse_std() * gamma_;
      return x * cast<A>(scale) + cast<A>(beta_ - running_mean_ * scale);
    }
  }

  // 1 / sqrt(running variance + epsilon), per channel, in double (where the statistics are).
  Tensor<T> inverse_std() const {
    Array<T> inverse = Array<T>::from_shape(running_var_.array().shape());
    kernels::norm_inverse_std(running_var_.array().data(), std::int64_t(inverse.size()), epsilon_,
                              inverse.data());
    return Tensor<T>(running_var_.mesh(), running_var_.layout(), std::move(inverse));
  }

  // Batch norm on the batch's statistics, which also update the running ones.
  template <class A>
  Tensor<A> batch_statistics(const Tensor<A>& x, Activation activation) {
    Moments<T> moments;
    auto y = batch_norm(x, gamma_, beta_, channels_, epsilon_, &moments, activation);
    update_running(x.mesh(), moments);
    return y;
  }

  NormKind kind_;
  std::string channels_;
  DimNames spatial_;
  std::int64_t groups_;
  double momentum_, epsilon_;
  Tensor<T> gamma_, beta_, running_mean_, running_var_;
};

/**
 * `norm` (with `activation`), then `conv`. Batch norm in training sends the convolution's halo
 * before its statistics are agreed (batch_norm_conv); other norms run one after the other.
 */
template <class T, class A>
Tensor<A> norm_conv(Norm<T>& norm, const Conv<T>& conv, const Tensor<A>& x, bool training,
                    Activation activation) {
  if (norm.kind() != NormKind::batch || !training || conv.transposed() ||
      norm.channels() != conv.channels())
    return conv(norm(x, training, activation));
  Moments<T> moments;
  auto y = batch_norm_conv(x, norm.gamma(), norm.beta(), conv.weight(), conv.window(),
                           conv.channels(), norm.epsilon(), &moments, activation);
  norm.update_running(x.mesh(), moments);
  return conv.finish(std::move(y));
}

/**
 * `norm` (with `activation`), then max-pooling over `pool`, then `conv`: a U-Net encoder level's
 * end and the next level's start. Returns {the normalised x (the level's skip), conv's output}.
 * Batch norm in training sends the convolution's halo as raw rows before its statistics are
 * agreed (batch_norm_pool_conv); other norms run one after the other.
 */
template <class T, class A>
std::pair<Tensor<A>, Tensor<A>> norm_pool_conv(Norm<T>& norm, const Window& pool,
                                               const Conv<T>& conv, const Tensor<A>& x,
                                               bool training, Activation activation) {
  if (norm.kind() != NormKind::batch || !training || conv.transposed() ||
      norm.channels() != conv.channels()) {
    Tensor<A> y = norm(x, training, activation);
    Tensor<A> out = conv(max_pool(y, pool));
    return {std::move(y), std::move(out)};
  }
  Moments<T> moments;
  auto [y, out] =
      batch_norm_pool_conv(x, norm.gamma(), norm.beta(), pool, conv.weight(), conv.window(),
                           conv.channels(), norm.epsilon(), &moments, activation);
  norm.update_running(x.mesh(), moments);
  return {std::move(y), conv.finish(std::move(out))};
}

/**
 * `norm` (with `activation`), then `up` (a transposed convolution), then `conv` of `skip` and the
 * up-sampled tensor concatenated along the channels: a U-Net decoder level's entry from the level
 * below. Batch norm in training sends the convolution's halo as the skip's rows and raw coarse
 * rows before its statistics are agreed (batch_norm_up_conv); other norms run one after the other.
 */
template <class T, class A>
Tensor<A> norm_up_conv(Norm<T>& norm, const Conv<T>& up, const Tensor<A>& skip, const Conv<T>& conv,
                       const Tensor<A>& x, bool training, Activation activation) {
  const std::string& c = conv.channels();
  if (norm.kind() != NormKind::batch || !training || !up.transposed() || conv.transposed() ||
      norm.channels() != c || up.channels() != c || up.output_channels() != c) {
    const Tensor<A> u = up(norm(x, training, activation));
    if (conv.transposed()) return conv(concat({skip, u}, c));
    return conv.finish(conv_concat({skip, u}, conv.weight(), conv.window(), c));
  }
  Moments<T> moments;
  auto y = batch_norm_up_conv(
      x, norm.gamma(), norm.beta(), UpSampling<T>{up.weight(), up.bias(), up.window()}, skip,
      conv.weight(), conv.window(), c, norm.epsilon(), &moments, activation);
  norm.update_running(x.mesh(), moments);
  return conv.finish(std::move(y));
}

/**
 * `first`, then `norm` (with `activation`), then `second`: a U-Net level's convolutions with the
 * normalisation between them. With `deep_halo`, where the layers allow — batch norm in training,
 * the first convolution without bias, the same window and channel dim throughout — one op whose
 * convolutions share a deep halo exchange (conv_norm_conv); else the layers one after the other.
 * The results are the same either way.
 */
template <class T, class A>
Tensor<A> conv_norm_conv(const Conv<T>& first, Norm<T>& norm, const Conv<T>& second, Tensor<A> x,
                         bool training, Activation activation, bool deep_halo) {
  const std::string& c = first.channels();
  const bool fits = norm.kind() == NormKind::batch && training && !first.bias().defined() &&
                    !first.transposed() && !second.transposed() &&
                    first.window() == second.window() && first.output_channels() == c &&
                    norm.channels() == c && second.channels() == c;
  if (!deep_halo || !fits) {
    x = first(x);  // the input freed before the second runs
    return norm_conv(norm, second, x, training, activation);
  }
  Moments<T> moments;
  auto y = meshtensor::conv_norm_conv(x, first.weight(), norm.gamma(), norm.beta(), second.weight(),
                                      first.window(), c, norm.epsilon(), &moments, activation);
  norm.update_running(x.mesh(), moments);
  return second.finish(std::move(y));
}

}  // namespace meshtensor::nn
