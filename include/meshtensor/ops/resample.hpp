#pragma once
// Ops that rebuild one dim from up to two source positions per output position: padding (zeros,
// reflect, replicate), cropping, nearest and linear upsampling, and concatenation. Each output
// block reads the hull of its sources, which the halo exchange brings from wherever it lies — a
// split dim is handled like any other.

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/resample.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/detail/saved_box.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/halo.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// Where output position o of a resampled dim reads: `count` (0, 1 or 2) source positions, each
/// with a weight.
struct Sources {
  int count = 0;
  std::array<std::int64_t, 2> index{0, 0};
  std::array<double, 2> weight{0, 0};
};

namespace detail {

// Rebuilds dim `dim` of `t` with `out_size` positions, output o = sum of weight * t[source].
template <class T, class Map>
Tensor<T> resample(const std::string& op, const Tensor<T>& t, const std::string& dim,
                   std::int64_t out_size, Map&& sources_of) {
  const Shape& shape = t.shape();
  const std::size_t d = shape.position(dim);
  if (out_size < 1)
    throw ShapeError(op + ": dim " + quote(dim) + " would have " + std::to_string(out_size) +
                     " positions; it needs at least 1");
  std::vector<Dim> out_dims = shape.dims();
  out_dims[d] = out_dims[d].resized(out_size);
  Mesh& mesh = t.mesh();
  TensorLayout out_layout(Shape(out_dims), mesh.shape(), t.layout().layout());
  const Block out_block = out_layout.block(mesh.coord());

  // Read ranges: along `dim`, the hull of the sources of each block's outputs.
  auto reads = [&](const Range& outputs) {
    Range hull{0, 0};
    bool any = false;
    for (std::int64_t o = outputs.begin; o < outputs.end; ++o) {
      const Sources s = sources_of(o);
      for (int k = 0; k < s.count; ++k) {
        hull = any ? Range{std::min(hull.begin, s.index[k]), std::max(hull.end, s.index[k] + 1)}
                   : Range{s.index[k], s.index[k] + 1};
        any = true;
      }
    }
    return hull;
  };
  HaloNeeds needs;
  for (std::size_t e = 0; e < shape.rank(); ++e) {
    const auto axis = t.layout().mesh_axis_of(e);
    const int parts = axis ? mesh.shape()[*axis].size : 1;
    std::vector<Range> per_block;
    for (int j = 0; j < parts; ++j)
      per_block.push_back(e == d ? reads(block_range(out_size, parts, j))
                                 : block_range(shape[e].size, parts, j));
    needs.push_back(per_block);
  }
  const HaloExchange plan(t.layout(), mesh.coord(), needs);
  const Array<T> box = plan.exchange(mesh, HaloForm::padded, t.array(), T(0)).array;

  // Blocks as [outer][dim][inner]: outer and inner extents are the own block's.
  std::int64_t outer = 1, inner = 1;
  for (std::size_t e = 0; e < d; ++e) outer *= out_block.ranges[e].size();
  for (std::size_t e = d + 1; e < shape.rank(); ++e) inner *= out_block.ranges[e].size();
  // Each output position's taps into the box along `dim`.
  kernels::ResampleTaps taps;
  taps.outer = outer;
  taps.inner = inner;
  taps.sources = plan.box().ranges[d].size();
  const std::int64_t box_begin = plan.box().ranges[d].begin;
  const Range outputs = out_block.ranges[d];
  for (std::int64_t o = outputs.begin; o < outputs.end; ++o) {
    const Sources s = sources_of(o);
    for (int k = 0; k < 2; ++k) {
      taps.index.push_back(k < s.count ? s.index[k] - box_begin : -1);
      taps.weight.push_back(k < s.count ? s.weight[k] : 0.0);
    }
  }
  Array<T> out = detail::new_block<T>(mesh, out_layout, out_block);
  kernels::resample(taps, box.data(), out.data());
  Tensor<T> result(mesh, std::move(out_layout), std::move(out));

  std::vector<std::size_t> box_sizes(box.shape().begin(), box.shape().end());
  autodiff::record(
      result, {t},
      [plan, taps = std::move(taps), box_sizes, input_layout = t.layout()](
          const Tensor<T>& g, const std::vector<bool>&) {
        Array<T> grad_box = Array<T>::from_shape(box_sizes);
        kernels::resample_adjoint(taps, g.array().data(), grad_box.data());
        auto own =
            plan.exchange_adjoint(g.mesh(), HaloForm::padded, HaloBox<T>{std::move(grad_box), {}});
        return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), input_layout, std::move(own))};
      });
  return result;
}

