#pragma once
// A convolution's forward overlapped with its halo exchange on any split — several spatial dims,
// several batch entries: the outputs that read only the own block (the interior) are computed from
// the block in place while the halo travels; then the shell around them, split dim by split dim,
// from the own block and the halo pieces copied together a box at a time. Every output is written
// by one kernel call over all its taps, as in the exchange-first forward.
//
// Outputs that are not contiguous rows of the output (the shell along the inner dims) are
// computed into a buffer of their own and copied into place. Where the interior is nearly whole
// rows, the interior's rows are computed whole instead — straight into the output, their shell
// columns (read with zeros for the halo) overwritten afterwards.

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "meshtensor/core/block.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/ops/detail/conv_rows.hpp"
#include "meshtensor/ops/detail/saved_box.hpp"
#include "meshtensor/ops/detail/windowed.hpp"

namespace meshtensor::detail {

using Ranges3 = std::array<Range, 3>;

// Box indices along kernel dim d that outputs `o` read (a convolution, not transposed), clipped to
// the box.
inline Range reads_along(const kernels::ConvGeometry& g, std::size_t d, const Range& o) {
  const kernels::Taps& t = g.taps[d];
  const std::int64_t first = t.origin + o.begin * t.stride;
  const std::int64_t last = t.origin + (o.end - 1) * t.stride + (g.kernel[d] - 1) * t.dilation;
  const std::int64_t begin = std::max<std::int64_t>(0, first);
  return {begin, std::max(begin, std::min<std::int64_t>(g.in[d], last + 1))};
}

// Outputs `out` reading box indices `in`, as a convolution of their own (one batch entry).
inline kernels::ConvGeometry sub_geometry(const kernels::ConvGeometry& g, const Ranges3& out,
                                          const Ranges3& in) {
  kernels::ConvGeometry s = g;
  s.batch = 1;
  for (std::size_t d = 0; d < 3; ++d) {
    s.out[d] = out[d].size();
    s.in[d] = in[d].size();
    s.taps[d].origin = g.taps[d].origin + out[d].begin * g.taps[d].stride - in[d].begin;
  }
  return s;
}

// Where a convolution's own block lies in its box and which outputs read nothing else, per kernel
// dim; the box is in kernel order with one batch entry per pass-through index.
struct BoxedConv {
  BoxedConv(const WindowedPlan& p, const kernels::ConvGeometry& geometry,
            std::size_t first_spatial_dim)
      : plan(p), g(geometry), first_spatial(first_spatial_dim) {
    const Block& box = plan.halo.inside();
    const Block& own_block = plan.halo.own();
    spatial = box.ranges.size() - 1 - first_spatial;  // the kernel dims past them have size 1
    for (std::size_t d = 0; d < 3; ++d) {
      all[d] = {0, g.out[d]};
      own[d] = {0, g.in[d]};
      if (d < spatial) {
        const Range& b = box.ranges[first_spatial + d];
        own[d] = {own_block.ranges[first_spatial + d].begin - b.begin,
                  own_block.ranges[first_spatial + d].end - b.begin};
      }
      const auto [lo, hi] = interior_along(g, d, own[d].begin, own[d].end);
      interior[d] = {lo, hi};
    }
  }

  // Whether some output reads only the own block: else nothing could run under the exchange.
  bool has_interior() const {
    return std::none_of(interior.begin(), interior.end(), [](const Range& r) { return r.empty(); });
  }

  // Whether the interior's rows are computed whole: their shell columns, computed twice, add at
  // most an eighth to the interior's work.
  bool whole_rows() const {
    const std::int64_t whole = all[1].size() * all[2].size();
    return 8 * whole <= 9 * interior[1].size() * interior[2].size();
  }

