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
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/compute_threads.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#include "meshtensor/memory/array.hpp"
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

struct Partial {
  double count = 0, mean = 0, m2 = 0;
};

// Chan, Golub and LeVeque's pairwise combination of two partial statistics.
inline Partial combine(const Partial& a, const Partial& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count, delta = b.mean - a.mean;
  return {n, a.mean + delta * b.count / n, a.m2 + b.m2 + delta * delta * a.count * b.count / n};
}

// Sums of W terms per statistic over a block: term(offset, key) for every element, added into
// the key's W sums; the block split over the processor's compute threads, each with its own sums.
template <std::size_t W, class Term>
std::vector<double> sum_per_key(const kernels::Sizes& sizes,
                                const std::array<kernels::Strides, 2>& visit, std::size_t keys,
                                Term&& term) {
  const int threads = compute_threads();
  std::vector<std::vector<double>> parts(threads, std::vector<double>(keys * W, 0.0));
  const int used = kernels::for_each_part<2>(
      sizes, visit, threads,
      [&](int p, const kernels::Sizes& sub, const std::array<std::int64_t, 2>& base) {
        double* acc = parts[p].data();
        kernels::for_each_offset<2>(sub, visit, [&](const std::array<std::int64_t, 2>& o) {
          const std::int64_t at = base[0] + o[0], key = base[1] + o[1];
          const std::array<double, W> t = term(at, key);
          for (std::size_t j = 0; j < W; ++j) acc[key * W + j] += t[j];
        });
      });
  for (int p = 1; p < used; ++p)
    for (std::size_t i = 0; i < keys * W; ++i) parts[0][i] += parts[p][i];
  return std::move(parts[0]);
}

}  // namespace detail

namespace detail {

// A block's statistics over the reduced dims, one per index of the kept dims (its "key"), the
// same on every processor.
struct NormStatistics {
  kernels::Sizes sizes;                   // the block
  std::array<kernels::Strides, 2> visit;  // an element's offset and its key, in memory order
  std::size_t keys = 0;                   // statistics in this block
  AxisSet axes = 0;                       // mesh axes that split reduced dims
  std::int64_t count = 1;                 // elements each statistic is taken over (globally)
  std::vector<Dim> kept_dims;
  kernels::Sizes kept_sizes;
  std::vector<double> mean, inv_std, variance;

  // Whether an element's key is its offset modulo `keys`: the kept dims are the block's innermost
  // (batch norm on channels-last blocks), so the block is rows of `keys` contiguous values and the
  // loops below run over rows, vectorised along them.
  bool keys_innermost() const {
    if (keys == 0) return false;
    std::int64_t expect = 1;
    bool in_keys = true;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] == 1) continue;
      if (in_keys && visit[1][d] == expect && expect < std::int64_t(keys)) {
        expect *= sizes[d];
        continue;
      }
      in_keys = false;
      if (visit[1][d] != 0) return false;
    }
    return expect == std::int64_t(keys);
  }
  std::int64_t rows() const { return kernels::num_elements(sizes) / std::int64_t(keys); }
};

// f(first_row, end_row) over the rows of a keys-innermost block, on the compute threads.
template <class F>
int for_row_ranges(std::int64_t rows, F&& f) {
  return kernels::for_each_part<1>(
      {rows}, {kernels::Strides{1}}, compute_threads(),
      [&](int p, const kernels::Sizes& sub, const std::array<std::int64_t, 1>& base) {
        f(p, base[0], base[0] + sub[0]);
      });
}

// Per key, the W sums of term(value offset, key) over a keys-innermost block.
template <std::size_t W, class Term>
std::vector<double> sum_rows(const NormStatistics& st, Term&& term) {
  const std::size_t keys = st.keys;
  std::vector<std::vector<double>> parts(compute_threads(), std::vector<double>(keys * W, 0.0));
  const int used = for_row_ranges(st.rows(), [&](int p, std::int64_t begin, std::int64_t end) {
    double* acc = parts[p].data();
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t row = r * std::int64_t(keys);
      for (std::size_t k = 0; k < keys; ++k) {
        const std::array<double, W> t = term(row + std::int64_t(k), k);
        for (std::size_t j = 0; j < W; ++j) acc[j * keys + k] += t[j];
      }
    }
  });
  for (int p = 1; p < used; ++p)
    for (std::size_t i = 0; i < keys * W; ++i) parts[0][i] += parts[p][i];
  // Interleaved per key, as sum_per_key returns them.
  std::vector<double> out(keys * W);
  for (std::size_t k = 0; k < keys; ++k)
    for (std::size_t j = 0; j < W; ++j) out[k * W + j] = parts[0][j * keys + k];
  return out;
}

