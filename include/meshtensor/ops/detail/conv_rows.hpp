#pragma once
// A convolution computed in slabs of rows along its first kernel dim. With one pass-through index
// a box is a stack of contiguous rows, so a slab of output rows is a smaller convolution of the
// rows it reads, and the gradient of a slab of box rows one of the output rows that read them.
//
// That lets a convolution split along its first spatial dim read the own block in place: the box
// is the own block with the halo rows below and above it, kept apart (BoxRows); the output rows
// that read only own rows are computed straight from the block, and only slabs that cross into the
// halo are copied together. No box-sized copy of the input, in forward or backward.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/kernels/common/channel_affine.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/norm.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor::detail {

/// The rows of a convolution's box, held as runs of consecutive rows in separate arrays (the own
/// block, halo pieces); a run may be given as the per-channel affine map of its array (a batch
/// norm's output never written out, kernels::ChannelAffine: its channels innermost).
template <class T>
class BoxRows {
 public:
  BoxRows(std::int64_t row_size, std::int64_t channels)
      : row_size_(row_size), channels_(channels) {}

  /// Rows [first, first + count) of the box are at `data`, or are `map` of the rows there.
  void add(std::int64_t first, std::int64_t count, const T* data,
           const kernels::ChannelAffine* map = nullptr) {
    if (count > 0) runs_.push_back({first, first + count, data, map});
  }

  /// Rows [r0, r1) as the kernels' operand: in place in the run that holds them all (as its
  /// map, where it is one), else copied (and mapped) into `scratch`.
  kernels::ChannelParts<const T> rows(std::int64_t r0, std::int64_t r1, Buffer<T>& scratch) const {
    kernels::ChannelParts<const T> part;
    for (const Run& run : runs_)
      if (run.begin <= r0 && r1 <= run.end) {
        part.add(run.data + (r0 - run.begin) * row_size_, channels_, run.map);
        return part;
      }
    scratch.resize(static_cast<std::size_t>((r1 - r0) * row_size_));
    std::int64_t filled = 0;
    for (const Run& run : runs_) {
      const std::int64_t a = std::max(r0, run.begin), b = std::min(r1, run.end);
      if (a >= b) continue;
      const T* from = run.data + (a - run.begin) * row_size_;
      T* to = scratch.data() + (a - r0) * row_size_;
      if (run.map)
        kernels::norm_affine(*run.map, (b - a) * row_size_ / channels_, from, to);
      else
        kernels::copy_values(from, (b - a) * row_size_, to);
      filled += b - a;
    }
    if (filled != r1 - r0) throw Error("internal: a convolution read box rows nobody holds");
    part.add(scratch.data(), channels_);
    return part;
  }

 private:
  struct Run {
    std::int64_t begin, end;
    const T* data;
    const kernels::ChannelAffine* map;
  };
  std::int64_t row_size_, channels_;
  std::vector<Run> runs_;
};

/// Output rows [a, b) of the convolution of `box` with `weight` into `out` (all output rows).
template <class T>
void conv_rows(const kernels::ConvGeometry& g, const BoxRows<T>& box, const T* weight, T* out,
               std::int64_t a, std::int64_t b) {
  if (a >= b) return;
  const kernels::RowSlab slab = kernels::output_rows(g, a, b);
  Buffer<T> scratch;
  kernels::conv_forward(slab.geometry, box.rows(slab.r0, slab.r1, scratch), weight,
                        out + a * kernels::output_row_size(g));
}

/// grad_weight += the weight gradient of output rows [a, b) (`grad_output`: all output rows).
template <class T>
void weight_rows(const kernels::ConvGeometry& g, const BoxRows<T>& box, const T* grad_output,
                 double* grad_weight, std::int64_t a, std::int64_t b) {
  if (a >= b) return;
  const kernels::RowSlab slab = kernels::output_rows(g, a, b);
  Buffer<T> scratch;
  kernels::conv_backward_weight(slab.geometry, box.rows(slab.r0, slab.r1, scratch),
                                grad_output + a * kernels::output_row_size(g), grad_weight);
}

/// The gradient of box rows [r0, r1) into `grad_rows` (`grad_output`: all output rows): the rows
/// are a box of their own, read by the output rows that reach them.
template <class T>
void input_rows(const kernels::ConvGeometry& g, const T* grad_output, const T* weight, T* grad_rows,
                std::int64_t r0, std::int64_t r1) {
  if (r0 >= r1) return;
  const kernels::InputSlab slab = kernels::input_rows(g, r0, r1);
  if (slab.o0 < slab.o1)
    kernels::conv_backward_input(slab.geometry, grad_output + slab.o0 * kernels::output_row_size(g),
                                 weight, grad_rows);
  else
    kernels::fill_values(grad_rows, (r1 - r0) * kernels::input_row_size(g), T(0));
}

/// The outputs along kernel dim `d` that read only the own block's indices [own_lo, own_hi) of a
/// box of `in[d]` (reads before 0 or from `in[d]` on are padding, not halo).
inline std::array<std::int64_t, 2> interior_along(const kernels::ConvGeometry& g, std::size_t d,
                                                  std::int64_t own_lo, std::int64_t own_hi) {
  const kernels::Taps& t = g.taps[d];
  const std::int64_t reach = (g.kernel[d] - 1) * t.dilation;
  const std::int64_t n = g.out[d];
  std::int64_t lo = 0, hi = n;
  if (own_lo > 0)  // a halo below: the first read must be an own index
    lo = std::max<std::int64_t>(0, (own_lo - t.origin + t.stride - 1) / t.stride);
  if (own_hi < g.in[d]) {  // a halo above: the last read must be an own index
    const std::int64_t top = own_hi - 1 - reach - t.origin;
    hi = top < 0 ? 0 : std::min<std::int64_t>(n, top / t.stride + 1);
  }
  lo = std::min(lo, n);
  return {lo, std::max(lo, hi)};
}

/// The same along the first kernel dim: the output rows that read only own rows.
inline std::array<std::int64_t, 2> interior_rows(const kernels::ConvGeometry& g,
                                                 std::int64_t own_lo, std::int64_t own_hi) {
  return interior_along(g, 0, own_lo, own_hi);
}

/// f(a, b) over rows [lo, hi) in up to `most_parts` parts of at least four rows each, in order:
/// the interior computed under a halo in flight, with the messages let advance between parts.
/// (Each part turns again the few input planes it shares with the one before, so not finer.)
template <class F>
void for_each_row_part(std::int64_t lo, std::int64_t hi, F&& f, std::int64_t most_parts = 3) {
  constexpr std::int64_t fewest_rows = 4;
  const std::int64_t parts =
      std::max<std::int64_t>(1, std::min(most_parts, (hi - lo) / fewest_rows));
  for (std::int64_t p = 0; p < parts; ++p) {
    const std::int64_t a = lo + (hi - lo) * p / parts, b = lo + (hi - lo) * (p + 1) / parts;
    f(a, b);
  }
}

}  // namespace meshtensor::detail