  const WindowedPlan& plan;
  const kernels::ConvGeometry& g;
  std::size_t first_spatial, spatial;
  Ranges3 all, own, interior;  // outputs; box indices of the own block; outputs reading only it
};

// Whether a convolution forward can overlap its exchange box by box: the box is the own block and
// halo pieces in kernel order (pass-through dims first), halo arrives, and an interior exists.
inline bool overlaps_by_boxes(const WindowedPlan& p, const kernels::ConvGeometry& g,
                              std::size_t first_spatial) {
  return p.form == HaloForm::inside && !p.halo.local_only() && !p.empty() &&
         kernels::is_identity(p.to_kernel_order) && p.halo.inside_work() == p.halo.inside() &&
         !g.taps[0].transposed && BoxedConv(p, g, first_spatial).has_interior();
}

// Outputs `out` of one batch entry (at `out_entry`) from `input`, the box indices `in` in a box
// of their own (zeros where they read none): straight into the output where they are whole rows,
// else through a buffer.
template <class T>
void convolve_into(const BoxedConv& b, const Ranges3& out, const Ranges3& in, const T* input,
                   const T* weight, T* out_entry) {
  const kernels::ConvGeometry s = sub_geometry(b.g, out, in);
  const bool reads = std::none_of(in.begin(), in.end(), [](const Range& r) { return r.empty(); });
  const auto compute = [&](T* to) {
    if (reads)
      kernels::conv_forward(s, input, weight, to);
    else
      kernels::fill_values(to, kernels::conv_output_size(s), T(0));
  };
  const std::int64_t row = kernels::output_row_size(b.g);
  if (out[1] == b.all[1] && out[2] == b.all[2]) return compute(out_entry + out[0].begin * row);
  const kernels::Sizes sizes{s.out[0], s.out[1], s.out[2], s.c_out};
  Buffer<T> part(static_cast<std::size_t>(kernels::num_elements(sizes)));
  compute(part.data());
  const kernels::Strides strides =
      kernels::row_major_strides({b.g.out[0], b.g.out[1], b.g.out[2], b.g.c_out});
  const std::int64_t offset =
      out[0].begin * strides[0] + out[1].begin * strides[1] + out[2].begin * strides[2];
  kernels::copy_box(sizes, static_cast<const T*>(part.data()), kernels::row_major_strides(sizes),
                    out_entry + offset, strides);
}

// The interior's output rows [a, e) of one batch entry (at `out_entry`), read from the entry's own
// block in place (at `own_entry`): the own rows they read, and the whole block along the other
// dims.
template <class T>
void interior_rows_of_entry(const BoxedConv& b, std::int64_t a, std::int64_t e, const T* own_entry,
                            const T* weight, T* out_entry) {
  Ranges3 out = b.whole_rows() ? b.all : b.interior;
  out[0] = {a, e};
  Ranges3 in = b.own;
  in[0] = reads_along(b.g, 0, out[0]);
  const std::int64_t own_row = b.own[1].size() * b.own[2].size() * b.g.c_in;
  convolve_into(b, out, in, own_entry + (in[0].begin - b.own[0].begin) * own_row, weight,
                out_entry);
}

// The shell: along each kernel dim in turn, the outputs on either side of the interior — inside it
// along the dims before, whole along those after. With the interior it tiles the outputs.
inline std::vector<Ranges3> shell_boxes(const Ranges3& interior, const Ranges3& all) {
  std::vector<Ranges3> shell;
  for (std::size_t d = 0; d < 3; ++d)
    for (const Range& side :
         {Range{all[d].begin, interior[d].begin}, Range{interior[d].end, all[d].end}}) {
      Ranges3 out = all;
      for (std::size_t before = 0; before < d; ++before) out[before] = interior[before];
      out[d] = side;
      if (std::none_of(out.begin(), out.end(), [](const Range& r) { return r.empty(); }))
        shell.push_back(out);
    }
  return shell;
}

// The shell of one batch entry (`entry`: its index along each pass-through dim), each box from
// the box indices it reads, copied together from the own block (at `own`) and the halo pieces.
template <class T>
void shell_of_entry(const BoxedConv& b, const SavedBox<T>& saved, const std::vector<Range>& entry,
                    const T* own, const T* weight, T* out_entry) {
  const Block& box = saved.box();
  Block part = box;
  std::copy(entry.begin(), entry.end(), part.ranges.begin());
  Buffer<T> rows;
  for (const Ranges3& out : shell_boxes(b.interior, b.all)) {
    Ranges3 in;
    for (std::size_t d = 0; d < 3; ++d) in[d] = reads_along(b.g, d, out[d]);
    for (std::size_t d = 0; d < b.spatial; ++d) {
      const std::int64_t begin = box.ranges[b.first_spatial + d].begin;
      part.ranges[b.first_spatial + d] = {begin + in[d].begin, begin + in[d].end};
    }
    if (rows.size() < std::size_t(part.num_elements())) rows.resize(part.num_elements());
    saved.copy_part(part, own, rows.data());
    convolve_into(b, out, in, static_cast<const T*>(rows.data()), weight, out_entry);
  }
}

// Pass-through entry `p` of a box (row-major over its pass-through dims, the first
// `first_spatial`), as one index range per dim.
inline std::vector<Range> pass_entry(const Block& box, std::size_t first_spatial, std::int64_t p) {
  std::vector<Range> entry(first_spatial);
  for (std::size_t d = first_spatial; d-- > 0;) {
    const Range& r = box.ranges[d];
    entry[d] = {r.begin + p % r.size(), r.begin + p % r.size() + 1};
    p /= r.size();
  }
  return entry;
}

/// The forward of `x` into `out` (in kernel order) with the halo exchange overlapped: the interior
/// while the halo travels, in parts with the messages let advance between them, then the shell.
/// Returns what backward keeps: the input block and the halo pieces.
template <class T>
SavedBox<T> conv_forward_by_boxes(const WindowedPlan& plan, const kernels::ConvGeometry& g,
                                  std::size_t first_spatial, const T* weight, const Tensor<T>& x,
                                  Array<T>& out, EarlyHalo<T>* early = nullptr) {
  const BoxedConv b(plan, g, first_spatial);
  const T* own = x.array().data();
  const std::int64_t entries = plan.pass_size;
  const std::int64_t own_entry = std::int64_t(x.array().size()) / entries;
  const std::int64_t out_entry = std::int64_t(out.size()) / entries;
  // The exchange runs a step per split dim, each started once the one before has arrived: the
  // interior in parts enough for every step to travel under some of it.
  const std::int64_t parts = 2 * std::int64_t(plan.halo.exchanged().size()) + 1;
  auto pending = begin_pieces(plan, x.mesh(), x.array(), early);
  for (std::int64_t p = 0; p < entries; ++p)
    for_each_row_part(
        b.interior[0].begin, b.interior[0].end,
        [&](std::int64_t a, std::int64_t e) {
          interior_rows_of_entry(b, a, e, own + p * own_entry, weight, out.data() + p * out_entry);
          pending.progress();
        },
        parts);
  SavedBox<T> saved = SavedBox<T>::own_and_halo(x, plan.halo.inside(),
                                                finish_pieces(plan, x.mesh(), std::move(pending)));
  for (std::int64_t p = 0; p < entries; ++p)
    shell_of_entry(b, saved, pass_entry(plan.halo.inside(), first_spatial, p), own, weight,
                   out.data() + p * out_entry);
  return saved;
}

}  // namespace meshtensor::detail
