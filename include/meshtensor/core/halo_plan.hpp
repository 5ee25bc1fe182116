#pragma once
// Halo planning, pure arithmetic on a layout and the ranges a windowed op reads: no mesh, no
// messages, no data. A windowed op says, for each dim and each block index along the mesh axis
// splitting that dim, which input range the outputs of that block read (HaloNeeds, in global
// coordinates; parts outside [0, n) are padding). Split dims are exchanged one after another — the
// first with the own block's extent in the other dims, each later one with the halos already
// received — so corner regions travel through a face neighbour and only processors along one mesh
// axis ever talk. A range wider than a neighbour's block is fetched from every processor along the
// axis that owns part of it. Every message carries exactly a part of a range its receiver reads.
// ops/halo.hpp carries a plan out.

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/core/window.hpp"

namespace meshtensor {

/// The range of every dim that each block index reads: needs[d][j] for block j along the mesh
/// axis of dim d (one entry for an unsplit dim).
using HaloNeeds = std::vector<std::vector<Range>>;

/// What the blocks of a windowed op's input read: spatial dims (named in `spatial`, window
/// windows[i] each) through their window from the output block of the same index (of
/// `output_shape`), a transposed convolution's way with `transposed`; the other dims exactly
/// their own block.
inline HaloNeeds window_needs(const TensorLayout& input, const Shape& output_shape,
                              const std::vector<std::string>& spatial,
                              const std::vector<WindowDim>& windows, bool transposed) {
  const Shape& shape = input.shape();
  HaloNeeds needs;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const auto axis = input.mesh_axis_of(d);
    const int parts = axis ? input.mesh_shape()[*axis].size : 1;
    const auto s = std::find(spatial.begin(), spatial.end(), shape[d].name);
    std::vector<Range> per_block;
    for (int j = 0; j < parts; ++j) {
      if (s == spatial.end()) {
        per_block.push_back(block_range(shape[d].size, parts, j));
        continue;
      }
      const WindowDim& w = windows[std::size_t(s - spatial.begin())];
      const Range out = block_range(output_shape[d].size, parts, j);
      per_block.push_back(transposed ? w.transposed_reads(out) : w.conv_reads(out));
    }
    needs.push_back(std::move(per_block));
  }
  return needs;
}

/// One message of an exchange step between this processor and `peer` (its block index along the
/// step's mesh axis): the box it sends and the box it receives, in global coordinates (either
/// empty when nothing goes that way).
struct HaloMessage {
  int peer = 0;
  Block send, receive;
};

/// One processor's part of a halo exchange.
class HaloPlan {
 public:
  HaloPlan(const TensorLayout& layout, const MeshCoord& me, HaloNeeds needs)
      : layout_(layout), needs_(std::move(needs)) {
    const auto& shape = layout.shape();
    own_ = layout.block(me);
    for (std::size_t d = 0; d < shape.rank(); ++d) {
      const auto axis = layout.mesh_axis_of(d);
      const int parts = axis ? layout.mesh_shape()[*axis].size : 1;
      const int index = axis ? me[*axis] : 0;
      if (needs_[d].size() != static_cast<std::size_t>(parts))
        throw Error("internal: halo plan for dim " + shape[d].name + " has " +
                    std::to_string(needs_[d].size()) + " ranges for " + std::to_string(parts) +
                    " blocks");
      index_.push_back(index);
      const Range need = needs_[d][index];
      need_.ranges.push_back(need);
      cover_.ranges.push_back(need.empty() ? own_.ranges[d] : hull(own_.ranges[d], need));
      // What any processor along the axis reads of this block: what it must hold before sending.
      Range wanted{0, 0};
      for (int j = 0; j < parts; ++j) {
        const Range read = intersect(needs_[d][j], own_.ranges[d]);
        if (!read.empty()) wanted = wanted.empty() ? read : hull(wanted, read);
      }
      wanted_.ranges.push_back(wanted);
      if (axis && parts > 1) exchanged_.push_back(d);
    }
    inside_ = clip(need_);
    const Block& in = inside_;
    for (std::size_t d = 0; d < shape.rank(); ++d)
      inside_work_.ranges.push_back(in.ranges[d].empty() ? own_.ranges[d]
                                                         : hull(own_.ranges[d], in.ranges[d]));
  }

