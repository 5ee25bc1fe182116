#pragma once
// Normalisation with statistics over split dims. Each processor takes the count, mean and sum of
// squared deviations of its block per statistic (two passes, in double); the processors that split
// a reduced dim exchange those three numbers in one all-gather and combine them in rank order
// (Chan et al.'s parallel update), so every processor gets the same, numerically stable mean and
// variance. The gradient needs two sums per statistic: one fused all-reduce.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/device/transfer.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/norm.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// Mean and (biased) variance over the reduced dims, one per index of the kept dims.
template <class T>
struct Moments {
  Tensor<T> mean, variance;
  std::int64_t count = 0;  // elements each statistic was taken over
};

namespace detail {

// A statistic's count, mean and sum of squared deviations, combined pairwise (Chan, Golub and
// LeVeque) by the same formula on every backend.
using Partial = kernels::shared::PartialMoments;
using kernels::shared::combine_moments;

// A block's statistics over the reduced dims, one per index of the kept dims (its "key"), the
// same on every processor.
struct NormStatistics {
  kernels::Sizes sizes;          // the block
  kernels::Strides key_strides;  // an element's key (its statistic's index), along each dim
  std::size_t keys = 0;          // statistics in this block
  AxisSet axes = 0;              // mesh axes that split reduced dims
  std::int64_t count = 1;        // elements each statistic is taken over (globally)
  std::vector<Dim> kept_dims;
  kernels::Sizes kept_sizes;
  std::vector<double> mean, inv_std, variance;
};

// The statistics of the block `data` (row-major) that `layout` gives this processor of `mesh`.
template <class T>
NormStatistics norm_statistics(Mesh& mesh, const TensorLayout& layout, const T* data,
                               const DimNames& reduced, double epsilon, const std::string& op) {
  const Shape& shape = layout.shape();
  NormStatistics st;
  std::vector<std::string> reduced_names;
  for (const auto& name : reduced)
    if (!shape.contains(name))
      throw ShapeError(op + ": tensor " + layout.to_string() + " has no dim " + quote(name));
  for (const auto& dim : shape) {
    if (reduced.contains(dim.name)) {
      reduced_names.push_back(dim.name);
      st.count *= dim.size;
    } else {
      st.kept_dims.push_back(dim);
    }
  }
  st.sizes = layout.block(mesh.coord()).sizes();
  // Blocks are visited in memory order (all statistics at once, so channels-last data streams
  // through once per pass), each element with its statistic's index.
  for (std::size_t d = 0; d < shape.rank(); ++d)
    if (!reduced.contains(shape[d].name)) st.kept_sizes.push_back(st.sizes[d]);
  const auto kept_row_major = kernels::row_major_strides(st.kept_sizes);
  st.key_strides.assign(shape.rank(), 0);
  for (std::size_t d = 0, k = 0; d < shape.rank(); ++d)
    if (!reduced.contains(shape[d].name)) st.key_strides[d] = kept_row_major[k++];
  st.keys = static_cast<std::size_t>(kernels::num_elements(st.kept_sizes));

  std::vector<Partial> partial =
      kernels::norm_moments(st.sizes, st.key_strides, std::int64_t(st.keys), data);

  // The processors along the axes that split reduced dims hold parts of the same statistics.
  for (const auto& name : reduced_names)
    if (auto axis = layout.mesh_axis_of(name)) st.axes |= AxisSet{1} << *axis;
  if (st.axes) {
    Communicator& group = mesh.group(st.axes);
    std::vector<double> mine;
    for (const auto& p : partial) mine.insert(mine.end(), {p.count, p.mean, p.m2});
    const auto all = all_gather(group, mine);
    const std::size_t k = partial.size();
    for (std::size_t i = 0; i < k; ++i) {
      Partial total;
      for (int r = 0; r < group.size(); ++r) {
        const double* q = all.data() + (r * k + i) * 3;
        total = combine_moments(total, {q[0], q[1], q[2]});
      }
      partial[i] = total;
    }
  }
  for (const auto& p : partial) {
    st.mean.push_back(p.mean);
    st.variance.push_back(p.m2 / double(st.count));
    st.inv_std.push_back(1.0 / std::sqrt(st.variance.back() + epsilon));
  }
  return st;
}

template <class T>
NormStatistics norm_statistics(const Tensor<T>& x, const DimNames& reduced, double epsilon,
                               const std::string& op) {
  return norm_statistics(x.mesh(), x.layout(), x.array().data(), reduced, epsilon, op);
}

// The statistics in their own type S (fp32 for bfloat16 activations).
template <class S>
void store_moments(const NormStatistics& st, Mesh& mesh, const Layout& layout,
                   Moments<S>* moments) {
  if (!moments) return;
  TensorLayout stats_layout(Shape(st.kept_dims), mesh.shape(), layout);
  const std::vector<S> mean(st.mean.begin(), st.mean.end()),
      variance(st.variance.begin(), st.variance.end());
  Array<S> m = array_from_host(mean, to_xshape(st.kept_sizes));
  Array<S> v = array_from_host(variance, to_xshape(st.kept_sizes));
  moments->mean = Tensor<S>(mesh, stats_layout, std::move(m));
  moments->variance = Tensor<S>(mesh, stats_layout, std::move(v));
  moments->count = st.count;
}

}  // namespace detail

