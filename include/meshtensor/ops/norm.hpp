#pragma once
// Normalisation with statistics over split dims. Each processor takes the count, mean and sum of
// squared deviations of its block per statistic (two passes, in double); the processors that split
// a reduced dim exchange those three numbers in one all-gather and combine them in rank order
// (Chan et al.'s parallel update), so every processor gets the same, numerically stable mean and
// variance. The gradient needs two sums per statistic: one fused all-reduce.

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/compute_threads.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/elementwise.hpp"
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

/**
 * (x - mean) / sqrt(variance + epsilon), with the mean and variance taken over `reduced` for each
 * index of the other dims. Batch norm reduces everything but the channels; instance norm the
 * spatial dims.
 */
template <class T>
Tensor<T> normalize(const Tensor<T>& x, const DimNames& reduced, double epsilon,
                    Moments<T>* moments = nullptr) {
  const Shape& shape = x.shape();
  std::vector<std::string> reduced_names;
  std::vector<Dim> kept_dims;
  std::int64_t count = 1;
  for (const auto& name : reduced)
    if (!shape.contains(name))
      throw ShapeError("normalize: tensor " + x.layout().to_string() + " has no dim " +
                       detail::quote(name));
  for (const auto& dim : shape) {
    if (reduced.contains(dim.name)) {
      reduced_names.push_back(dim.name);
      count *= dim.size;
    } else {
      kept_dims.push_back(dim);
    }
  }
  Mesh& mesh = x.mesh();
  const auto sizes = x.block().sizes();
  // Blocks are visited in memory order (all statistics at once, so channels-last data streams
  // through once per pass); the second offset of each element is its statistic's index.
  kernels::Sizes kept_sizes;
  std::int64_t local_count = 1;
  for (std::size_t d = 0; d < shape.rank(); ++d)
    if (reduced.contains(shape[d].name))
      local_count *= sizes[d];
    else
      kept_sizes.push_back(sizes[d]);
  const auto kept_row_major = kernels::row_major_strides(kept_sizes);
  kernels::Strides key_strides(shape.rank(), 0);
  for (std::size_t d = 0, k = 0; d < shape.rank(); ++d)
    if (!reduced.contains(shape[d].name)) key_strides[d] = kept_row_major[k++];
  const std::size_t keys = static_cast<std::size_t>(kernels::num_elements(kept_sizes));
  const std::array<kernels::Strides, 2> visit{kernels::row_major_strides(sizes), key_strides};
  const T* in = x.local().data();

  // Local statistics per kept index, in two passes.
  const auto sums = detail::sum_per_key<1>(sizes, visit, keys, [&](std::int64_t at, std::int64_t) {
    return std::array<double, 1>{double(in[at])};
  });
  std::vector<detail::Partial> partial(keys);
  for (std::size_t k = 0; k < keys; ++k) {
    partial[k].count = double(local_count);
    partial[k].mean = local_count > 0 ? sums[k] / double(local_count) : 0.0;
  }
  const auto squares =
      detail::sum_per_key<1>(sizes, visit, keys, [&](std::int64_t at, std::int64_t key) {
        const double dev = in[at] - partial[key].mean;
        return std::array<double, 1>{dev * dev};
      });
  for (std::size_t k = 0; k < keys; ++k) partial[k].m2 = squares[k];

  // The processors along the axes that split reduced dims hold parts of the same statistics.
  AxisSet axes = 0;
  for (const auto& name : reduced_names)
    if (auto axis = x.layout().mesh_axis_of(name)) axes |= AxisSet{1} << *axis;
  if (axes) {
    Communicator& group = mesh.group(axes);
    std::vector<double> mine;
    for (const auto& p : partial) mine.insert(mine.end(), {p.count, p.mean, p.m2});
    const auto all = all_gather(group, mine);
    const std::size_t k = partial.size();
    for (std::size_t i = 0; i < k; ++i) {
      detail::Partial total;
      for (int r = 0; r < group.size(); ++r) {
        const double* q = all.data() + (r * k + i) * 3;
        total = detail::combine(total, {q[0], q[1], q[2]});
      }
      partial[i] = total;
    }
  }
  std::vector<double> mean(partial.size()), inv_std(partial.size());
  for (std::size_t i = 0; i < partial.size(); ++i) {
    mean[i] = partial[i].mean;
    inv_std[i] = 1.0 / std::sqrt(partial[i].m2 / double(count) + epsilon);
  }

  Array<T> out = Array<T>::from_shape(x.local().shape());
  T* o = out.data();
  kernels::parallel_for_each_offset<2>(
      sizes, visit, compute_threads(), [&](const std::array<std::int64_t, 2>& at) {
        o[at[0]] = static_cast<T>((in[at[0]] - mean[at[1]]) * inv_std[at[1]]);
      });
  Tensor<T> y(mesh, x.layout(), std::move(out));

  if (moments) {
    TensorLayout stats_layout(Shape(kept_dims), mesh.shape(), x.layout().layout());
    Array<T> m = Array<T>::from_shape(detail::to_xshape(kept_sizes));
    Array<T> v = Array<T>::from_shape(detail::to_xshape(kept_sizes));
    for (std::size_t i = 0; i < partial.size(); ++i) {
      m.data()[i] = static_cast<T>(mean[i]);
      v.data()[i] = static_cast<T>(partial[i].m2 / double(count));
    }
    moments->mean = Tensor<T>(mesh, stats_layout, std::move(m));
    moments->variance = Tensor<T>(mesh, stats_layout, std::move(v));
    moments->count = count;
  }

  // dx = inv_std * (g - mean(g) - y * mean(g * y)), the means over the reduced dims.
  autodiff::record(
      y, {x},
      [y = y.detach(), inv_std, sizes, visit, keys, axes, count](const Tensor<T>& g,
                                                                 const std::vector<bool>&) {
        const T* pg = g.local().data();
        const T* py = y.local().data();
        auto sums = detail::sum_per_key<2>(sizes, visit, keys, [&](std::int64_t at, std::int64_t) {
          return std::array<double, 2>{double(pg[at]), double(pg[at]) * py[at]};
        });
        if (axes) all_reduce(g.mesh().group(axes), sums, ReduceOp::sum);
        Array<T> dx = Array<T>::from_shape(g.local().shape());
        T* pd = dx.data();
        kernels::parallel_for_each_offset<2>(
            sizes, visit, compute_threads(), [&](const std::array<std::int64_t, 2>& at) {
              const auto key = at[1];
              const double mean_g = sums[2 * key] / count, mean_gy = sums[2 * key + 1] / count;
              pd[at[0]] = static_cast<T>(inv_std[key] * (pg[at[0]] - mean_g - py[at[0]] * mean_gy));
            });
        return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), g.layout(), std::move(dx))};
      });
  return y;
}

/// Batch norm in training mode: statistics over every dim but `channels`, then gamma * x̂ + beta
/// (gamma and beta have just the `channels` dim). `moments` receives the batch statistics.
template <class T>
Tensor<T> batch_norm(const Tensor<T>& x, const Tensor<T>& gamma, const Tensor<T>& beta,
                     const std::string& channels = "channels", double epsilon = 1e-5,
                     Moments<T>* moments = nullptr) {
  std::vector<std::string> reduced;
  for (const auto& dim : x.shape())
    if (dim.name != channels) reduced.push_back(dim.name);
  return normalize(x, reduced, epsilon, moments) * gamma + beta;
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