// Concatenation along a dim no processor splits (channels, typically): each processor's output
// block is its operands' blocks side by side, and each operand's gradient a slice of the output's.
// Empty when the fast path does not apply.
template <class T>
std::optional<Tensor<T>> concat_unsplit(const std::vector<Tensor<T>>& parts, const std::string& dim,
                                        std::int64_t total, const Layout& common) {
  const Shape& first = parts[0].shape();
  for (const auto& p : parts)
    if (p.shape().names() != first.names()) return std::nullopt;
  std::vector<Dim> dims = first.dims();
  const std::size_t d = first.position(dim);
  dims[d] = dims[d].resized(total);
  Mesh& mesh = parts[0].mesh();
  TensorLayout layout(Shape(dims), mesh.shape(), common);
  if (layout.is_split(dim)) return std::nullopt;

  const auto out_sizes = layout.block(mesh.coord()).sizes();
  // Each block is rows (the dims before d) of a width (d and the dims after it): the output's
  // rows are the parts' rows side by side, joined and split in one pass each way.
  std::int64_t rows = 1;
  for (std::size_t k = 0; k < d; ++k) rows *= out_sizes[k];
  auto width_of = [rows](const kernels::Sizes& sizes) {
    return rows ? kernels::num_elements(sizes) / rows : 0;
  };
  Array<T> out = Array<T>::from_shape(to_xshape(out_sizes));
  std::vector<std::int64_t> widths;
  std::vector<KeptBlock<T>> kept;
  std::vector<kernels::cpu::RowsPart<const T>> pieces;
  for (const auto& p : parts) {
    const auto aligned = relayout_to(p, p.layout().with_layout(common));
    widths.push_back(width_of(aligned.block().sizes()));
    pieces.push_back({aligned.array().data(), widths.back()});
    kept.emplace_back(aligned);
  }
  kernels::join_rows(rows, pieces, out.data());
  Tensor<T> result(mesh, layout, std::move(out));
  // The parts are often kept anyway (a skip connection, a normalisation's input), so an op that
  // saves the concatenation keeps them, not a second copy side by side.
  result.set_recipe(std::make_shared<const typename Tensor<T>::Recipe>(
      [kept = std::move(kept), widths, rows](T* into) {
        // A part kept as its recipe is recomputed first; all are read in the one pass.
        std::vector<Array<T>> scratch;
        scratch.reserve(kept.size());
        std::vector<kernels::cpu::RowsPart<const T>> pieces;
        for (std::size_t i = 0; i < kept.size(); ++i) {
          scratch.push_back(empty_array<T>());
          pieces.push_back({kept[i].data(scratch.back()), widths[i]});
        }
        kernels::join_rows(rows, pieces, into);
      }));
  std::vector<TensorLayout> part_layouts;
  for (const auto& p : parts) part_layouts.push_back(p.layout());
  autodiff::record(
      result, parts,
      [widths, rows, part_layouts, common](const Tensor<T>& g, const std::vector<bool>& need) {
        std::vector<Tensor<T>> grads(part_layouts.size());
        std::vector<Array<T>> slices;
        std::vector<kernels::cpu::RowsPart<T>> pieces;
        std::vector<TensorLayout> aligned;
        for (std::size_t i = 0; i < grads.size(); ++i) {
          aligned.push_back(part_layouts[i].with_layout(common));
          slices.push_back(
              need[i] ? Array<T>::from_shape(to_xshape(aligned[i].block(g.mesh().coord()).sizes()))
                      : empty_array<T>());
          pieces.push_back({need[i] ? slices[i].data() : nullptr, widths[i]});  // null: skipped
        }
        kernels::split_rows(rows, g.array().data(), pieces);
        for (std::size_t i = 0; i < grads.size(); ++i)
          if (need[i])
            grads[i] =
                relayout_to(Tensor<T>(g.mesh(), aligned[i], std::move(slices[i])), part_layouts[i]);
        return grads;
      });
  return result;
}