/**
 * (x - mean) / sqrt(variance + epsilon), with the mean and variance taken over `reduced` for each
 * index of the other dims. Batch norm reduces everything but the channels; instance norm the
 * spatial dims.
 */
template <class T>
Tensor<T> normalize(const Tensor<T>& x, const DimNames& reduced, double epsilon,
                    Moments<T>* moments = nullptr) {
  const auto st = detail::norm_statistics(x, reduced, epsilon, "normalize");
  detail::store_moments(st, x.mesh(), x.layout().layout(), moments);
  const T* in = x.array().data();
  Array<T> out = Array<T>::from_shape(x.array().shape());
  T* o = out.data();
  std::vector<double> shift(st.keys);  // y = inv_std x + shift
  for (std::size_t k = 0; k < st.keys; ++k) shift[k] = -st.mean[k] * st.inv_std[k];
  kernels::norm_affine(st.sizes, st.key_strides, in, st.inv_std, shift,
                       -std::numeric_limits<T>::infinity(), o);
  Tensor<T> y(x.mesh(), x.layout(), std::move(out));

  // dx = inv_std * (g - mean(g) - y * mean(g * y)), the means over the reduced dims.
  autodiff::record(y, {x}, [y = y.detach(), st](const Tensor<T>& g, const std::vector<bool>&) {
    const T* pg = g.array().data();
    const T* py = y.array().data();
    const std::vector<double> ones(st.keys, 1.0), zeros(st.keys, 0.0);
    std::vector<double> sums = kernels::norm_gradient_sums(  // of g and g y, per key
        st.sizes, st.key_strides, pg, py, ones, zeros, kernels::ReluMask<T>{});
    if (st.axes) all_reduce(g.mesh().group(st.axes), sums, ReduceOp::sum);
    // dx = a g + b y + c per key.
    std::vector<double> b(st.keys), c(st.keys);
    for (std::size_t k = 0; k < st.keys; ++k) {
      const double n = double(st.count);
      b[k] = -st.inv_std[k] * sums[2 * k + 1] / n;
      c[k] = -st.inv_std[k] * sums[2 * k] / n;
    }
    Array<T> dx = Array<T>::from_shape(g.array().shape());
    T* pd = dx.data();
    kernels::norm_input_gradient(st.sizes, st.key_strides, pg, py, kernels::ReluMask<T>{},
                                 st.inv_std, b, c, pd);
    return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), g.layout(), std::move(dx))};
  });
  return y;
}

/// What follows a normalisation in the same pass.
enum class Activation { none, relu };