  /// This processor's read range: the padded form's box (padding included).
  const Block& box() const { return need_; }
  /// The read range without the padding outside the tensor: the inside form's box.
  const Block& inside() const { return inside_; }
  const Block& own() const { return own_; }
  /// The split dims exchanged, in order (positions in the tensor's shape).
  const std::vector<std::size_t>& exchanged() const { return exchanged_; }

  /// True when no processor exchanges anything (no split dim) and this one reads only its own
  /// block: the inside box is the block itself.
  bool local_only() const { return exchanged_.empty() && inside() == own_; }

  /// The read box and the own block's hull: the padded form's work array.
  const Block& cover() const { return cover_; }
  /// The hull of own() and inside(): the inside form's work array.
  const Block& inside_work() const { return inside_work_; }
  /// The mesh axis along which exchange step `step` runs.
  std::size_t step_axis(std::size_t step) const { return *layout_.mesh_axis_of(exchanged_[step]); }

  /// Step `step`'s messages with each other processor along its axis. Forward, a processor sends
  /// what the peer reads of its own block and receives what it reads of the peer's; the adjoint
  /// (gradients going back to their owners) swaps the two.
  std::vector<HaloMessage> step_messages(std::size_t step, bool adjoint) const {
    const std::size_t d = exchanged_[step];
    const int me = index_[d], parts = static_cast<int>(needs_[d].size());
    std::vector<HaloMessage> messages;
    for (int other = 0; other < parts; ++other) {
      if (other == me) continue;
      HaloMessage m{other, step_box(step, me, other), step_box(step, other, me)};
      if (adjoint) std::swap(m.send, m.receive);
      if (!m.send.empty() || !m.receive.empty()) messages.push_back(std::move(m));
    }
    return messages;
  }

  /// The sizes of a box, as an array's shape.
  static std::vector<std::size_t> sizes_of(const Block& b) {
    std::vector<std::size_t> sizes;
    for (const auto& r : b.ranges) sizes.push_back(static_cast<std::size_t>(r.size()));
    return sizes;
  }

 private:
  static Range hull(const Range& a, const Range& b) {
    return {std::min(a.begin, b.begin), std::max(a.end, b.end)};
  }
  Block clip(const Block& b) const {
    Block out;
    for (std::size_t d = 0; d < b.ranges.size(); ++d)
      out.ranges.push_back(intersect(b.ranges[d], {0, layout_.shape()[d].size}));
    return out;
  }

  // The box of dim `d`'s exchange step that block `from` (along d's axis) sends to block `to`:
  // along d, the part of from's block that `to` reads; along dims exchanged before, the read
  // range (now filled); along dims exchanged later, what anyone reads of the own block.
  Block step_box(std::size_t step, int from, int to) const {
    const std::size_t d = exchanged_[step];
    const auto& shape = layout_.shape();
    const int parts = static_cast<int>(needs_[d].size());
    Block box;
    for (std::size_t e = 0; e < shape.rank(); ++e) {
      if (e == d) {
        box.ranges.push_back(intersect(block_range(shape[d].size, parts, from), needs_[d][to]));
        continue;
      }
      std::size_t order = exchanged_.size();
      for (std::size_t s = 0; s < exchanged_.size(); ++s)
        if (exchanged_[s] == e) order = s;
      const bool before = order < step;
      const bool unsplit = order == exchanged_.size();
      if (before || unsplit)
        box.ranges.push_back(intersect(need_.ranges[e], {0, shape[e].size}));
      else
        box.ranges.push_back(wanted_.ranges[e]);
    }
    return box;
  }

  TensorLayout layout_;
  HaloNeeds needs_;
  Block own_, need_, cover_, wanted_;
  Block inside_;                        // need_ clipped to the tensor
  Block inside_work_;                   // hull of own_ and inside(): the inside form's work array
  std::vector<int> index_;              // this processor's block index along each dim
  std::vector<std::size_t> exchanged_;  // split dims, in exchange order
};

}  // namespace meshtensor