// sum_rows where it applies, else the general memory-order walk.
template <std::size_t W, class Term>
std::vector<double> sum_keys(const NormStatistics& st, Term&& term) {
  if (st.keys_innermost()) return sum_rows<W>(st, term);
  return sum_per_key<W>(st.sizes, st.visit, st.keys, term);
}

// f(value offset, key) for every element, on the compute threads.
template <class F>
void for_each_value(const NormStatistics& st, F&& f) {
  if (st.keys_innermost()) {
    const std::int64_t keys = std::int64_t(st.keys);
    for_row_ranges(st.rows(), [&](int, std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r)
        for (std::int64_t k = 0; k < keys; ++k) f(r * keys + k, k);
    });
    return;
  }
  kernels::parallel_for_each_offset<2>(
      st.sizes, st.visit, compute_threads(),
      [&](const std::array<std::int64_t, 2>& at) { f(at[0], at[1]); });
}

template <class T>
NormStatistics norm_statistics(const Tensor<T>& x, const DimNames& reduced, double epsilon,
                               const std::string& op) {
  const Shape& shape = x.shape();
  NormStatistics st;
  std::vector<std::string> reduced_names;
  for (const auto& name : reduced)
    if (!shape.contains(name))
      throw ShapeError(op + ": tensor " + x.layout().to_string() + " has no dim " + quote(name));
  for (const auto& dim : shape) {
    if (reduced.contains(dim.name)) {
      reduced_names.push_back(dim.name);
      st.count *= dim.size;
    } else {
      st.kept_dims.push_back(dim);
    }
  }
  Mesh& mesh = x.mesh();
  st.sizes = x.block().sizes();
  // Blocks are visited in memory order (all statistics at once, so channels-last data streams
  // through once per pass); the second offset of each element is its statistic's index.
  std::int64_t local_count = 1;
  for (std::size_t d = 0; d < shape.rank(); ++d)
    if (reduced.contains(shape[d].name))
      local_count *= st.sizes[d];
    else
      st.kept_sizes.push_back(st.sizes[d]);
  const auto kept_row_major = kernels::row_major_strides(st.kept_sizes);
  kernels::Strides key_strides(shape.rank(), 0);
  for (std::size_t d = 0, k = 0; d < shape.rank(); ++d)
    if (!reduced.contains(shape[d].name)) key_strides[d] = kept_row_major[k++];
  st.keys = static_cast<std::size_t>(kernels::num_elements(st.kept_sizes));
  st.visit = {kernels::row_major_strides(st.sizes), key_strides};
  const T* in = x.local().data();

  // Local statistics per key, in two passes.
  const auto sums = sum_keys<1>(
      st, [&](std::int64_t at, std::int64_t) { return std::array<double, 1>{double(in[at])}; });
  std::vector<Partial> partial(st.keys);
  for (std::size_t k = 0; k < st.keys; ++k) {
    partial[k].count = double(local_count);
    partial[k].mean = local_count > 0 ? sums[k] / double(local_count) : 0.0;
  }
  std::vector<double> local_mean(st.keys);
  for (std::size_t k = 0; k < st.keys; ++k) local_mean[k] = partial[k].mean;
  const auto squares = sum_keys<1>(st, [&](std::int64_t at, std::int64_t key) {
    const double dev = in[at] - local_mean[key];
    return std::array<double, 1>{dev * dev};
  });
  for (std::size_t k = 0; k < st.keys; ++k) partial[k].m2 = squares[k];

  // The processors along the axes that split reduced dims hold parts of the same statistics.
  for (const auto& name : reduced_names)
    if (auto axis = x.layout().mesh_axis_of(name)) st.axes |= AxisSet{1} << *axis;
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
        total = combine(total, {q[0], q[1], q[2]});
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
void store_moments(const NormStatistics& st, const Tensor<T>& x, Moments<T>* moments) {
  if (!moments) return;
  TensorLayout stats_layout(Shape(st.kept_dims), x.mesh().shape(), x.layout().layout());
  Array<T> m = Array<T>::from_shape(to_xshape(st.kept_sizes));
  Array<T> v = Array<T>::from_shape(to_xshape(st.kept_sizes));
  for (std::size_t i = 0; i < st.keys; ++i) {
    m.data()[i] = static_cast<T>(st.mean[i]);
    v.data()[i] = static_cast<T>(st.variance[i]);
  }
  moments->mean = Tensor<T>(x.mesh(), stats_layout, std::move(m));
  moments->variance = Tensor<T>(x.mesh(), stats_layout, std::move(v));
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
  detail::store_moments(st, x, moments);
  const T* in = x.local().data();
  Array<T> out = Array<T>::from_shape(x.local().shape());
  T* o = out.data();
  std::vector<T> scale(st.keys), shift(st.keys);  // y = scale x + shift
  for (std::size_t k = 0; k < st.keys; ++k) {
    scale[k] = static_cast<T>(st.inv_std[k]);
    shift[k] = static_cast<T>(-st.mean[k] * st.inv_std[k]);
  }
  detail::for_each_value(
      st, [&](std::int64_t at, std::int64_t key) { o[at] = scale[key] * in[at] + shift[key]; });
  Tensor<T> y(x.mesh(), x.layout(), std::move(out));

  // dx = inv_std * (g - mean(g) - y * mean(g * y)), the means over the reduced dims.
  autodiff::record(y, {x}, [y = y.detach(), st](const Tensor<T>& g, const std::vector<bool>&) {
    const T* pg = g.local().data();
    const T* py = y.local().data();
    auto sums = detail::sum_keys<2>(st, [&](std::int64_t at, std::int64_t) {
      return std::array<double, 2>{double(pg[at]), double(pg[at]) * py[at]};
    });
    if (st.axes) all_reduce(g.mesh().group(st.axes), sums, ReduceOp::sum);
    // dx = a g + b y + c per key.
    std::vector<T> a(st.keys), b(st.keys), c(st.keys);
    for (std::size_t k = 0; k < st.keys; ++k) {
      const double n = double(st.count);
      a[k] = static_cast<T>(st.inv_std[k]);
      b[k] = static_cast<T>(-st.inv_std[k] * sums[2 * k + 1] / n);
      c[k] = static_cast<T>(-st.inv_std[k] * sums[2 * k] / n);
    }
    Array<T> dx = Array<T>::from_shape(g.local().shape());
    T* pd = dx.data();
    detail::for_each_value(st, [&](std::int64_t at, std::int64_t key) {
      pd[at] = a[key] * pg[at] + b[key] * py[at] + c[key];
    });
    return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), g.layout(), std::move(dx))};
  });
  return y;
}

