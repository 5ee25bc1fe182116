#pragma once
// Halo exchange on a block: each processor gets the input range its outputs read, from whoever
// owns it, as its HaloPlan (core/halo_plan.hpp: which boxes, which messages, in which steps) says.
// The messages travel through comm/halo_step.hpp's HaloTransfer; here the boxes are packed from
// and unpacked into the arrays, by the copy kernels. One begin()/finish() pair carries out every
// exchange: forward or adjoint (each received gradient added at its owner), in one of three forms.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/elementwise.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor {

/// How an exchange hands over the box a processor reads.
enum class HaloForm {
  padded,  ///< one array over box(): own block, halo, and a pad value outside the tensor
  inside,  ///< one array over inside(): it stops at the tensor's edges, kernels read zeros beyond
  pieces,  ///< the own block stays where it is; the halo comes as pieces (adjoint: one split dim)
};

/// Pieces of a tensor, each over its box of global indices: the halo around a block, kept apart.
template <class T>
using HaloPieces = std::vector<std::pair<Block, Buffer<T>>>;

/// Copies `box` from `src` (row-major over `src_box`) into `dst` (row-major over `dst_box`).
template <class T>
void copy_box_between(const Block& box, const T* src, const Block& src_box, T* dst,
                      const Block& dst_box) {
  if (box.empty()) return;
  const auto src_strides = kernels::row_major_strides(src_box.sizes());
  const auto dst_strides = kernels::row_major_strides(dst_box.sizes());
  kernels::copy_box(box.sizes(), src + kernels::offset_of_box(box, src_box, src_strides),
                    src_strides, dst + kernels::offset_of_box(box, dst_box, dst_strides),
                    dst_strides);
}

/// Writes the part of a box over `part` to `out`, row-major, from the arrays that tile the box:
/// `own` over `own_box` and the halo pieces.
template <class T>
void gather_part(const Block& part, T* out, const Block& own_box, const T* own,
                 const HaloPieces<T>& pieces) {
  copy_box_between(intersect(own_box, part), own, own_box, out, part);
  for (const auto& [box, data] : pieces)
    copy_box_between(intersect(box, part), data.data(), box, out, part);
}

/// What an exchange hands over. Forward: the read box (`array`; `pieces` for the pieces form).
/// Adjoint: given the read box's gradient in the same form, it returns the own block's (`array`).
template <class T>
struct HaloBox {
  Array<T> array = empty_array<T>();
  HaloPieces<T> pieces;
};

/// A halo plan (core/halo_plan.hpp) carried out on a mesh.
///
/// ```cpp
/// auto pending = halo.begin(mesh, HaloForm::inside, own);
/// compute_what_needs_no_halo();
/// Array<float> box = halo.finish(mesh, std::move(pending)).array;
/// Array<float> grad_own = halo.exchange_adjoint(mesh, HaloForm::inside, {std::move(grad_box)});
/// ```
class HaloExchange : public HaloPlan {
 public:
  using HaloPlan::HaloPlan;

  /// The plan carried out under another message tag than the halo's (tags::halo_beside): for an
  /// exchange in flight beside another, whose steps each processor may start in its own order.
  HaloExchange(const TensorLayout& layout, const MeshCoord& me, HaloNeeds needs, int tag)
      : HaloPlan(layout, me, std::move(needs)), tag_(tag) {}

  /// An exchange begun, a step in flight until finish().
  template <class T>
  struct Pending {
    HaloForm form = HaloForm::inside;
    bool adjoint = false;
    HaloBox<T> work;  // the array over work_box(form); the pieces form's received halo
    HaloTransfer<T> transfer;
    const HaloExchange* exchange = nullptr;
    const Array<T>* own = nullptr;  // the pieces form's own block, which later steps send from

    /// Lets the messages in flight advance while the caller computes, the next step starting
    /// where one has arrived (HaloTransfer::progress).
    void progress() {
      if (exchange) exchange->advance(*this);
    }
  };

  /// Starts sending the halo of `own` (this processor's block, in shape order) to whoever reads
  /// it and receiving the box this processor reads, in `form`; `pad` fills the padded form's box
  /// outside the tensor.
  template <class T>
  Pending<T> begin(Mesh& mesh, HaloForm form, const Array<T>& own, T pad = T(0)) const {
    Pending<T> p{form, false, {}, {}, this, &own};
    if (form == HaloForm::pieces) {
      p.transfer = HaloTransfer<T>(mesh, *this, false, gather_from(p), tag_);
      return p;
    }
    if (form == HaloForm::inside && local_only()) {
      p.work.array = kernels::copy_of(own);  // where the block is (its device's memory)
      return p;
    }
    const Block& work = work_box(form);
    p.work.array = filled<T>(work, form == HaloForm::padded ? pad : T(0));
    copy_into(p.work.array, work, own.data(), HaloPlan::own(), HaloPlan::own());
    p.transfer = HaloTransfer<T>(mesh, *this, false, pack_from(p.work.array, work), tag_);
    return p;
  }

