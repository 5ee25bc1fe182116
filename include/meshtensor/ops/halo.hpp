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

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/elementwise.hpp"
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
    inside_ = clip(need_);
    const Block& in = inside_;
    for (std::size_t d = 0; d < shape.rank(); ++d)
      inside_work_.ranges.push_back(in.ranges[d].empty() ? own_.ranges[d]
                                                         : hull(own_.ranges[d], in.ranges[d]));
  }

  /// This processor's read range: the box exchange() returns (padding included).
  const Block& box() const { return need_; }
  /// The read range without the padding outside the tensor: the box exchange_inside() returns.
  const Block& inside() const { return inside_; }
  const Block& own() const { return own_; }
  /// The split dims exchanged, in order (positions in the tensor's shape).
  const std::vector<std::size_t>& exchanged() const { return exchanged_; }

  /// True when no processor exchanges anything (no split dim) and this one reads only its own
  /// block: the inside box is the block itself.
  bool local_only() const { return exchanged_.empty() && inside() == own_; }

  /// The read box filled from this processor's block `own` (in shape order), its neighbours, and
  /// `pad` outside the tensor.
  template <class T>
  Array<T> exchange(Mesh& mesh, const Array<T>& own, T pad) const {
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    kernels::fill_values(work.data(), std::int64_t(work.size()), pad);
    copy_into(work, cover_, own.data(), own_, own_);
    for (std::size_t step = 0; step < exchanged_.size(); ++step)
      move(mesh, step, cover_, work, /*adjoint=*/false);
    return extract(std::move(work), cover_, need_);
  }

  /// Like exchange(), without the padding: the array covers inside(), for kernels that treat reads
  /// outside their box as zeros. A processor that reads only its own block gets it back as is.
  template <class T>
  Array<T> exchange_inside(Mesh& mesh, const Array<T>& own) const {
    if (local_only()) return kernels::copy_of(own);  // where the block is (the GPU's memory)
    return finish(mesh, begin_inside(mesh, own));
  }

  /// The adjoint of exchange_inside(): `grad` over inside().
  template <class T>
  Array<T> exchange_add_inside(Mesh& mesh, Array<T>&& grad) const {
    if (local_only()) return std::move(grad);
    return finish(mesh, begin_add_inside(mesh, std::move(grad)));
  }

  /// An exchange under way: begun, its last message step in flight, until finish(). Between the
  /// two the caller computes what needs no halo (communication overlapped with computation).
  template <class T>
  struct Pending {
    Array<T> work =
        empty_array<T>();  // over inside_work(): the own block, and the halo once finished
    std::vector<Request> requests;
    std::vector<Buffer<T>> pieces;  // messages out and in, alive until the step completes
    std::vector<Block> unpack_at;   // where each received piece goes (empty for sent ones)
    std::size_t step = 0;           // the step in flight
    bool adjoint = false;
  };

  /// The box exchange_inside's work array covers: inside() and the own block. When it equals
  /// inside(), the caller may read the own part of Pending::work before finish().
  const Block& inside_work() const { return inside_work_; }

  /// Starts exchange_inside(): the own block is in place in the work array, every step but the
  /// last is done, and the last step's messages are in flight.
  template <class T>
  Pending<T> begin_inside(Mesh& mesh, const Array<T>& own) const {
    Pending<T> pending;
    pending.work = Array<T>::from_shape(detail_sizes(inside_work_));
    kernels::fill_values(pending.work.data(), std::int64_t(pending.work.size()), T(0));
    copy_into(pending.work, inside_work_, own.data(), own_, own_);
    for (std::size_t step = 0; step + 1 < exchanged_.size(); ++step)
      move(mesh, step, inside_work_, pending.work, /*adjoint=*/false);
    if (!exchanged_.empty()) post(mesh, exchanged_.size() - 1, inside_work_, pending, false);
    return pending;
  }

  /// Starts exchange_add_inside(): the first adjoint step's messages are in flight.
  template <class T>
  Pending<T> begin_add_inside(Mesh& mesh, Array<T>&& grad) const {
    Pending<T> pending;
    pending.adjoint = true;
    const Block& in = inside_;
    if (in == inside_work_) {
      pending.work = std::move(grad);
    } else {
      pending.work = Array<T>::from_shape(detail_sizes(inside_work_));
      kernels::fill_values(pending.work.data(), std::int64_t(pending.work.size()), T(0));
      copy_into(pending.work, inside_work_, grad.data(), in, in);
    }
    if (!exchanged_.empty()) post(mesh, exchanged_.size() - 1, inside_work_, pending, true);
    return pending;
  }

  /// Completes a begun exchange: exchange_inside's or exchange_add_inside's result.
  template <class T>
  Array<T> finish(Mesh& mesh, Pending<T>&& pending) const {
    if (exchanged_.empty())
      return extract(std::move(pending.work), inside_work_, pending.adjoint ? own_ : inside());
    complete(mesh, inside_work_, pending);
    if (!pending.adjoint) return extract(std::move(pending.work), inside_work_, inside());
    for (std::size_t step = exchanged_.size() - 1; step-- > 0;)
      move(mesh, step, inside_work_, pending.work, /*adjoint=*/true);
    return extract(std::move(pending.work), inside_work_, own_);
  }

  /// Pieces of a tensor, each over its box of global indices: the halo around a block, kept
  /// apart from it.
  template <class T>
  using Pieces = std::vector<std::pair<Block, Buffer<T>>>;

  /// With one exchanged dim, the halo without a box around the own block: posts the sends of the
  /// own block's rows others read and the receives of the rows this processor reads; finish_halo()
  /// returns them as pieces (each from one processor). Kernels can then read the own block in place
  /// and copy only what crosses into the halo.
  template <class T>
  Pending<T> begin_halo(Mesh& mesh, const Array<T>& own) const {
    require_one_exchanged_dim("begin_halo");
    Pending<T> pending;
    const auto own_strides = kernels::row_major_strides(own_.sizes());
    post(mesh, 0, pending, /*adjoint=*/false, [&](const Block& send, T* to) {
      kernels::copy_box(send.sizes(), own.data() + kernels::offset_of_box(send, own_, own_strides),
                        own_strides, to, kernels::row_major_strides(send.sizes()));
    });
    return pending;
  }

  /// The received halo of a begin_halo(): inside() minus the own block, in pieces.
  template <class T>
  Pieces<T> finish_halo(Mesh& mesh, Pending<T>&& pending) const {
    const auto start = std::chrono::steady_clock::now();
    const auto sent_before = mesh.traffic().bytes;
    wait_all(pending.requests);
    Pieces<T> halo;
    for (std::size_t i = 0; i < pending.pieces.size(); ++i)
      if (!pending.unpack_at[i].ranges.empty())
        halo.emplace_back(std::move(pending.unpack_at[i]), std::move(pending.pieces[i]));
    record(mesh, start, sent_before);
    return halo;
  }

  /// The adjoint of begin_halo(): sends the gradient of each halo piece (the pieces finish_halo()
  /// returned, same boxes) back to its owner and posts the receives of the gradients of the own
  /// rows others read, which finish_add_halo() adds.
  template <class T>
  Pending<T> begin_add_halo(Mesh& mesh, const Pieces<T>& halo_gradient) const {
    require_one_exchanged_dim("begin_add_halo");
    Pending<T> pending;
    post(mesh, 0, pending, /*adjoint=*/true, [&](const Block& send, T* to) {
      for (const auto& [box, data] : halo_gradient)
        if (box == send) {
          kernels::copy_values(data.data(), std::int64_t(data.size()), to);
          return;
        }
      throw Error("internal: begin_add_halo got no gradient for a halo piece it received");
    });
    return pending;
  }

  /// Completes begin_add_halo(): adds the received gradients into `own` (over the own block).
  template <class T>
  void finish_add_halo(Mesh& mesh, Pending<T>&& pending, Array<T>& own) const {
    pending.work = std::move(own);
    complete(mesh, own_, pending);
    own = std::move(pending.work);
  }

  /// The adjoint of exchange(): `grad` over box() becomes the gradient of this processor's own
  /// block, with the parts other processors read added in.
  template <class T>
  Array<T> exchange_add(Mesh& mesh, const Array<T>& grad) const {
    Array<T> work = Array<T>::from_shape(detail_sizes(cover_));
    kernels::fill_values(work.data(), std::int64_t(work.size()), T(0));
    copy_into(work, cover_, grad.data(), need_, inside_);
    for (std::size_t step = exchanged_.size(); step-- > 0;)
      move(mesh, step, cover_, work, /*adjoint=*/true);
    return extract(std::move(work), cover_, own_);
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
  static Array<T> extract(Array<T>&& work, const Block& work_box, const Block& box) {
    if (work_box == box) return std::move(work);
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

  // One exchange step along dim exchanged_[step] on `work` (an array over `work_box`); the adjoint
  // sends gradients back and adds them.
  template <class T>
  void move(Mesh& mesh, std::size_t step, const Block& work_box, Array<T>& work,
            bool adjoint) const {
    Pending<T> pending;
    pending.adjoint = adjoint;
    pending.work = std::move(work);
    post(mesh, step, work_box, pending, adjoint);
    complete(mesh, work_box, pending);
    work = std::move(pending.work);
  }

  void require_one_exchanged_dim(const char* what) const {
    if (exchanged_.size() != 1)
      throw Error(std::string("internal: HaloPlan::") + what + " needs exactly one exchanged dim");
  }

  // Posts step `step`'s sends (copied out of the work array) and receives.
  template <class T>
  void post(Mesh& mesh, std::size_t step, const Block& work_box, Pending<T>& pending,
            bool adjoint) const {
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    post(mesh, step, pending, adjoint, [&](const Block& send, T* to) {
      kernels::copy_box(send.sizes(),
                        pending.work.data() + kernels::offset_of_box(send, work_box, work_strides),
                        work_strides, to, kernels::row_major_strides(send.sizes()));
    });
  }

  // Posts step `step`'s sends, each packed by pack(box, destination), and receives.
  template <class T, class Pack>
  void post(Mesh& mesh, std::size_t step, Pending<T>& pending, bool adjoint, Pack&& pack) const {
    const auto start = std::chrono::steady_clock::now();
    const auto sent_before = mesh.traffic().bytes;
    const std::size_t d = exchanged_[step];
    const std::size_t axis = *layout_.mesh_axis_of(d);
    Communicator& group = mesh.group(AxisSet{1} << axis);
    const int me = index_[d];
    const int parts = static_cast<int>(needs_[d].size());
    pending.step = step;
    pending.adjoint = adjoint;
    for (int other = 0; other < parts; ++other) {
      if (other == me) continue;
      // Forward: send what `other` reads of mine, receive what I read of `other`'s. The adjoint
      // swaps the two, carrying gradients.
      const Block send = adjoint ? step_box(step, other, me) : step_box(step, me, other);
      const Block receive = adjoint ? step_box(step, me, other) : step_box(step, other, me);
      if (!send.empty()) {
        Buffer<T> piece(send.num_elements());
        pack(send, piece.data());
        pending.requests.push_back(group.isend(piece.data(), piece.size() * sizeof(T), other,
                                               detail::tags::halo, piece.space()));
        pending.pieces.push_back(std::move(piece));
        pending.unpack_at.push_back(Block{});
      }
      if (!receive.empty()) {
        pending.pieces.emplace_back(receive.num_elements());
        pending.unpack_at.push_back(receive);
        Buffer<T>& piece = pending.pieces.back();
        pending.requests.push_back(group.irecv(piece.data(), piece.size() * sizeof(T), other,
                                               detail::tags::halo, piece.space()));
      }
    }
    group.start_posted();  // the caller computes while they travel
    record(mesh, start, sent_before);
  }

  // Waits for the step in flight and unpacks what arrived into the work array.
  template <class T>
  void complete(Mesh& mesh, const Block& work_box, Pending<T>& pending) const {
    const auto start = std::chrono::steady_clock::now();
    const auto sent_before = mesh.traffic().bytes;
    wait_all(pending.requests);
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    for (std::size_t i = 0; i < pending.pieces.size(); ++i) {
      const Block& box = pending.unpack_at[i];
      if (box.ranges.empty()) continue;
      T* at = pending.work.data() + kernels::offset_of_box(box, work_box, work_strides);
      const auto sizes = box.sizes();
      const auto strides = kernels::row_major_strides(sizes);
      const T* from = pending.pieces[i].data();
      if (!pending.adjoint) {
        kernels::copy_box(sizes, from, strides, at, work_strides);
      } else {
        kernels::zip(kernels::Binary<T, kernels::BinaryOp::add>{}, sizes,
                     {work_strides, strides, work_strides}, at, from, at);
      }
    }
    pending.requests.clear();
    pending.pieces.clear();
    pending.unpack_at.clear();
    record(mesh, start, sent_before);
  }

  static void record(Mesh& mesh, std::chrono::steady_clock::time_point start,
                     std::uint64_t sent_before) {
    HaloProfile& profile = halo_profile(mesh);
    profile.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    profile.bytes_sent += mesh.traffic().bytes - sent_before;
    ++profile.exchanges;
  }

  TensorLayout layout_;
  HaloNeeds needs_;
  Block own_, need_, cover_, wanted_;
  Block inside_;                        // need_ clipped to the tensor
  Block inside_work_;                   // hull of own_ and inside(): exchange_inside's work array
  std::vector<int> index_;              // this processor's block index along each dim
  std::vector<std::size_t> exchanged_;  // split dims, in exchange order
};

}  // namespace meshtensor