// Rebuilds `dim` of `t` with `out_size` positions, output o a copy of position `position_of(o)`
// of the dim taken as periodic: beyond either edge, its far end. Where the dim is split the
// outputs that read across an edge are a second resampling, added to the first, so that each
// block's sources stay one range (the far processor's rows) rather than the whole dim.
template <class T, class Position>
Tensor<T> resample_periodic(const std::string& op, const Tensor<T>& t, const std::string& dim,
                            std::int64_t out_size, Position position_of) {
  const std::int64_t n = t.shape().dim(dim).size;
  auto wrapped = [n](std::int64_t p) { return ((p % n) + n) % n; };
  auto copy_of = [](std::int64_t p) { return Sources{1, {p, 0}, {1.0, 0.0}}; };
  if (!t.layout().is_split(dim))
    return resample(op, t, dim, out_size,
                    [=](std::int64_t o) { return copy_of(wrapped(position_of(o))); });
  auto inside = [=](std::int64_t o) { return position_of(o) >= 0 && position_of(o) < n; };
  return resample(op, t, dim, out_size,
                  [=](std::int64_t o) { return inside(o) ? copy_of(position_of(o)) : Sources{}; }) +
         resample(op, t, dim, out_size, [=](std::int64_t o) {
           return inside(o) ? Sources{} : copy_of(wrapped(position_of(o)));
         });
}

// The adjoint of circular padding: `dim` less `before` and `after` positions, each dropped one
// added to the position it wraps onto at the far end (a transposed convolution over a periodic
// dim). Neither may exceed what is left.
template <class T>
Tensor<T> fold_periodic(const std::string& op, const Tensor<T>& t, const std::string& dim,
                        std::int64_t before, std::int64_t after) {
  if (before == 0 && after == 0) return t;
  const std::int64_t n = t.shape().dim(dim).size, m = n - before - after;
  if (before > m || after > m)
    throw Error(op + ": circular padding (" + std::to_string(before) + ", " +
                std::to_string(after) + ") along dim " + quote(dim) + " wraps around its " +
                std::to_string(m) + " positions more than once; use at most " +
                std::to_string(std::max<std::int64_t>(m, 0)) + " per side");
  const Tensor<T> kept = resample(op, t, dim, m, [=](std::int64_t o) {
    return Sources{1, {o + before, 0}, {1.0, 0.0}};
  });
  return kept + resample(op, t, dim, m, [=](std::int64_t o) {
           Sources s;
           if (o >= m - before) s.index[s.count++] = o + before - m;  // dropped before the start
           if (o < after) s.index[s.count++] = o + before + m;        // dropped past the end
           s.weight = {1.0, 1.0};
           return s;
         });
}

template <class T>
Tensor<T> pad(const std::string& op, const Tensor<T>& t, const std::string& dim,
              std::int64_t before, std::int64_t after, PadMode mode) {
  const std::int64_t n = size_in(op, t, dim);
  if (before < 0 || after < 0)
    throw Error(op + ": amounts along dim " + quote(dim) + " must not be negative; use crop");
  if (mode == PadMode::reflect || mode == PadMode::circular) {
    const std::int64_t most = mode == PadMode::reflect ? n - 1 : n;
    if (before > most || after > most)
      throw Error(op + ": " + to_string(mode) + " padding along dim " + quote(dim) + " of size " +
                  std::to_string(n) + " can add at most " + std::to_string(most) +
                  " positions per side, not " + std::to_string(std::max(before, after)));
  }
  if (mode == PadMode::circular)
    return resample_periodic(op, t, dim, n + before + after,
                             [before](std::int64_t o) { return o - before; });
  return resample(op, t, dim, n + before + after, [=](std::int64_t o) {
    std::int64_t j = o - before;
    if (j < 0 || j >= n) {
      if (mode == PadMode::zeros) return Sources{};
      j = mode == PadMode::replicate ? std::clamp<std::int64_t>(j, 0, n - 1)
                                     : (j < 0 ? -j : 2 * (n - 1) - j);
    }
    return Sources{1, {j, 0}, {1.0, 0.0}};
  });
}

