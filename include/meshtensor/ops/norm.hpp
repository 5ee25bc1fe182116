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
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/copy_select.hpp"
#include "meshtensor/kernels/norm_select.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/key_lanes.hpp"
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
// LeVeque) by the same formula on the CPU and the GPU.
using Partial = kernels::shared::PartialMoments;
using kernels::shared::affine_floor;
using kernels::shared::affine_input_gradient;
using kernels::shared::combine_moments;

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
  // loops below run over it as lanes (KeyLanes), vectorised across rows.
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

// f(p, first_row, end_row) over the rows of a keys-innermost block, on the compute threads.
template <class F>
int for_row_ranges(std::int64_t rows, F&& f) {
  return kernels::for_each_part<1>(
      {rows}, {kernels::Strides{1}}, compute_threads(),
      [&](int p, const kernels::Sizes& sub, const std::array<std::int64_t, 1>& base) {
        f(p, base[0], base[0] + sub[0]);
      });
}

// Per-key values as the loops below index them: by lane on a keys-innermost block (KeyLanes), by
// key otherwise.
template <class T, class U>
std::vector<T> indexed(const NormStatistics& st, const std::vector<U>& per_key) {
  if (st.keys_innermost()) return KeyLanes(std::int64_t(st.keys)).per_lane<T>(per_key);
  return std::vector<T>(per_key.begin(), per_key.end());
}

// acc[w * width + j] += term(at + j, j)[w] for the n lanes of one group: one vector per sum.
template <std::size_t W, class N, class T, class Term>
void add_terms(std::int64_t at, N n, std::int64_t width, T* acc, Term& term) {
  // Two named streams, not a loop over w (a run-time stride the vectoriser gives up on); no `omp
  // simd` (it would keep each lane's array of terms in memory).
  static_assert(W == 2, "the normalisations' gradients sum two terms");
  T* second = acc + width;
  for (std::int64_t j = 0; j < n; ++j) {
    const std::array<T, 2> t = term(at + j, j);
    acc[j] += t[0];
    second[j] += t[1];
  }
}

// Per key, the W sums of term(value offset, index) over a keys-innermost block, the index as
// indexed() gives: per chunk in T across the lanes, then per key in double.
template <class T, std::size_t W, class Term>
std::vector<double> lane_sums(const NormStatistics& st, Term&& term) {
  const KeyLanes lanes(std::int64_t(st.keys));
  const std::size_t keys = st.keys, width = std::size_t(lanes.width());
  std::vector<std::vector<double>> parts(compute_threads(), std::vector<double>(W * keys, 0.0));
  const int used = for_row_ranges(st.rows(), [&](int p, std::int64_t begin, std::int64_t end) {
    auto add_chunks = [&](T* acc) {
      for (std::int64_t c0 = begin; c0 < end; c0 += lanes.chunk_rows()) {
        std::fill(acc, acc + W * width, T(0));
        lanes.for_groups(c0, std::min(end, c0 + lanes.chunk_rows()),
                         [&](std::int64_t at, auto n) { add_terms<W>(at, n, width, acc, term); });
        for (std::size_t w = 0; w < W; ++w)
          lanes.add_to_keys(acc + w * width, parts[p].data() + w * keys);
      }
    };
    // Sums on the stack where they fit: the compiler then knows that they alias no operand, and
    // vectorises without run-time overlap checks (a term reads up to six arrays).
    if (width <= std::size_t(KeyLanes::wide)) {
      alignas(64) T on_stack[W * KeyLanes::wide];
      add_chunks(on_stack);
    } else {
      std::vector<T> on_heap(W * width);
      add_chunks(on_heap.data());
    }
  });
  for (int p = 1; p < used; ++p)
    for (std::size_t i = 0; i < W * keys; ++i) parts[0][i] += parts[p][i];
  std::vector<double> out(keys * W);  // interleaved per key, as sum_per_key returns them
  for (std::size_t k = 0; k < keys; ++k)
    for (std::size_t w = 0; w < W; ++w) out[k * W + w] = parts[0][w * keys + k];
  return out;
}

// Per key, the W sums of term(value offset, index) over the block, the index as indexed() gives.
template <class T, std::size_t W, class Term>
std::vector<double> sum_keys(const NormStatistics& st, Term&& term) {
  if (st.keys_innermost()) return lane_sums<T, W>(st, term);
  return sum_per_key<W>(st.sizes, st.visit, st.keys, [&](std::int64_t at, std::int64_t key) {
    const std::array<T, W> t = term(at, key);
    std::array<double, W> wide;
    for (std::size_t w = 0; w < W; ++w) wide[w] = double(t[w]);
    return wide;
  });
}