namespace detail {

// A per-key parameter (gamma or beta) as doubles, one per statistic of `st` on this processor.
template <class W>
std::vector<double> per_key_values(const Tensor<W>& t, const TensorLayout& stats_layout) {
  const auto here = relayout_to(t, stats_layout);
  const std::vector<W> values = to_host_vector(here.array());
  return std::vector<double>(values.begin(), values.end());
}

// gamma * (x - mean) * inv_std + beta = a x + b per key.
struct AffineOfKey {
  std::vector<double> a, b;
};
inline AffineOfKey affine_of_key(const NormStatistics& st, const std::vector<double>& gamma,
                                 const std::vector<double>& beta) {
  AffineOfKey f{std::vector<double>(st.keys), std::vector<double>(st.keys)};
  for (std::size_t k = 0; k < st.keys; ++k) {
    f.a[k] = gamma[k] * st.inv_std[k];
    f.b[k] = beta[k] - st.mean[k] * gamma[k] * st.inv_std[k];
  }
  return f;
}

// What a normalisation did to each element of its block: a x + b per key, then the floor — kept
// to do the same to other boxes of its input whose keys the block holds (a halo sent before the
// statistics were agreed: ops/norm_conv.hpp).
template <class T>
struct NormApplied {
  kernels::Sizes block_sizes;
  kernels::Strides key_strides;
  AffineOfKey affine;
  T floor;