  /// Starts the adjoint: `grad` is the gradient of what begin() in `form` returned (the pieces
  /// form: only the pieces; the own block's part comes at finish()). Each part of it goes back to
  /// the processor that owns it.
  template <class T>
  Pending<T> begin_adjoint(Mesh& mesh, HaloForm form, HaloBox<T>&& grad) const {
    Pending<T> p{form, true, {}, {}, this, nullptr};
    if (form == HaloForm::pieces) {
      require_one_exchanged_dim();
      p.work.pieces = std::move(grad.pieces);  // sent from where they are: kept until finish()
      p.transfer = HaloTransfer<T>(mesh, *this, true, pack_from(p.work.pieces), tag_);
      return p;
    }
    if (form == HaloForm::inside && local_only()) {
      p.work.array = std::move(grad.array);
      return p;
    }
    const Block& work = work_box(form);
    const Block& given = form == HaloForm::padded ? box() : inside();
    if (given == work) {
      p.work.array = std::move(grad.array);
    } else {  // the padding's gradient is dropped: nobody owns it
      p.work.array = filled<T>(work, T(0));
      copy_into(p.work.array, work, grad.array.data(), given, inside());
    }
    p.transfer = HaloTransfer<T>(mesh, *this, true, pack_from(p.work.array, work), tag_);
    return p;
  }

  /// Lets an exchange begun advance (Pending::progress): the step in flight tested, the next
  /// started where it has arrived.
  template <class T>
  void advance(Pending<T>& p) const {
    if (p.form == HaloForm::pieces) {
      if (!p.adjoint)
        p.transfer.progress(gather_from(p), keep_in(p.work.pieces));
      else  // one step (require_one_exchanged_dim): nothing to start after it
        p.transfer.progress(ignore_pack<T>, ignore_pieces<T>);
      return;
    }
    if (p.form == HaloForm::inside && local_only()) return;
    const Block& work = work_box(p.form);
    p.transfer.progress(pack_from(p.work.array, work), place_in(p.work.array, work, p.adjoint));
  }

  /// Completes an exchange. Forward: the read box in the form begun. Adjoint: the own block's
  /// gradient, with what others read of it added; for the pieces form, `own_part` is the own
  /// block's gradient computed while the pieces travelled, and the received parts are added to it.
  template <class T>
  HaloBox<T> finish(Mesh& /*mesh*/, Pending<T>&& p, Array<T> own_part = empty_array<T>()) const {
    if (p.form == HaloForm::pieces) {
      if (!p.adjoint) {
        p.transfer.finish(gather_from(p), keep_in(p.work.pieces));
        return std::move(p.work);
      }
      p.transfer.finish(ignore_pack<T>, place_in(own_part, HaloPlan::own(), true));
      return {std::move(own_part), {}};
    }
    if (p.form == HaloForm::inside && local_only()) return std::move(p.work);
    const Block& work = work_box(p.form);
    p.transfer.finish(pack_from(p.work.array, work), place_in(p.work.array, work, p.adjoint));
    if (p.adjoint) return {extract_in_place(std::move(p.work.array), work, HaloPlan::own()), {}};
    const Block& result = p.form == HaloForm::padded ? box() : inside();
    return {extract(std::move(p.work.array), work, result), {}};
  }

  /// begin() and finish() at once: the read box.
  template <class T>
  HaloBox<T> exchange(Mesh& mesh, HaloForm form, const Array<T>& own, T pad = T(0)) const {
    return finish(mesh, begin(mesh, form, own, pad));
  }

  /// begin_adjoint() and finish() at once (not the pieces form): the own block's gradient.
  template <class T>
  Array<T> exchange_adjoint(Mesh& mesh, HaloForm form, HaloBox<T>&& grad) const {
    return finish(mesh, begin_adjoint(mesh, form, std::move(grad))).array;
  }

 private:
  int tag_ = tags::halo;

  // The array a form's exchange works in: the read box and the own block's hull.
  const Block& work_box(HaloForm form) const {
    return form == HaloForm::padded ? cover() : form == HaloForm::inside ? inside_work() : own();
  }

  void require_one_exchanged_dim() const {
    if (exchanged().size() != 1)
      throw Error(
          "internal: the adjoint of the pieces form of a halo exchange needs exactly one "
          "exchanged dim, not " +
          std::to_string(exchanged().size()));
  }

  template <class T>
  static Array<T> filled(const Block& box, T value) {
    Array<T> a = Array<T>::from_shape(sizes_of(box));
    kernels::fill_values(a.data(), std::int64_t(a.size()), value);
    return a;
  }