// f(value offset, index) for every element, the index as indexed() gives, on the compute threads;
// f touches that element alone (the lanes of a group run as one vector).
template <class F>
void for_each_value(const NormStatistics& st, F&& f) {
  if (st.keys_innermost()) {
    const KeyLanes lanes(std::int64_t(st.keys));
    for_row_ranges(st.rows(), [&](int, std::int64_t begin, std::int64_t end) {
      lanes.for_groups(begin, end, [&](std::int64_t at, auto n) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < n; ++j) f(at + j, j);
      });
    });
    return;
  }
  kernels::parallel_for_each_offset<2>(
      st.sizes, st.visit, compute_threads(),
      [&](const std::array<std::int64_t, 2>& at) { f(at[0], at[1]); });
}

// Count, mean and sum of squared deviations per key of a keys-innermost block, in one pass over
// memory: each chunk (in cache) is walked twice, for its mean and for the deviations from it, and
// the chunks are combined in double (Chan et al.).
template <class T>
std::vector<Partial> lane_moments(const NormStatistics& st, const T* in) {
  const KeyLanes lanes(std::int64_t(st.keys));
  const std::size_t keys = st.keys, width = std::size_t(lanes.width());
  std::vector<std::vector<Partial>> parts(compute_threads(), std::vector<Partial>(keys));
  const int used = for_row_ranges(st.rows(), [&](int p, std::int64_t begin, std::int64_t end) {
    // Per lane, what the values are taken from: the chunk's first row for the sum, then its mean
    // for the squared deviations.
    std::vector<T> lane_sum(width), centre(width), lane_m2(width);
    std::vector<double> sum(keys), mean(keys), m2(keys);
    for (std::int64_t c0 = begin; c0 < end; c0 += lanes.chunk_rows()) {
      const std::int64_t c1 = std::min(end, c0 + lanes.chunk_rows());
      const double n = double(c1 - c0);
      // The sums are of x minus the chunk's first row: values of the data's spread, not of its
      // magnitude (around 1e4, float sums of x itself would lose the chunk mean's last digits,
      // and Chan's combination the variance with them).
      const T* first = in + c0 * std::int64_t(keys);
      for (std::size_t j = 0; j < width; ++j) centre[j] = first[j % keys];
      std::fill(lane_sum.begin(), lane_sum.end(), T(0));
      T* acc = lane_sum.data();
      const T* shift = centre.data();  // (the same buffer, the mean, further down)
      lanes.for_groups(c0, c1, [&](std::int64_t at, auto w) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < w; ++j) acc[j] += in[at + j] - shift[j];
      });
      std::fill(sum.begin(), sum.end(), 0.0);
      lanes.add_to_keys(acc, sum.data());
      for (std::size_t k = 0; k < keys; ++k) mean[k] = double(first[k]) + sum[k] / n;
      for (std::size_t j = 0; j < width; ++j) centre[j] = static_cast<T>(mean[j % keys]);
      std::fill(lane_m2.begin(), lane_m2.end(), T(0));
      T* dev2 = lane_m2.data();
      lanes.for_groups(c0, c1, [&](std::int64_t at, auto w) {
#ifdef _OPENMP
#pragma omp simd
#endif
        for (std::int64_t j = 0; j < w; ++j) {
          const T d = in[at + j] - shift[j];
          dev2[j] += d * d;
        }
      });
      std::fill(m2.begin(), m2.end(), 0.0);
      lanes.add_to_keys(dev2, m2.data());
      for (std::size_t k = 0; k < keys; ++k) {
        // The deviations were taken from the mean rounded to T: sum (x - m~)^2 exceeds
        // sum (x - m)^2 by n (m - m~)^2.
        const double off = mean[k] - double(static_cast<T>(mean[k]));
        parts[p][k] =
            combine_moments(parts[p][k], {n, mean[k], std::max(0.0, m2[k] - n * off * off)});
      }
    }
  });
  for (int p = 1; p < used; ++p)
    for (std::size_t k = 0; k < keys; ++k) parts[0][k] = combine_moments(parts[0][k], parts[p][k]);
  return std::move(parts[0]);
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
  const T* in = x.array().data();

  // Local statistics per key: on the GPU if the block is there; else in one pass over memory on a
  // keys-innermost block, in two otherwise.
  std::vector<Partial> partial(st.keys);
  const bool on_gpu =
      kernels::norm_moments_on_gpu(st.sizes, st.visit[1], std::int64_t(st.keys), in, &partial);
  if (!on_gpu && st.keys_innermost()) {
    partial = lane_moments(st, in);
  } else if (!on_gpu) {
    const auto sums = sum_per_key<1>(
        st.sizes, st.visit, st.keys,
        [&](std::int64_t at, std::int64_t) { return std::array<double, 1>{double(in[at])}; });
    for (std::size_t k = 0; k < st.keys; ++k) {
      partial[k].count = double(local_count);
      partial[k].mean = local_count > 0 ? sums[k] / double(local_count) : 0.0;
    }
    const auto squares =
        sum_per_key<1>(st.sizes, st.visit, st.keys, [&](std::int64_t at, std::int64_t key) {
          const double dev = in[at] - partial[key].mean;
          return std::array<double, 1>{dev * dev};
        });
    for (std::size_t k = 0; k < st.keys; ++k) partial[k].m2 = squares[k];
  }

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
void store_moments(const NormStatistics& st, const Tensor<T>& x, Moments<T>* moments) {
  if (!moments) return;
  TensorLayout stats_layout(Shape(st.kept_dims), x.mesh().shape(), x.layout().layout());
  const std::vector<T> mean(st.mean.begin(), st.mean.end()),
      variance(st.variance.begin(), st.variance.end());
  Array<T> m = kernels::array_from_host(mean, to_xshape(st.kept_sizes));
  Array<T> v = kernels::array_from_host(variance, to_xshape(st.kept_sizes));
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
  const T* in = x.array().data();
  Array<T> out = Array<T>::from_shape(x.array().shape());
  T* o = out.data();
  std::vector<double> shift(st.keys);  // y = inv_std x + shift
  for (std::size_t k = 0; k < st.keys; ++k) shift[k] = -st.mean[k] * st.inv_std[k];
  if (!kernels::norm_affine_on_gpu(st.sizes, st.visit[1], in, st.inv_std, shift,
                                   -std::numeric_limits<T>::infinity(), o)) {
    const auto a = detail::indexed<T>(st, st.inv_std), b = detail::indexed<T>(st, shift);
    detail::for_each_value(st,
                           [&](std::int64_t at, std::int64_t i) { o[at] = a[i] * in[at] + b[i]; });
  }
  Tensor<T> y(x.mesh(), x.layout(), std::move(out));

  // dx = inv_std * (g - mean(g) - y * mean(g * y)), the means over the reduced dims.
  autodiff::record(y, {x}, [y = y.detach(), st](const Tensor<T>& g, const std::vector<bool>&) {
    const T* pg = g.array().data();
    const T* py = y.array().data();
    std::vector<double> sums;  // of g and g y, per key
    const std::vector<double> ones(st.keys, 1.0), zeros(st.keys, 0.0);
    if (!kernels::norm_gradient_sums_on_gpu(st.sizes, st.visit[1], pg, py, ones, zeros,
                                            kernels::ReluMask<T>{}, &sums))
      sums = detail::sum_keys<T, 2>(st, [&](std::int64_t at, std::int64_t) {
        return std::array<T, 2>{pg[at], pg[at] * py[at]};
      });
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
    if (!kernels::norm_input_gradient_on_gpu(st.sizes, st.visit[1], pg, py, kernels::ReluMask<T>{},
                                             st.inv_std, b, c, pd)) {
      const auto a_at = detail::indexed<T>(st, st.inv_std), b_at = detail::indexed<T>(st, b),
                 c_at = detail::indexed<T>(st, c);
      detail::for_each_value(st, [&](std::int64_t at, std::int64_t i) {
        pd[at] = detail::affine_input_gradient(a_at[i], pg[at], b_at[i], py[at], c_at[i]);
      });
    }
    return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), g.layout(), std::move(dx))};
  });
  return y;
}