/// What follows a normalisation in the same pass.
enum class Activation { none, relu };

namespace detail {

// The fused normalisation's output value; one function, so that a recomputed output (and the
// ReLU mask taken from it) matches the forward one bit for bit.
template <class T>
inline T affine_floor(T scale, T x, T shift, T floor) {
  return std::max(scale * x + shift, floor);
}

/**
 * activation(gamma * (x - mean) * inv_std + beta) in one pass, for gamma and beta over exactly the
 * kept dims (batch norm's channels). It keeps x alone (not x̂, not the output: the ReLU's mask is
 * recomputed from x); backward is one pass for the sums, one for dx:
 *   g' = g masked by the ReLU, dbeta = sum g', dgamma = sum g' x̂,
 *   dx = gamma inv_std (g' - dbeta / n - x̂ dgamma / n).
 */
template <class T>
Tensor<T> normalize_affine(const Tensor<T>& x, const DimNames& reduced, const Tensor<T>& gamma,
                           const Tensor<T>& beta, double epsilon, Moments<T>* moments,
                           Activation activation) {
  const auto st = norm_statistics(x, reduced, epsilon, "batch_norm");
  store_moments(st, x, moments);
  Mesh& mesh = x.mesh();
  const TensorLayout stats_layout(Shape(st.kept_dims), mesh.shape(), x.layout().layout());
  auto scale_of = [&](const Tensor<T>& t) {
    const auto here = relayout_to(t, stats_layout);
    return std::vector<double>(here.local().begin(), here.local().end());
  };
  const auto g_scale = scale_of(gamma), shift = scale_of(beta);
  std::vector<T> a(st.keys), b(st.keys);  // y = a x + b
  for (std::size_t k = 0; k < st.keys; ++k) {
    a[k] = static_cast<T>(g_scale[k] * st.inv_std[k]);
    b[k] = static_cast<T>(shift[k] - st.mean[k] * g_scale[k] * st.inv_std[k]);
  }
  // The output is computed by its recipe, which stays with it: an op that saves it for backward
  // (the next convolution) keeps the recipe, and the output itself is freed after forward.
  const T floor = activation == Activation::relu ? T(0) : -std::numeric_limits<T>::infinity();
  auto recipe = std::make_shared<const typename Tensor<T>::Recipe>(
      [x = x.detach(), st, a, b, floor](T* into) {
        const T* in = x.local().data();
        for_each_value(st, [&](std::int64_t at, std::int64_t key) {
          into[at] = affine_floor(a[key], in[at], b[key], floor);
        });
      });
  Array<T> out = Array<T>::from_shape(x.local().shape());
  (*recipe)(out.data());
  Tensor<T> y(mesh, x.layout(), std::move(out));
  y.set_recipe(std::move(recipe));

  // Backward keeps x alone: the ReLU's mask is where the output, computed again, is positive.
  autodiff::record(
      y, {x, gamma, beta},
      [x = x.detach(), relu = activation == Activation::relu, a, b, floor, st, g_scale,
       stats_layout, gamma_layout = gamma.layout(),
       beta_layout = beta.layout()](const Tensor<T>& g, const std::vector<bool>& needed) {
        const T* pg = g.local().data();
        const T* px = x.local().data();
        auto masked = [&](std::int64_t at, std::int64_t key) {
          return relu && !(affine_floor(a[key], px[at], b[key], floor) > T(0)) ? T(0) : pg[at];
        };
        std::vector<T> norm_scale(st.keys), norm_shift(st.keys);  // x̂ = scale x + shift
        for (std::size_t k = 0; k < st.keys; ++k) {
          norm_scale[k] = static_cast<T>(st.inv_std[k]);
          norm_shift[k] = static_cast<T>(-st.mean[k] * st.inv_std[k]);
        }
        auto sums = sum_keys<2>(st, [&](std::int64_t at, std::int64_t key) {
          const T gm = masked(at, key);
          return std::array<double, 2>{double(gm),
                                       double(gm * (norm_scale[key] * px[at] + norm_shift[key]))};
        });
        if (st.axes) all_reduce(g.mesh().group(st.axes), sums, ReduceOp::sum);
        std::vector<Tensor<T>> grads(3);
        if (needed[0]) {
          // dx = gamma inv_std (g' - S1 / n - x̂ S2 / n) = p g' + q x + r per key.
          std::vector<T> p(st.keys), q(st.keys), r(st.keys);
          for (std::size_t k = 0; k < st.keys; ++k) {
            const double n = double(st.count), scale = g_scale[k] * st.inv_std[k];
            const double slope = scale * st.inv_std[k] * sums[2 * k + 1] / n;
            p[k] = static_cast<T>(scale);
            q[k] = static_cast<T>(-slope);
            r[k] = static_cast<T>(-scale * sums[2 * k] / n + slope * st.mean[k]);
          }
          Array<T> dx = Array<T>::from_shape(g.local().shape());
          T* pd = dx.data();
          for_each_value(st, [&](std::int64_t at, std::int64_t key) {
            pd[at] = p[key] * masked(at, key) + q[key] * px[at] + r[key];
          });
          grads[0] = Tensor<T>(g.mesh(), g.layout(), std::move(dx));
        }
        auto per_key = [&](int which, const TensorLayout& layout) {
          Array<T> v = Array<T>::from_shape(to_xshape(st.kept_sizes));
          for (std::size_t k = 0; k < st.keys; ++k)
            v.data()[k] = static_cast<T>(sums[2 * k + which]);
          return relayout_to(Tensor<T>(g.mesh(), stats_layout, std::move(v)), layout);
        };
        if (needed[1]) grads[1] = per_key(1, gamma_layout);
        if (needed[2]) grads[2] = per_key(0, beta_layout);
        return grads;
      });
  return y;
}

// gamma and beta have exactly the dims the statistics are kept per, in that order.
template <class T>
bool affine_per_key(const Tensor<T>& x, const DimNames& reduced, const Tensor<T>& gamma,
                    const Tensor<T>& beta) {
  std::vector<Dim> kept;
  for (const auto& dim : x.shape())
    if (!reduced.contains(dim.name)) kept.push_back(dim);
  return gamma.shape() == Shape(kept) && beta.shape() == Shape(kept);
}

}  // namespace detail

/**
 * Batch norm in training mode: statistics over every dim but `channels`, then gamma * x̂ + beta
 * (gamma and beta have just the `channels` dim), then `activation` — all in one pass each way.
 * `moments` receives the batch statistics.
 */
template <class T>
Tensor<T> batch_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                     const std::string& channels = "channels", double epsilon = 1e-5,
                     std::common_type_t<Moments<T>>* moments = nullptr,
                     Activation activation = Activation::none) {
  std::vector<std::string> reduced;
  for (const auto& dim : x.shape())
    if (dim.name != channels) reduced.push_back(dim.name);
  if (detail::affine_per_key(x, reduced, gamma, beta))
    return detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation);
  auto y = normalize(x, reduced, epsilon, moments) * gamma + beta;
  return activation == Activation::relu ? relu(y) : y;
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