// f(name, window) for each spatial dim of `window`, in the order of `shape`: the order in which
// conv_dims and pooling resolve `windows`, one per spatial dim.
template <class F>
void for_each_window_dim(const Shape& shape, const Window& window,
                         const std::vector<WindowDim>& windows, F&& f) {
  const auto& spatial = window.spatial();
  std::size_t k = 0;
  for (const Dim& dim : shape)
    if (std::find(spatial.begin(), spatial.end(), dim.name) != spatial.end())
      f(dim.name, windows.at(k++));
}

// `x` padded along each spatial dim of `window` as `windows` say, with the window's padding mode:
// a windowed op whose padding holds other than zeros runs on that, unpadded, as PyTorch's
// padding_mode does.
template <class T>
Tensor<T> padded_for_window(const std::string& op, const Tensor<T>& x, const Window& window,
                            const std::vector<WindowDim>& windows) {
  Tensor<T> out = x;
  for_each_window_dim(x.shape(), window, windows, [&](const std::string& dim, const WindowDim& w) {
    if (w.pad_before > 0 || w.pad_after > 0)
      out = pad(op, out, dim, w.pad_before, w.pad_after, window.padding_mode());
  });
  return out;
}

}  // namespace detail

/// `before` and `after` extra positions along `dim`, filled as `mode` says (core/window.hpp):
/// zeros, the mirror image (not repeating the edge), copies of the edge, or the dim's far end
/// (periodic: on a split dim, the far processor's rows). Reflection adds at most size - 1
/// positions per side, circular padding at most the size, as in PyTorch.
template <class T>
Tensor<T> pad(const Tensor<T>& t, const std::string& dim, std::int64_t before, std::int64_t after,
              PadMode mode = PadMode::zeros) {
  return detail::pad("pad", t, dim, before, after, mode);
}

/// Drops `before` and `after` positions of `dim`.
template <class T>
Tensor<T> crop(const Tensor<T>& t, const std::string& dim, std::int64_t before,
               std::int64_t after) {
  const std::int64_t n = detail::size_in("crop", t, dim);
  if (before < 0 || after < 0 || before + after >= n)
    throw Error("crop: cannot drop " + std::to_string(before) + " and " + std::to_string(after) +
                " positions from dim " + detail::quote(dim) + " of size " + std::to_string(n));
  return detail::resample("crop", t, dim, n - before - after, [=](std::int64_t o) {
    return Sources{1, {o + before, 0}, {1.0, 0.0}};
  });
}

enum class Interpolation { nearest, linear };

/// Each named dim scaled by `factor`: nearest repeats positions; linear interpolates between
/// position centres (PyTorch's align_corners=False), so along three dims it is trilinear.
template <class T>
Tensor<T> upsample(const Tensor<T>& t, const DimNames& dims, std::int64_t factor,
                   Interpolation mode = Interpolation::nearest) {
  if (factor < 1)
    throw Error("upsample: the factor must be at least 1, got " + std::to_string(factor));
  Tensor<T> out = t;
  for (const auto& dim : dims) {
    const std::int64_t n = detail::size_in("upsample", t, dim);
    out = detail::resample("upsample", out, dim, n * factor, [=](std::int64_t o) {
      if (mode == Interpolation::nearest) return Sources{1, {o / factor, 0}, {1.0, 0.0}};
      const double source = std::max((o + 0.5) / double(factor) - 0.5, 0.0);
      const std::int64_t i0 = static_cast<std::int64_t>(source);
      const std::int64_t i1 = std::min(i0 + 1, n - 1);
      const double w1 = source - double(i0);
      if (i1 == i0 || w1 == 0.0) return Sources{1, {i0, 0}, {1.0, 0.0}};
      return Sources{2, {i0, i1}, {1.0 - w1, w1}};
    });
  }
  return out;
}

