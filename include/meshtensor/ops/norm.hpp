#pragma once
// Normalisation with statistics over split dims. Each processor takes the count, mean and sum of
// squared deviations of its block per statistic (two passes, in double); the processors that split
// a reduced dim exchange those three numbers in one all-gather and combine them in rank order
// (Chan et al.'s parallel update), so every processor gets the same, numerically stable mean and
// variance. The gradient needs two sums per statistic: one fused all-reduce. Every per-statistic
// number stays in the processor's memory and is computed there by the norm kernels, so a GPU's
// normalisation never waits for the host nor the host for it.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/norm.hpp"
#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
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

// Per-key doubles in the processor's memory (moments, statistics, coefficients): on a GPU they
// stay there, computed and read by kernels. Shared by an op's forward, its recorded backward and
// whoever applies the same map to other boxes.
using KeyArray = std::shared_ptr<const Array<double>>;
inline std::shared_ptr<Array<double>> key_array(std::size_t n) {
  return std::make_shared<Array<double>>(Array<double>::from_shape({n}));
}

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
  KeyArray stats;     // [mean | variance | 1 / sqrt(variance + epsilon)], keys each
  KeyArray standard;  // [inv_std | -mean inv_std]: x̂ = a x + b

  std::int64_t key_count() const { return std::int64_t(keys); }
  const double* mean() const { return stats->data(); }
  const double* variance() const { return stats->data() + keys; }
  const double* scale() const { return standard->data(); }
  const double* shift() const { return standard->data() + keys; }
};

// The statistics of the block `data` (row-major) that `layout` gives this processor of `mesh`:
// each processor's moments, all-gathered along the axes that split reduced dims and combined in
// rank order (Chan et al.), so that every processor has the same, numerically stable values.
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
  const std::int64_t keys = st.key_count();

  Array<double> moments = Array<double>::from_shape({3 * st.keys});
  kernels::norm_moments(st.sizes, st.key_strides, keys, data, moments.data());
  // The processors along the axes that split reduced dims hold parts of the same statistics.
  for (const auto& name : reduced_names)
    if (auto axis = layout.mesh_axis_of(name)) st.axes |= AxisSet{1} << *axis;
  auto stats = key_array(3 * st.keys), standard = key_array(2 * st.keys);
  if (st.axes) {
    Communicator& group = mesh.group(st.axes);
    const std::size_t bytes = moments.size() * sizeof(double);
    Array<double> all = Array<double>::from_shape({moments.size() * std::size_t(group.size())});
    group.all_gather(moments.data(), bytes, all.data(),
                     std::vector<std::size_t>(std::size_t(group.size()), bytes), moments.space());
    kernels::norm_statistics(all.data(), group.size(), keys, double(st.count), epsilon,
                             stats->data());
  } else {
    kernels::norm_statistics(moments.data(), 1, keys, double(st.count), epsilon, stats->data());
  }
  kernels::norm_coefficients<double>(stats->data(), keys, nullptr, nullptr, standard->data(),
                                     standard->data() + st.keys);
  st.stats = std::move(stats);
  st.standard = std::move(standard);
  return st;
}

template <class T>
NormStatistics norm_statistics(const Tensor<T>& x, const DimNames& reduced, double epsilon,
                               const std::string& op) {
  return norm_statistics(x.mesh(), x.layout(), x.array().data(), reduced, epsilon, op);
}

// `values` doubles in S, in the processor's memory (rounded as a cast rounds).
template <class S>
Array<S> narrowed(const double* values, const kernels::Sizes& sizes) {
  Array<S> out = Array<S>::from_shape(to_xshape(sizes));
  kernels::narrow<double, S>(values, out.data(), std::int64_t(out.size()));
  return out;
}