  // `values` (row-major over `box`, whose dims are the block's) replaced by their outputs.
  void operator()(const Block& box, Buffer<T>& values) const {
    const kernels::Sizes sizes = box.sizes();
    for (std::size_t d = 0; d < sizes.size(); ++d)
      if (key_strides[d] != 0 && sizes[d] != block_sizes[d])
        throw Error("internal: a normalisation's box spans keys its block does not hold");
    Buffer<T> out(values.size());
    kernels::norm_affine(sizes, key_strides, values.data(), affine.a, affine.b, floor, out.data());
    values = std::move(out);
  }
};

// x̂ = inv_std x + shift per key.
inline std::vector<double> standardising_shift(const NormStatistics& st) {
  std::vector<double> shift(st.keys);
  for (std::size_t k = 0; k < st.keys; ++k) shift[k] = -st.mean[k] * st.inv_std[k];
  return shift;
}

// The input gradient of gamma x̂ + beta from the sums S1 = sum g', S2 = sum g' x̂ (interleaved):
// dx = gamma inv_std (g' - S1 / n - x̂ S2 / n) = p g' + q x + r per key.
struct InputGradientTerms {
  std::vector<double> p, q, r;
};
inline InputGradientTerms input_gradient_terms(const NormStatistics& st,
                                               const std::vector<double>& gamma,
                                               const std::vector<double>& sums) {
  InputGradientTerms t{std::vector<double>(st.keys), std::vector<double>(st.keys),
                       std::vector<double>(st.keys)};
  for (std::size_t k = 0; k < st.keys; ++k) {
    const double n = double(st.count), scale = gamma[k] * st.inv_std[k];
    const double slope = scale * st.inv_std[k] * sums[2 * k + 1] / n;
    t.p[k] = scale;
    t.q[k] = -slope;
    t.r[k] = -scale * sums[2 * k] / n + slope * st.mean[k];
  }
  return t;
}

// Whether each element's key is its index along the block's innermost dim (the channels, last).
inline bool keys_innermost(const NormStatistics& st) {
  if (st.sizes.empty() || std::int64_t(st.keys) != st.sizes.back()) return false;
  for (std::size_t d = 0; d + 1 < st.key_strides.size(); ++d)
    if (st.key_strides[d] != 0) return false;
  return st.key_strides.back() == 1;
}

// Sums per key (`which` 0: of g', the beta's gradient; 1: of g' x̂, gamma's) as a tensor of the
// parameter's `layout`.
template <class W>
Tensor<W> per_key_gradient(Mesh& mesh, const NormStatistics& st, const std::vector<double>& sums,
                           int which, const TensorLayout& stats_layout,
                           const TensorLayout& layout) {
  std::vector<W> values(st.keys);
  for (std::size_t k = 0; k < st.keys; ++k) values[k] = static_cast<W>(sums[2 * k + which]);
  Array<W> v = array_from_host(values, to_xshape(st.kept_sizes));
  return relayout_to(Tensor<W>(mesh, stats_layout, std::move(v)), layout);
}

// When normalize_affine writes its output block: now, or when it is first read — for a consumer
// that computes it from the input as it reads it (a convolution, through mapped_recipe()).
enum class OutputBlock { now, on_read };

/**
 * activation(gamma * (x - mean) * inv_std + beta) in one pass, for gamma and beta over exactly the
 * kept dims (batch norm's channels). It keeps x alone (not x̂, not the output: the ReLU's mask is
 * recomputed from x); backward is one pass for the sums, one for dx:
 *   g' = g masked by the ReLU, dbeta = sum g', dgamma = sum g' x̂,
 *   dx = gamma inv_std (g' - dbeta / n - x̂ dgamma / n).
 * gamma, beta and the statistics have the parameters' type W: T, or fp32 for bfloat16 x (their
 * gradients summed in double and rounded once into fp32). `written`: OutputBlock::on_read leaves
 * the output's block to be computed when first read, where a consumer can map x instead.
 */
template <class T, class W>
Tensor<T> normalize_affine(const Tensor<T>& x, const DimNames& reduced, const Tensor<W>& gamma,
                           const Tensor<W>& beta, double epsilon, Moments<W>* moments,
                           Activation activation,
                           std::common_type_t<NormApplied<T>>* applied = nullptr,
                           OutputBlock written = OutputBlock::now) {
  const auto st = norm_statistics(x, reduced, epsilon, "batch_norm");
  store_moments(st, x.mesh(), x.layout().layout(), moments);
  Mesh& mesh = x.mesh();
  const TensorLayout stats_layout(Shape(st.kept_dims), mesh.shape(), x.layout().layout());
  const auto g_scale = per_key_values(gamma, stats_layout);
  const AffineOfKey affine = affine_of_key(st, g_scale, per_key_values(beta, stats_layout));
  const std::vector<double>&a_key = affine.a, &b_key = affine.b;  // y = a x + b
  // The output is computed by its recipe, which stays with it: an op that saves it for backward
  // (the next convolution) keeps the recipe, and the output itself is freed after forward.
  const T floor = activation == Activation::relu ? T(0) : -std::numeric_limits<T>::infinity();
  if (applied) *applied = {st.sizes, st.key_strides, affine, floor};
  auto recipe = std::make_shared<const typename Tensor<T>::Recipe>(
      [x = x.detach(), st, a_key, b_key, floor](T* into) {
        const T* in = x.array().data();
        kernels::norm_affine(st.sizes, st.key_strides, in, a_key, b_key, floor, into);
      });
  auto mapped = keys_innermost(st) ? std::make_shared<const MappedRecipe<T>>(
                                         MappedRecipe<T>{x.detach(), {a_key, b_key, double(floor)}})
                                   : nullptr;
  const bool read_later = written == OutputBlock::on_read && mapped;
  Tensor<T> y = Tensor<T>::computed_on_read(mesh, x.layout(), std::move(recipe), std::move(mapped));
  if (!read_later) std::as_const(y).array();  // written now (a const read keeps the recipe)

  // Backward keeps x alone: the ReLU's mask is where the output, computed again, is positive.
  autodiff::record_mixed(
      y, std::make_tuple(x, gamma, beta),
      [x = x.detach(), relu = activation == Activation::relu, a_key, b_key, st, g_scale,
       stats_layout, gamma_layout = gamma.layout(),
       beta_layout = beta.layout()](const Tensor<T>& g, const std::array<bool, 3>& needed) {
        const T* pg = g.array().data();
        const T* px = x.array().data();
        const kernels::ReluMask<T> mask{relu ? px : nullptr, &a_key, &b_key};
        std::vector<double> sums = kernels::norm_gradient_sums(  // of g' and g' x̂, per key
            st.sizes, st.key_strides, pg, px, st.inv_std, standardising_shift(st), mask);
        if (st.axes) all_reduce(g.mesh().group(st.axes), sums, ReduceOp::sum);
        std::tuple<Tensor<T>, Tensor<W>, Tensor<W>> grads;
        if (needed[0]) {
          const auto [p, q, r] = input_gradient_terms(st, g_scale, sums);
          Array<T> dx = Array<T>::from_shape(g.array().shape());
          kernels::norm_input_gradient(st.sizes, st.key_strides, pg, px, mask, p, q, r, dx.data());
          std::get<0>(grads) = Tensor<T>(g.mesh(), g.layout(), std::move(dx));
        }
        if (needed[1])
          std::get<1>(grads) =
              per_key_gradient<W>(g.mesh(), st, sums, 1, stats_layout, gamma_layout);
        if (needed[2])
          std::get<2>(grads) =
              per_key_gradient<W>(g.mesh(), st, sums, 0, stats_layout, beta_layout);
        return grads;
      });
  return y;
}

// gamma and beta have exactly the dims the statistics are kept per, in that order.
template <class T, class W>
bool affine_per_key(const Tensor<T>& x, const DimNames& reduced, const Tensor<W>& gamma,
                    const Tensor<W>& beta) {
  std::vector<Dim> kept;
  for (const auto& dim : x.shape())
    if (!reduced.contains(dim.name)) kept.push_back(dim);
  return gamma.shape() == Shape(kept) && beta.shape() == Shape(kept);
}

}  // namespace detail

