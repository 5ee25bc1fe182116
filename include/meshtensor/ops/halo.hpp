#pragma once
// Halo exchange on a block: each processor gets the input range its outputs read, from whoever
// owns it, as its HaloPlan (core/halo_plan.hpp: which boxes, which messages, in which steps) says.
// Each step's messages travel through comm/halo_step.hpp; here the boxes are packed from and
// unpacked into the arrays, by the copy kernels. exchange_add() and the other adjoints send the
// gradient of each received part back to its owner and add it there.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/elementwise.hpp"

namespace meshtensor {

/// A halo plan (core/halo_plan.hpp) carried out on a mesh: the blocks and messages it plans.
class HaloExchange : public HaloPlan {
 public:
  using HaloPlan::HaloPlan;

  /// The read box filled from this processor's block `own` (in shape order), its neighbours, and
  /// `pad` outside the tensor.
  template <class T>
  Array<T> exchange(Mesh& mesh, const Array<T>& own, T pad) const {
    Array<T> work = Array<T>::from_shape(sizes_of(cover()));
    kernels::fill_values(work.data(), std::int64_t(work.size()), pad);
    copy_into(work, cover(), own.data(), HaloPlan::own(), HaloPlan::own());
    for (std::size_t step = 0; step < exchanged().size(); ++step)
      move(mesh, step, cover(), work, /*adjoint=*/false);
    return extract(std::move(work), cover(), box());
  }

  /// Like exchange(), without the padding: the array covers inside(), for kernels that treat reads
  /// outside their box as zeros. A processor that reads only its own block gets it back as is.
  template <class T>
  Array<T> exchange_inside(Mesh& mesh, const Array<T>& own) const {
    if (local_only()) return kernels::copy_of(own);  // where the block is (its device's memory)
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
    HaloStep<T> step;      // the step in flight
    bool adjoint = false;
  };

  /// Starts exchange_inside(): the own block is in place in the work array, every step but the
  /// last is done, and the last step's messages are in flight.
  template <class T>
  Pending<T> begin_inside(Mesh& mesh, const Array<T>& own) const {
    Pending<T> pending;
    pending.work = Array<T>::from_shape(sizes_of(inside_work()));
    kernels::fill_values(pending.work.data(), std::int64_t(pending.work.size()), T(0));
    copy_into(pending.work, inside_work(), own.data(), HaloPlan::own(), HaloPlan::own());
    for (std::size_t step = 0; step + 1 < exchanged().size(); ++step)
      move(mesh, step, inside_work(), pending.work, /*adjoint=*/false);
    if (!exchanged().empty()) post(mesh, exchanged().size() - 1, inside_work(), pending, false);
    return pending;
  }

  /// Starts exchange_add_inside(): the first adjoint step's messages are in flight.
  template <class T>
  Pending<T> begin_add_inside(Mesh& mesh, Array<T>&& grad) const {
    Pending<T> pending;
    pending.adjoint = true;
    const Block& in = inside();
    if (in == inside_work()) {
      pending.work = std::move(grad);
    } else {
      pending.work = Array<T>::from_shape(sizes_of(inside_work()));
      kernels::fill_values(pending.work.data(), std::int64_t(pending.work.size()), T(0));
      copy_into(pending.work, inside_work(), grad.data(), in, in);
    }
    if (!exchanged().empty()) post(mesh, exchanged().size() - 1, inside_work(), pending, true);
    return pending;
  }

  /// Completes a begun exchange: exchange_inside's or exchange_add_inside's result.
  template <class T>
  Array<T> finish(Mesh& mesh, Pending<T>&& pending) const {
    if (exchanged().empty())
      return extract(std::move(pending.work), inside_work(),
                     pending.adjoint ? HaloPlan::own() : inside());
    complete(inside_work(), pending);
    if (!pending.adjoint) return extract(std::move(pending.work), inside_work(), inside());
    for (std::size_t step = exchanged().size() - 1; step-- > 0;)
      move(mesh, step, inside_work(), pending.work, /*adjoint=*/true);
    return extract(std::move(pending.work), inside_work(), HaloPlan::own());
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
    const auto own_strides = kernels::row_major_strides(HaloPlan::own().sizes());
    post(mesh, 0, pending, /*adjoint=*/false, [&](const Block& send, T* to) {
      kernels::copy_box(send.sizes(),
                        own.data() + kernels::offset_of_box(send, HaloPlan::own(), own_strides),
                        own_strides, to, kernels::row_major_strides(send.sizes()));
    });
    return pending;
  }

  /// The received halo of a begin_halo(): inside() minus the own block, in pieces.
  template <class T>
  Pieces<T> finish_halo(Mesh& /*mesh*/, Pending<T>&& pending) const {
    return pending.step.take_received();
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
  void finish_add_halo(Mesh& /*mesh*/, Pending<T>&& pending, Array<T>& own) const {
    pending.work = std::move(own);
    complete(HaloPlan::own(), pending);
    own = std::move(pending.work);
  }

  /// The adjoint of exchange(): `grad` over box() becomes the gradient of this processor's own
  /// block, with the parts other processors read added in.
  template <class T>
  Array<T> exchange_add(Mesh& mesh, const Array<T>& grad) const {
    Array<T> work = Array<T>::from_shape(sizes_of(cover()));
    kernels::fill_values(work.data(), std::int64_t(work.size()), T(0));
    copy_into(work, cover(), grad.data(), box(), inside());
    for (std::size_t step = exchanged().size(); step-- > 0;)
      move(mesh, step, cover(), work, /*adjoint=*/true);
    return extract(std::move(work), cover(), HaloPlan::own());
  }

 private:
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
    Array<T> out = Array<T>::from_shape(sizes_of(box));
    if (box.empty()) return out;
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    kernels::copy_box(box.sizes(),
                      work.data() + kernels::offset_of_box(box, work_box, work_strides),
                      work_strides, out.data(), kernels::row_major_strides(box.sizes()));
    return out;
  }

  // One exchange step along dim exchanged()[step] on `work` (an array over `work_box`); the adjoint
  // sends gradients back and adds them.
  template <class T>
  void move(Mesh& mesh, std::size_t step, const Block& work_box, Array<T>& work,
            bool adjoint) const {
    Pending<T> pending;
    pending.adjoint = adjoint;
    pending.work = std::move(work);
    post(mesh, step, work_box, pending, adjoint);
    complete(work_box, pending);
    work = std::move(pending.work);
  }

  void require_one_exchanged_dim(const char* what) const {
    if (exchanged().size() != 1)
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
    pending.adjoint = adjoint;
    pending.step = HaloStep<T>(mesh, *this, step, adjoint, std::forward<Pack>(pack));
  }

  // Waits for the step in flight and unpacks what arrived into the work array: copied, or added
  // for the adjoint.
  template <class T>
  void complete(const Block& work_box, Pending<T>& pending) const {
    const auto work_strides = kernels::row_major_strides(work_box.sizes());
    pending.step.finish([&](const Block& box, const T* from) {
      T* at = pending.work.data() + kernels::offset_of_box(box, work_box, work_strides);
      const auto sizes = box.sizes();
      const auto strides = kernels::row_major_strides(sizes);
      if (!pending.adjoint)
        kernels::copy_box(sizes, from, strides, at, work_strides);
      else
        kernels::zip(kernels::Binary<T, kernels::BinaryOp::add>{}, sizes,
                     {work_strides, strides, work_strides}, at, from, at);
    });
  }
};

}  // namespace meshtensor