// The statistics in their own type S (fp32 for bfloat16 activations).
template <class S>
void store_moments(const NormStatistics& st, Mesh& mesh, const Layout& layout,
                   Moments<S>* moments) {
  if (!moments) return;
  TensorLayout stats_layout(Shape(st.kept_dims), mesh.shape(), layout);
  moments->mean = Tensor<S>(mesh, stats_layout, narrowed<S>(st.mean(), st.kept_sizes));
  moments->variance = Tensor<S>(mesh, stats_layout, narrowed<S>(st.variance(), st.kept_sizes));
  moments->count = st.count;
}

// Per key, the sums of g' and of g' x̂ of a normalisation's backward (interleaved) over a block of
// `sizes` (the statistics' block, or one holding it), all-reduced along the axes that split
// reduced dims.
template <class T>
Array<double> gradient_sums(Mesh& mesh, const NormStatistics& st, const kernels::Sizes& sizes,
                            const T* g, const T* v, const double* scale, const double* shift,
                            const kernels::ReluMask<T>& mask) {
  Array<double> sums = Array<double>::from_shape({2 * st.keys});
  kernels::norm_gradient_sums(sizes, st.key_strides, st.key_count(), g, v, scale, shift, mask,
                              sums.data());
  if (st.axes) all_reduce(mesh.group(st.axes), sums, ReduceOp::sum);
  return sums;
}

// The input gradient's per-key terms p, q, r (keys each, one after the other) from the sums: of
// gamma x̂ + beta (gamma in the processor's memory), or with gamma null of x̂.
template <class W>
KeyArray gradient_terms(const NormStatistics& st, const W* gamma, const Array<double>& sums) {
  auto terms = key_array(3 * st.keys);
  double* t = terms->data();
  kernels::norm_gradient_terms(st.stats->data(), st.key_count(), gamma, sums.data(),
                               double(st.count), t, t + st.keys, t + 2 * st.keys);
  return terms;
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
  Array<T> out = Array<T>::from_shape(x.array().shape());
  kernels::norm_affine(st.sizes, st.key_strides, st.key_count(), x.array().data(), st.scale(),
                       st.shift(), -std::numeric_limits<T>::infinity(), out.data());
  Tensor<T> y(x.mesh(), x.layout(), std::move(out));

  // dx = inv_std * (g - mean(g) - y * mean(g * y)), the means over the reduced dims.
  autodiff::record(y, {x}, [y = y.detach(), st](const Tensor<T>& g, const std::vector<bool>&) {
    const T* pg = g.array().data();
    const T* py = y.array().data();
    // The sums of g and g y: y's own coefficients 1 and 0.
    Array<double> unit = Array<double>::from_shape({2 * st.keys});
    kernels::fill_values(unit.data(), st.key_count(), 1.0);
    kernels::fill_values(unit.data() + st.keys, st.key_count(), 0.0);
    const Array<double> sums = detail::gradient_sums(g.mesh(), st, st.sizes, pg, py, unit.data(),
                                                     unit.data() + st.keys, kernels::ReluMask<T>{});
    const detail::KeyArray terms = detail::gradient_terms<T>(st, nullptr, sums);
    const double* t = terms->data();
    Array<T> dx = Array<T>::from_shape(g.array().shape());
    kernels::norm_input_gradient(st.sizes, st.key_strides, st.key_count(), pg, py,
                                 kernels::ReluMask<T>{}, t, t + st.keys, t + 2 * st.keys,
                                 dx.data());
    return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), g.layout(), std::move(dx))};
  });
  return y;
}

/// What follows a normalisation in the same pass.
enum class Activation { none, relu };

namespace detail {

// gamma (x - mean) inv_std + beta = a x + b per key: [a | b], keys each, in the processor's
// memory, beside gamma (the parameter on the statistics' layout, which backward reads too).
template <class W>
struct AffineOfKey {
  KeyArray coefficients;
  Tensor<W> gamma;
  std::size_t keys = 0;