namespace detail {
// The dims batch norm's statistics sum over: all but the channels.
inline std::vector<std::string> batch_norm_reduced(const Shape& shape,
                                                   const std::string& channels) {
  std::vector<std::string> reduced;
  for (const auto& dim : shape)
    if (dim.name != channels) reduced.push_back(dim.name);
  return reduced;
}
}  // namespace detail

/**
 * Batch norm in training mode: statistics over every dim but `channels`, then gamma * x̂ + beta
 * (gamma and beta have just the `channels` dim), then `activation` — all in one pass each way.
 * `moments` receives the batch statistics. bfloat16 x takes fp32 gamma and beta (the statistics
 * and the parameters' gradients in fp32), or bfloat16 ones.
 */
template <class T, class W>
Tensor<T> batch_norm(const Tensor<T>& x, const Tensor<W>& gamma, const Tensor<W>& beta,
                     const std::string& channels = "channels", double epsilon = 1e-5,
                     std::common_type_t<Moments<W>>* moments = nullptr,
                     Activation activation = Activation::none) {
  static_assert(std::is_same_v<T, W> || (std::is_same_v<T, bfloat16> && std::is_same_v<W, float>),
                "batch_norm's gamma and beta have x's element type, or fp32 for bfloat16 x");
  const std::vector<std::string> reduced = detail::batch_norm_reduced(x.shape(), channels);
  if (detail::affine_per_key(x, reduced, gamma, beta))
    return detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation);
  if constexpr (!std::is_same_v<T, W>) {
    throw ShapeError(
        "batch_norm: with fp32 gamma and beta for bfloat16 x, gamma and beta must be " +
        detail::quote(channels) + " alone; they are " + gamma.shape().to_string() + " and " +
        beta.shape().to_string());
  } else {
    auto y = normalize(x, reduced, epsilon, moments) * gamma + beta;
    return activation == Activation::relu ? relu(y) : y;
  }
}

/// Instance norm: statistics over the spatial dims, per batch entry and channel.
template <class T>
Tensor<T> instance_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                        const DimNames& spatial, double epsilon = 1e-5) {
  return normalize(x, spatial, epsilon) * gamma + beta;
}

/// Group norm: the channels in `groups` consecutive groups, statistics over the spatial dims and
/// the channels of each group, per batch entry.
template <class T>
Tensor<T> group_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                     std::int64_t groups, const DimNames& spatial,
                     const std::string& channels = "channels", double epsilon = 1e-5) {
  const std::int64_t c = x.shape().dim(channels).size;
  if (groups < 1 || c % groups != 0)
    throw ShapeError("group_norm: " + std::to_string(c) + " channels do not split into " +
                     std::to_string(groups) + " equal groups");
  const std::string group_dim = channels + "_group", within = channels + "_in_group";
  auto grouped = split_dim(x, channels, Dim(group_dim, groups), Dim(within, c / groups));
  std::vector<std::string> reduced = spatial.names();
  reduced.push_back(within);
  auto y = merge_dims(normalize(grouped, reduced, epsilon), group_dim, within, channels);
  return relayout(y, x.layout().layout()) * gamma + beta;
}

}  // namespace meshtensor
