#pragma once
// Halo exchange: each processor gets the input range its outputs read, from whoever owns it.
//
// A windowed op says, for each dim and each block index along the mesh axis splitting that dim,
// which input range the outputs of that block read (`needs`, in global coordinates; parts outside
// [0, n) are padding). Split dims are exchanged one after another — the first with the own block's
// extent in the other dims, each later one with the halos already received — so corner regions
// travel through a face neighbour and only processors along one mesh axis ever talk. A range wider
// than a neighbour's block is fetched from every processor along the axis that owns part of it.
// Every message carries exactly a part of a range its receiver reads. exchange_add() is the
// adjoint: it sends the gradient of each received part back to its owner and adds it there.

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/reference/copy_box.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/detail/tags.hpp"

namespace meshtensor {

/// Time this processor has spent in halo exchanges (copies, messages and waiting for them), and how
/// many it ran: kept with the Mesh, for benchmarks and profiles.
struct HaloProfile {
  double seconds = 0;
  std::uint64_t exchanges = 0;
  std::uint64_t bytes_sent = 0;
};
inline HaloProfile& halo_profile(Mesh& mesh) { return mesh.context<HaloProfile>(); }

/// The range of every dim that each block index reads: needs[d][j] for block j along the mesh
/// axis of dim d (one entry for an unsplit dim).
using HaloNeeds = std::vector<std::vector<Range>>;

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
  }

  /// This processor's read range: the box exchange() returns (padding included).
  const Block& box() const { return need_; }
  /// The read range without the padding outside the tensor: the box exchange_inside() returns.
  Block inside() const { return clip(need_); }
  const Block& own() const { return own_; }
  /// True when no processor exchanges anything (no split dim) and this one reads only its own
  /// block: the inside box is the block itself.
  bool local_only() const { return exchanged_.empty() && inside() == own_; }

  /// The read box filled from this processor's block `own` (in shape order), its neighbours, and
  /// `pad` outside the tensor.
  template <class T>
  Array<T> exchange(Mesh& mesh, const Array<T>& own, T pad) const {
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    work.fill(pad);
    copy_into(work, cover_, own.data(), own_, own_);
    for (std::size_t step = 0; step < exchanged_.size(); ++step)
      move(mesh, step, work, /*adjoint=*/false);
    return extract(work, cover_, need_);
  }

  /// Like exchange(), without the padding: the array covers inside(), for kernels that treat reads
  /// outside their box as zeros. A processor that reads only its own block gets it back as is.
  template <class T>
  Array<T> exchange_inside(Mesh& mesh, const Array<T>& own) const {
    if (local_only()) return own;
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    work.fill(T(0));
    copy_into(work, cover_, own.data(), own_, own_);
    for (std::size_t step = 0; step < exchanged_.size(); ++step)
      move(mesh, step, work, /*adjoint=*/false);
    return extract(work, cover_, inside());
  }

  /// The adjoint of exchange_inside(): `grad` over inside().
  template <class T>
  Array<T> exchange_add_inside(Mesh& mesh, Array<T>&& grad) const {
    if (local_only()) return grad;
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    work.fill(T(0));
    const Block in = inside();
    copy_into(work, cover_, grad.data(), in, in);
    for (std::size_t step = exchanged_.size(); step-- > 0;)
      move(mesh, step, work, /*adjoint=*/true);
    return extract(work, cover_, own_);
  }

  /// The adjoint of exchange(): `grad` over box() becomes the gradient of this processor's own
  /// block, with the parts other processors read added in.
  template <class T>
  Array<T> exchange_add(Mesh& mesh, const Array<T>& grad) const {
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    work.fill(T(0));
    copy_into(work, cover_, grad.data(), need_, clip(need_));
    for (std::size_t step = exchanged_.size(); step-- > 0;)
      move(mesh, step, work, /*adjoint=*/true);
    return extract(work, cover_, own_);
  }

 private:
  static Range hull(const Range& a, const Range& b) {
    return {std::min(a.begin, b.begin), std::max(a.end, b.end)};
  }
  static std::vector<std::size_t> detail_sizes(const Block& b) {
    std::vector<std::size_t> sizes;
    for (const auto& r : b.ranges) sizes.push_back(static_cast<std::size_t>(r.size()));
    return sizes;
  }
  Block clip(const Block& b) const {
    Block out;
    for (std::size_t d = 0; d < b.ranges.size(); ++d)
      out.ranges.push_back(intersect(b.ranges[d], {0, layout_.shape()[d].size}));
    return out;
  }

  // Copies `box` from `src` (an array over `src_box`) into `work` (an array over `work_box`).
  template <class T>
  static void copy_into(Array<T>& work, const Block& work_box, const T* src, const Block& src_box,
                        const Block& box) {
    if (box.empty()) return;
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    const auto src_strides = kernels::row_major_strides(src_box.sizes());
    kernels::copy_box(
        box.sizes(), src + kernels::offset_of_box(box, src_box, src_strides), src_strides,
        work.data() + kernels::offset_of_box(box, work_box, work_strides), work_strides);
  }

  template <class T>
  static Array<T> extract(const Array<T>& work, const Block& work_box, const Block& box) {
    if (work_box == box) return work;
    Array<T> out = Array<T>::from_shape(detail_sizes(box));
    if (box.empty()) return out;
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    kernels::copy_box(box.sizes(),
                      work.data() + kernels::offset_of_box(box, work_box, work_strides),
                      work_strides, out.data(), kernels::row_major_strides(box.sizes()));
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

  // One exchange step along dim exchanged_[step]; adjoint sends gradients back and adds them.
  template <class T>
  void move(Mesh& mesh, std::size_t step, Array<T>& work, bool adjoint) const {
    const auto start = std::chrono::steady_clock::now();
    const auto sent_before = mesh.traffic().bytes;
    move_pieces(mesh, step, work, adjoint);
    HaloProfile& profile = halo_profile(mesh);
    profile.bytes_sent += mesh.traffic().bytes - sent_before;
    profile.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++profile.exchanges;
  }

  template <class T>
  void move_pieces(Mesh& mesh, std::size_t step, Array<T>& work, bool adjoint) const {
    const std::size_t d = exchanged_[step];
    const std::size_t axis = *layout_.mesh_axis_of(d);
    Communicator& group = mesh.group(AxisSet{1} << axis);
    const int me = index_[d];
    const int parts = static_cast<int>(needs_[d].size());
    struct Piece {
      Block box;
      std::vector<T> data;
    };
    std::vector<Piece> outgoing, incoming;
    outgoing.reserve(parts);
    incoming.reserve(parts);
    std::vector<Request> requests;
    const auto work_strides = kernels::row_major_strides(cover_.sizes());
    for (int other = 0; other < parts; ++other) {
      if (other == me) continue;
      // Forward: send what `other` reads of mine, receive what I read of `other`'s. The adjoint
      // swaps the two, carrying gradients.
      const Block send = adjoint ? step_box(step, other, me) : step_box(step, me, other);
      const Block receive = adjoint ? step_box(step, me, other) : step_box(step, other, me);
      if (!send.empty()) {
        auto& piece = outgoing.emplace_back(Piece{send, std::vector<T>(send.num_elements())});
        kernels::copy_box(
            send.sizes(), work.data() + kernels::offset_of_box(send, cover_, work_strides),
            work_strides, piece.data.data(), kernels::row_major_strides(send.sizes()));
        requests.push_back(group.isend(piece.data.data(), piece.data.size() * sizeof(T), other,
                                       detail::tags::halo));
      }
      if (!receive.empty()) {
        auto& piece = incoming.emplace_back(Piece{receive, std::vector<T>(receive.num_elements())});
        requests.push_back(group.irecv(piece.data.data(), piece.data.size() * sizeof(T), other,
                                       detail::tags::halo));
      }
    }
    wait_all(requests);
    for (const auto& piece : incoming) {
      T* at = work.data() + kernels::offset_of_box(piece.box, cover_, work_strides);
      const auto sizes = piece.box.sizes();
      const auto strides = kernels::row_major_strides(sizes);
      if (!adjoint) {
        kernels::copy_box(sizes, piece.data.data(), strides, at, work_strides);
      } else {
        const T* from = piece.data.data();
        kernels::for_each_offset<2>(
            sizes, {strides, work_strides},
            [&](const std::array<std::int64_t, 2>& o) { at[o[1]] += from[o[0]]; });
      }
    }
  }

  TensorLayout layout_;
  HaloNeeds needs_;
  Block own_, need_, cover_, wanted_;
  std::vector<int> index_;              // this processor's block index along each dim
  std::vector<std::size_t> exchanged_;  // split dims, in exchange order
};

}  // namespace meshtensor