  const double* a() const { return coefficients->data(); }
  const double* b() const { return coefficients->data() + keys; }
};
template <class W>
AffineOfKey<W> affine_of_key(const NormStatistics& st, const Tensor<W>& gamma,
                             const Tensor<W>& beta, const TensorLayout& stats_layout) {
  AffineOfKey<W> f{key_array(2 * st.keys), relayout_to(gamma, stats_layout).detach(), st.keys};
  const Tensor<W> beta_here = relayout_to(beta, stats_layout);
  auto coefficients = std::const_pointer_cast<Array<double>>(f.coefficients);
  kernels::norm_coefficients(st.stats->data(), st.key_count(), f.gamma.array().data(),
                             beta_here.array().data(), coefficients->data(),
                             coefficients->data() + st.keys);
  return f;
}

// What a normalisation did to each element of its block: a x + b per key, then the floor — kept
// to do the same to other boxes of its input whose keys the block holds (a halo sent before the
// statistics were agreed: ops/norm_conv.hpp).
template <class T>
struct NormApplied {
  kernels::Sizes block_sizes;
  kernels::Strides key_strides;
  KeyArray coefficients;  // [a | b]
  std::size_t keys = 0;
  T floor;

  // `values` (row-major over `box`, whose dims are the block's) replaced by their outputs.
  void operator()(const Block& box, Buffer<T>& values) const {
    const kernels::Sizes sizes = box.sizes();
    for (std::size_t d = 0; d < sizes.size(); ++d)
      if (key_strides[d] != 0 && sizes[d] != block_sizes[d])
        throw Error("internal: a normalisation's box spans keys its block does not hold");
    Buffer<T> out(values.size());
    kernels::norm_affine(sizes, key_strides, std::int64_t(keys), values.data(),
                         coefficients->data(), coefficients->data() + keys, floor, out.data());
    values = std::move(out);
  }
};

// Whether each element's key is its index along the block's innermost dim (the channels, last).
inline bool keys_innermost(const NormStatistics& st) {
  if (st.sizes.empty() || std::int64_t(st.keys) != st.sizes.back()) return false;
  for (std::size_t d = 0; d + 1 < st.key_strides.size(); ++d)
    if (st.key_strides[d] != 0) return false;
  return st.key_strides.back() == 1;
}

// The map a convolution's CPU kernels apply as they read the norm's output (channels last), where
// this processor's convolutions read maps: the coefficients, read by the host (its own memory).
template <class T>
std::shared_ptr<const MappedRecipe<T>> mapped_recipe_of(const Tensor<T>& x,
                                                        const NormStatistics& st,
                                                        const KeyArray& coefficients, T floor) {
  if (!keys_innermost(st) || !kernels::reads_mapped_inputs()) return nullptr;
  const std::vector<double> ab = to_host_vector(*coefficients);
  kernels::ChannelAffine map{std::vector<double>(ab.begin(), ab.begin() + st.key_count()),
                             std::vector<double>(ab.begin() + st.key_count(), ab.end()),
                             double(floor)};
  return std::make_shared<const MappedRecipe<T>>(MappedRecipe<T>{x.detach(), std::move(map)});
}

// Sums per key (`which` 0: of g', the beta's gradient; 1: of g' x̂, gamma's) as a tensor of the
// parameter's `layout`.
template <class W>
Tensor<W> per_key_gradient(Mesh& mesh, const NormStatistics& st, const Array<double>& sums,
                           int which, const TensorLayout& stats_layout,
                           const TensorLayout& layout) {
  Array<double> picked = Array<double>::from_shape({st.keys});
  kernels::copy_box(kernels::Sizes{st.key_count()}, sums.data() + which, kernels::Strides{2},
                    picked.data(), kernels::Strides{1});
  return relayout_to(Tensor<W>(mesh, stats_layout, narrowed<W>(picked.data(), st.kept_sizes)),
                     layout);
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
  const AffineOfKey<W> affine = affine_of_key(st, gamma, beta, stats_layout);
  // The output is computed by its recipe, which stays with it: an op that saves it for backward
  // (the next convolution) keeps the recipe, and the output itself is freed after forward.
  const T floor = activation == Activation::relu ? T(0) : -std::numeric_limits<T>::infinity();
  if (applied) *applied = {st.sizes, st.key_strides, affine.coefficients, st.keys, floor};
  auto recipe = std::make_shared<const typename Tensor<T>::Recipe>(
      [x = x.detach(), st, coefficients = affine.coefficients, floor](T* into) {
        kernels::norm_affine(st.sizes, st.key_strides, st.key_count(), x.array().data(),
                             coefficients->data(), coefficients->data() + st.keys, floor, into);
      });
  auto mapped = mapped_recipe_of(x, st, affine.coefficients, floor);
  const bool read_later = written == OutputBlock::on_read && mapped;
  Tensor<T> y = Tensor<T>::computed_on_read(mesh, x.layout(), std::move(recipe), std::move(mapped));
  if (!read_later) std::as_const(y).array();  // written now (a const read keeps the recipe)

  // Backward keeps x alone: the ReLU's mask is where the output, computed again, is positive.
  autodiff::record_mixed(
      y, std::make_tuple(x, gamma, beta),
      [x = x.detach(), relu = activation == Activation::relu, affine, st, stats_layout,
       gamma_layout = gamma.layout(),
       beta_layout = beta.layout()](const Tensor<T>& g, const std::array<bool, 3>& needed) {
        const T* pg = g.array().data();
        const T* px = x.array().data();
        const kernels::ReluMask<T> mask{relu ? px : nullptr, affine.a(), affine.b()};
        const Array<double> sums =  // of g' and g' x̂, per key
            gradient_sums(g.mesh(), st, st.sizes, pg, px, st.scale(), st.shift(), mask);
        std::tuple<Tensor<T>, Tensor<W>, Tensor<W>> grads;
        if (needed[0]) {
          const KeyArray terms = gradient_terms(st, affine.gamma.array().data(), sums);
          const double* t = terms->data();
          Array<T> dx = Array<T>::from_shape(g.array().shape());
          kernels::norm_input_gradient(st.sizes, st.key_strides, st.key_count(), pg, px, mask, t,
                                       t + st.keys, t + 2 * st.keys, dx.data());
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
  detail::position_in("batch_norm", x, channels);
  const std::vector<std::string> reduced = detail::batch_norm_reduced(x.shape(), channels);
  if (detail::affine_per_key(x, reduced, gamma, beta))
    return detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation);
  if constexpr (!std::is_same_v<T, W>) {
    throw ShapeError(
        "batch_norm: with fp32 gamma and beta for bfloat16 x, gamma and beta must be " +
        detail::quote(channels) + " alone; they are " + gamma.shape().to_string() + " and " +
        beta.shape().to_string());
  } else {
    detail::require_dims_of_x("batch_norm", "gamma", gamma, x);
    detail::require_dims_of_x("batch_norm", "beta", beta, x);
    auto y = normalize(x, reduced, epsilon, moments) * gamma + beta;
    return activation == Activation::relu ? relu(y) : y;
  }
}

/// Instance norm: statistics over the spatial dims, per batch entry and channel.
template <class T>
Tensor<T> instance_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                        const DimNames& spatial, double epsilon = 1e-5) {
  detail::require_dims("instance_norm", x, spatial);
  detail::require_dims_of_x("instance_norm", "gamma", gamma, x);
  detail::require_dims_of_x("instance_norm", "beta", beta, x);
  return normalize(x, spatial, epsilon) * gamma + beta;
}

/// Group norm: the channels in `groups` consecutive groups, statistics over the spatial dims and
/// the channels of each group, per batch entry.
template <class T>
Tensor<T> group_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                     std::int64_t groups, const DimNames& spatial,
                     const std::string& channels = "channels", double epsilon = 1e-5) {
  const std::int64_t c = detail::size_in("group_norm", x, channels);
  detail::require_dims("group_norm", x, spatial);
  detail::require_dims_of_x("group_norm", "gamma", gamma, x);
  detail::require_dims_of_x("group_norm", "beta", beta, x);
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