/**
 * `dim` resampled to `size` positions, output o sitting at source position o * step: by default
 * step = (n - 1) / (size - 1), so that the first and last positions keep their places (a volume
 * resized to a shape); with a given step, e.g. target spacing / voxel spacing, the grid keeps its
 * origin (a volume resampled to a voxel spacing, as MONAI's Spacing does). Linear interpolates
 * between the two nearest sources (images); nearest takes the nearer one (labels). Positions past
 * the last source repeat it. Each output is a function of global positions only, so the result is
 * the same however `dim` is split.
 */
template <class T>
Tensor<T> resize(const Tensor<T>& t, const std::string& dim, std::int64_t size,
                 Interpolation mode = Interpolation::linear, double step = 0) {
  const std::int64_t n = detail::size_in("resize", t, dim);
  if (size < 1)
    throw Error("resize: dim " + detail::quote(dim) + " needs at least 1 position, got " +
                std::to_string(size));
  if (step < 0 || !std::isfinite(step))
    throw Error("resize: the step along dim " + detail::quote(dim) + " must be positive, got " +
                std::to_string(step));
  if (step == 0) step = size > 1 ? double(n - 1) / double(size - 1) : 0.0;
  return detail::resample("resize", t, dim, size, [=](std::int64_t o) {
    const double source = std::min(double(o) * step, double(n - 1));
    if (mode == Interpolation::nearest) {
      const auto i = std::min<std::int64_t>(static_cast<std::int64_t>(source + 0.5), n - 1);
      return Sources{1, {i, 0}, {1.0, 0.0}};
    }
    const std::int64_t i0 = static_cast<std::int64_t>(source);
    const double w1 = source - double(i0);
    if (w1 == 0.0 || i0 + 1 >= n) return Sources{1, {i0, 0}, {1.0, 0.0}};
    return Sources{2, {i0, i0 + 1}, {1.0 - w1, w1}};
  });
}

/// The operands joined along `dim` (each has it, in any size; the other dims must agree).
template <class T>
Tensor<T> concat(const std::vector<Tensor<T>>& parts, const std::string& dim) {
  if (parts.empty()) throw Error("concat needs at least one operand");
  std::int64_t total = 0;
  for (const auto& p : parts) {
    if (!p.shape().contains(dim))
      throw ShapeError("concat: operand " + p.layout().to_string() + " has no dim " +
                       detail::quote(dim));
    total += p.shape().dim(dim).size;
    for (const auto& other : p.shape())
      if (other.name != dim && parts[0].shape().contains(other.name) &&
          parts[0].shape().dim(other.name) != other)
        throw ShapeError("concat along " + detail::quote(dim) + ": operands " +
                         parts[0].shape().to_string() + " and " + p.shape().to_string() +
                         " differ in dim " + detail::quote(other.name));
    if (p.rank() != parts[0].rank())
      throw ShapeError("concat along " + detail::quote(dim) + ": operands " +
                       parts[0].shape().to_string() + " and " + p.shape().to_string() +
                       " have different dims");
  }
  std::vector<const TensorLayout*> layouts;
  for (const auto& p : parts) layouts.push_back(&p.layout());
  const Layout common = detail::common_layout(parts[0].mesh(), "concat", layouts);
  if (auto joined = detail::concat_unsplit(parts, dim, total, common)) return *joined;
  // The joined dim is split (or the operands order their dims differently): each operand moved to
  // its place with the resampling machinery, which brings blocks across processors.
  Tensor<T> sum;
  std::int64_t offset = 0;
  for (const auto& p : parts) {
    const std::int64_t n = p.shape().dim(dim).size;
    // Each operand, moved to its place in the joined dim (zeros elsewhere), on the common layout.
    auto placed = detail::resample("concat", relayout(p, common), dim, total, [=](std::int64_t o) {
      return o >= offset && o < offset + n ? Sources{1, {o - offset, 0}, {1.0, 0.0}} : Sources{};
    });
    sum = sum.defined() ? sum + placed : placed;
    offset += n;
  }
  return sum;
}

template <class T>
Tensor<T> concat(std::initializer_list<Tensor<T>> parts, const std::string& dim) {
  return concat(std::vector<Tensor<T>>(parts), dim);
}

}  // namespace meshtensor
