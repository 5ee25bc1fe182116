#pragma once
// What a windowed op keeps of its input box for backward. The box is the own block plus the halo
// around it; keeping it whole would hold a second copy of every split input until backward. So
// the own part is kept as the input tensor itself (shared, not copied) and only the halo regions
// are saved; backward rebuilds the box when it needs it, one op at a time. An input with a recipe
// (a normalisation's output) is not kept at all: its recipe is, and backward recomputes the block
// (or, where the recipe is a per-channel affine map, the weight gradient's kernels compute it as
// they read the block it maps).

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/halo.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::detail {

/// An input block kept for backward: the tensor itself (shared, not copied) or, when the tensor
/// can be recomputed from what backward keeps anyway, its recipe.
template <class T>
class KeptBlock {
 public:
  KeptBlock() = default;
  explicit KeptBlock(const Tensor<T>& input) : block_(input.block()) {
    if (input.recipe()) {
      recipe_ = input.recipe();
      mapped_ = input.mapped_recipe();
    } else {
      tensor_ = input.detach();
    }
  }

  bool defined() const { return tensor_.defined() || recipe_ != nullptr; }
  /// Whether data() computes the block (from its recipe) rather than pointing at it.
  bool recomputed() const { return !tensor_.defined() && recipe_ != nullptr; }
  const Block& block() const { return block_; }

  /// The block's data: the tensor's, or recomputed into `scratch` (the block's sizes).
  const T* data(Array<T>& scratch) const {
    if (tensor_.defined()) return tensor_.array().data();
    scratch = Array<T>::from_shape(to_xshape(block_.sizes()));
    (*recipe_)(scratch.data());
    return scratch.data();
  }

  /// The block for a kernel to read: where its recipe is an affine map and `mapped` (the kernel
  /// computes it as it reads), the data of the block it is computed from and that map (its
  /// channels innermost); else its data (recomputed into `scratch` where backward keeps the
  /// recipe) and null.
  std::pair<const T*, const kernels::ChannelAffine*> read_as(bool mapped, Array<T>& scratch) const {
    if (mapped && mapped_) return {mapped_->of.array().data(), &mapped_->map};
    return {data(scratch), nullptr};
  }

  /// Adds the block to `parts` (its channels innermost), as read_as gives it.
  void add_to(kernels::ChannelParts<const T>& parts, bool mapped, Array<T>& scratch) const {
    const auto [values, map] = read_as(mapped, scratch);
    parts.add(values, block_.sizes().back(), map);
  }

  /// Writes the block's elements, in order, to `out`.
  void write_to(T* out) const {
    if (tensor_.defined())
      kernels::copy_values(tensor_.array().data(), std::int64_t(tensor_.array().size()), out);
    else
      (*recipe_)(out);
  }

 private:
  Block block_;
  Tensor<T> tensor_;
  std::shared_ptr<const typename Tensor<T>::Recipe> recipe_;
  std::shared_ptr<const MappedRecipe<T>> mapped_;  // the recipe's structure, where it has one
};

template <class T>
class SavedBox {
 public:
  SavedBox() = default;

  /// The box itself, kept whole (its dims in another order than the input's, say).
  static SavedBox whole(Array<T>&& box) {
    SavedBox saved;
    saved.whole_ = std::move(box);
    return saved;
  }

  /// The input block itself when the box is exactly that block.
  static SavedBox own_block(const Tensor<T>& input) {
    SavedBox saved;
    saved.own_ = KeptBlock<T>(input);
    saved.box_ = input.block();
    return saved;
  }

  /// `box` over `box_block` (dims in `input`'s order, containing its block): the halo regions are
  /// copied out and the box dropped.
  static SavedBox halo_only(const Tensor<T>& input, const Array<T>& box, const Block& box_block) {
    SavedBox saved;
    saved.own_ = KeptBlock<T>(input);
    saved.box_ = box_block;
    const auto box_strides = kernels::row_major_strides(box_block.sizes());
    for (Block& slab : outside(box_block, input.block())) {
      Buffer<T> data(slab.num_elements());
      kernels::copy_box(slab.sizes(),
                        box.data() + kernels::offset_of_box(slab, box_block, box_strides),
                        box_strides, data.data(), kernels::row_major_strides(slab.sizes()));
      saved.halo_.emplace_back(std::move(slab), std::move(data));
    }
    return saved;
  }

  /// The input block and the halo pieces around it that make up `box_block` (a box kept apart,
  /// as the pieces form of a halo exchange returns it).
  static SavedBox own_and_halo(const Tensor<T>& input, const Block& box_block,
                               std::vector<std::pair<Block, Buffer<T>>>&& halo) {
    SavedBox saved;
    saved.own_ = KeptBlock<T>(input);
    saved.box_ = box_block;
    saved.halo_ = std::move(halo);
    return saved;
  }

  /// The box's global indices (not for whole()).
  const Block& box() const { return box_; }
  /// The kept input block and the saved halo pieces (empty for whole()).
  const KeptBlock<T>& own() const { return own_; }
  const std::vector<std::pair<Block, Buffer<T>>>& halo() const { return halo_; }

  /// Whether the box is the kept input block and halo pieces around it (not a saved array).
  bool in_pieces() const { return own_.defined() && !halo_.empty(); }

  /// Writes the part of the box over `part` (inside the box; in_pieces()) to `out`, row-major:
  /// from the input block's data (own().data()) and the halo pieces, so that a kernel can read the
  /// box a slab at a time rather than rebuilt whole.
  void copy_part(const Block& part, const T* own_data, T* out) const {
    gather_part(part, out, own_.block(), own_data, halo_);
  }

  /// The box's data: the saved array or the input block as they are, or the box rebuilt into
  /// `scratch`.
  const T* data(Array<T>& scratch) const {
    if (!own_.defined()) return whole_.data();
    if (halo_.empty()) return own_.data(scratch);
    scratch = Array<T>::from_shape(to_xshape(box_.sizes()));
    const auto box_strides = kernels::row_major_strides(box_.sizes());
    const Block& own = own_.block();
    T* own_in_box = scratch.data() + kernels::offset_of_box(own, box_, box_strides);
    if (contiguous_in(box_, own)) {
      // Straight into the box (a recomputed block too): no second block-sized buffer at the
      // moment of backward's peak.
      own_.write_to(own_in_box);
    } else {
      Array<T> own_scratch = empty_array<T>();
      kernels::copy_box(own.sizes(), own_.data(own_scratch),
                        kernels::row_major_strides(own.sizes()), own_in_box, box_strides);
    }
    for (const auto& [slab, data] : halo_)
      kernels::copy_box(slab.sizes(), data.data(), kernels::row_major_strides(slab.sizes()),
                        scratch.data() + kernels::offset_of_box(slab, box_, box_strides),
                        box_strides);
    return scratch.data();
  }

 private:
  Array<T> whole_ = empty_array<T>();
  KeptBlock<T> own_;
  Block box_;
  std::vector<std::pair<Block, Buffer<T>>> halo_;
};

}  // namespace meshtensor::detail