  // Copies `box` from `src` (an array over `src_box`) into `work` (an array over `work_box`).
  template <class T>
  static void copy_into(Array<T>& work, const Block& work_box, const T* src, const Block& src_box,
                        const Block& box) {
    copy_box_between(box, src, src_box, work.data(), work_box);
  }

  template <class T>
  static Array<T> extract(Array<T>&& work, const Block& work_box, const Block& box) {
    if (work_box == box) return std::move(work);
    Array<T> out = Array<T>::from_shape(sizes_of(box));
    copy_into(out, box, work.data(), work_box, box);
    return out;
  }

  // The same, moved to the front of `work` rather than copied: no second array beside the work
  // array. For an adjoint's result, a gradient soon consumed, which holds the read box's memory
  // until then (a forward box is often kept for backward).
  template <class T>
  static Array<T> extract_in_place(Array<T>&& work, const Block& work_box, const Block& box) {
    if (work_box == box) return std::move(work);
    const auto strides = kernels::row_major_strides(work_box.sizes());
    if (!box.empty())
      kernels::compact_box(box.sizes(), work.data(), kernels::offset_of_box(box, work_box, strides),
                           strides);
    work.shrink_to(sizes_of(box));
    return std::move(work);
  }

  // pack(box, buffer) from an array over `array_box`, which the exchange keeps unchanged until
  // the step completes: a box that is one run of it (a split along the outermost dim) is sent
  // from there, any other copied out.
  template <class T>
  static auto pack_from(const Array<T>& array, const Block& array_box) {
    return [&array, array_box](const Block& send, Buffer<T>& buffer) {
      return run_or_packed(send, array.data(), array_box, buffer);
    };
  }

  // pack(box, buffer) from the piece over exactly that box, which is sent as it is.
  template <class T>
  static auto pack_from(const HaloPieces<T>& pieces) {
    return [&pieces](const Block& send, Buffer<T>&) -> const T* {
      for (const auto& [box, data] : pieces)
        if (box == send) return data.data();
      throw Error("internal: a halo exchange's adjoint got no gradient for a piece it received");
    };
  }

  // Where `box`'s values lie in `array` (over `array_box`) when they are one run of it; else
  // they are copied into `buffer`.
  template <class T>
  static const T* run_or_packed(const Block& box, const T* array, const Block& array_box,
                                Buffer<T>& buffer) {
    if (contiguous_in(array_box, box))
      return array +
             kernels::offset_of_box(box, array_box, kernels::row_major_strides(array_box.sizes()));
    buffer = Buffer<T>(box.num_elements());
    copy_box_between(box, array, array_box, buffer.data(), box);
    return buffer.data();
  }

  // unpack(box, piece) into an array over `array_box`: copied, or added for the adjoint.
  template <class T>
  static auto place_in(Array<T>& array, const Block& array_box, bool add) {
    return [&array, array_box, add](const Block& box, const Buffer<T>& piece) {
      const auto array_strides = kernels::row_major_strides(array_box.sizes());
      T* at = array.data() + kernels::offset_of_box(box, array_box, array_strides);
      const auto sizes = box.sizes();
      const auto strides = kernels::row_major_strides(sizes);
      if (!add)
        kernels::copy_box(sizes, piece.data(), strides, at, array_strides);
      else
        kernels::zip(kernels::Binary<T, kernels::BinaryOp::add>{}, sizes,
                     {array_strides, strides, array_strides}, at, piece.data(), at);
    };
  }

  // The pieces form's pack(box, buffer): from the own block (which the op keeps unchanged until
  // the exchange is finished) and the pieces received so far (a later step sends what earlier
  // ones brought too: the corners).
  template <class T>
  auto gather_from(const Pending<T>& p) const {
    return [this, &p](const Block& send, Buffer<T>& buffer) -> const T* {
      if (intersect(HaloPlan::own(), send) == send)
        return run_or_packed(send, p.own->data(), HaloPlan::own(), buffer);
      buffer = Buffer<T>(send.num_elements());
      gather_part(send, buffer.data(), HaloPlan::own(), p.own->data(), p.work.pieces);
      return buffer.data();
    };
  }

  template <class T>
  static auto keep_in(HaloPieces<T>& pieces) {
    return [&pieces](const Block& box, Buffer<T>& piece) {
      pieces.emplace_back(box, std::move(piece));
    };
  }

  // For a transfer of one step: nothing is packed after its first.
  template <class T>
  static const T* ignore_pack(const Block&, Buffer<T>&) {
    throw Error("internal: a one-step halo exchange was asked to pack a second step");
  }
  template <class T>
  static void ignore_pieces(const Block&, Buffer<T>&) {}
};

}  // namespace meshtensor