/// What follows a normalisation in the same pass.
enum class Activation { none, relu };

namespace detail {

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
    const std::vector<T> values = kernels::to_host_vector(here.array());
    return std::vector<double>(values.begin(), values.end());
  };
  const auto g_scale = scale_of(gamma), shift = scale_of(beta);
  std::vector<double> a_key(st.keys), b_key(st.keys);  // y = a x + b
  for (std::size_t k = 0; k < st.keys; ++k) {
    a_key[k] = g_scale[k] * st.inv_std[k];
    b_key[k] = shift[k] - st.mean[k] * g_scale[k] * st.inv_std[k];
  }
  // The output is computed by its recipe, which stays with it: an op that saves it for backward
  // (the next convolution) keeps the recipe, and the output itself is freed after forward.
  const T floor = activation == Activation::relu ? T(0) : -std::numeric_limits<T>::infinity();
  auto recipe = std::make_shared<const typename Tensor<T>::Recipe>(
      [x = x.detach(), st, a_key, b_key, floor](T* into) {
        const T* in = x.array().data();
        if (kernels::norm_affine_on_gpu(st.sizes, st.visit[1], in, a_key, b_key, floor, into))
          return;
        const auto a = indexed<T>(st, a_key), b = indexed<T>(st, b_key);
        for_each_value(st, [&](std::int64_t at, std::int64_t i) {
          into[at] = affine_floor(a[i], in[at], b[i], floor);
        });
      });
  Array<T> out = Array<T>::from_shape(x.array().shape());
  (*recipe)(out.data());
  Tensor<T> y(mesh, x.layout(), std::move(out));
  y.set_recipe(std::move(recipe));

  // Backward keeps x alone: the ReLU's mask is where the output, computed again, is positive.
  autodiff::record(
      y, {x, gamma, beta},
      [x = x.detach(), relu = activation == Activation::relu, a_key, b_key, floor, st, g_scale,
       stats_layout, gamma_layout = gamma.layout(),
       beta_layout = beta.layout()](const Tensor<T>& g, const std::vector<bool>& needed) {
        const T* pg = g.array().data();
        const T* px = x.array().data();
        const kernels::ReluMask<T> mask{relu ? px : nullptr, &a_key, &b_key};
        // Raw pointers copied into the CPU loops' lambdas, and g loaded whether masked or not:
        // loops the compiler vectorises.
        const auto a = indexed<T>(st, a_key), b = indexed<T>(st, b_key);
        const T *pa = a.data(), *pb = b.data();
        auto masked = [=](std::int64_t at, std::int64_t i) {
          const T value = pg[at];
          const bool keep = (affine_floor(pa[i], px[at], pb[i], floor) > T(0)) | !relu;
          return keep ? value : T(0);
        };
        std::vector<double> shift(st.keys);  // x̂ = inv_std x + shift
        for (std::size_t k = 0; k < st.keys; ++k) shift[k] = -st.mean[k] * st.inv_std[k];
        std::vector<double> sums;  // of g' and g' x̂, per key
        if (!kernels::norm_gradient_sums_on_gpu(st.sizes, st.visit[1], pg, px, st.inv_std, shift,
                                                mask, &sums)) {
          const auto norm_scale = indexed<T>(st, st.inv_std), norm_shift = indexed<T>(st, shift);
          const T *ps = norm_scale.data(), *ph = norm_shift.data();
          sums = sum_keys<T, 2>(st, [=](std::int64_t at, std::int64_t i) {
            const T gm = masked(at, i);
            return std::array<T, 2>{gm, gm * (ps[i] * px[at] + ph[i])};
          });
        }
        if (st.axes) all_reduce(g.mesh().group(st.axes), sums, ReduceOp::sum);
        std::vector<Tensor<T>> grads(3);
        if (needed[0]) {
          // dx = gamma inv_std (g' - S1 / n - x̂ S2 / n) = p g' + q x + r per key.
          std::vector<double> p_key(st.keys), q_key(st.keys), r_key(st.keys);
          for (std::size_t k = 0; k < st.keys; ++k) {
            const double n = double(st.count), scale = g_scale[k] * st.inv_std[k];
            const double slope = scale * st.inv_std[k] * sums[2 * k + 1] / n;
            p_key[k] = scale;
            q_key[k] = -slope;
            r_key[k] = -scale * sums[2 * k] / n + slope * st.mean[k];
          }
          Array<T> dx = Array<T>::from_shape(g.array().shape());
          T* pd = dx.data();
          if (!kernels::norm_input_gradient_on_gpu(st.sizes, st.visit[1], pg, px, mask, p_key,
                                                   q_key, r_key, pd)) {
            const auto p = indexed<T>(st, p_key), q = indexed<T>(st, q_key),
                       r = indexed<T>(st, r_key);
            const T *pp = p.data(), *pq = q.data(), *pr = r.data();
            for_each_value(st, [=](std::int64_t at, std::int64_t i) {
              pd[at] = affine_input_gradient(pp[i], masked(at, i), pq[i], px[at], pr[i]);
            });
          }
          grads[0] = Tensor<T>(g.mesh(), g.layout(), std::move(dx));
        }
        auto per_key = [&](int which, const TensorLayout& layout) {
          std::vector<T> values(st.keys);
          for (std::size_t k = 0; k < st.keys; ++k) values[k] = static_cast<T>(sums[2 * k + which]);
          Array<T> v = kernels::array_from_host(values, to_xshape(st.kept_sizes));
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
