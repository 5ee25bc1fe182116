#pragma once
// A Shape resolved against a MeshShape and a Layout: for each processor, the block of the global
// tensor it holds. This is the algebra at the centre of meshtensor; it has no data and no
// communicator, so every processor can ask about every other processor's block.

#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "meshtensor/core/block.hpp"
#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/core/shape.hpp"

namespace meshtensor {

/// The part of a global tensor one processor holds: a range per dim, in shape order.
struct Block {
  std::vector<Range> ranges;

  std::vector<std::int64_t> offsets() const {
    std::vector<std::int64_t> out;
    for (const auto& r : ranges) out.push_back(r.begin);
    return out;
  }
  std::vector<std::int64_t> sizes() const {
    std::vector<std::int64_t> out;
    for (const auto& r : ranges) out.push_back(r.size());
    return out;
  }
  /// Its elements; a ShapeError when they pass 64 bits.
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (const auto& r : ranges) {
      const auto next = detail::checked_product(n, r.size());
      if (!next) {
        std::ostringstream text;
        text << "the block " << *this << " has more elements than 64 bits count";
        throw ShapeError(text.str());
      }
      n = *next;
    }
    return n;
  }
  bool empty() const { return num_elements() == 0; }

  friend bool operator==(const Block& a, const Block& b) { return a.ranges == b.ranges; }
  friend bool operator!=(const Block& a, const Block& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const Block& block) {
    for (std::size_t i = 0; i < block.ranges.size(); ++i) out << (i ? " " : "") << block.ranges[i];
    return out;
  }
};

/// The box common to two blocks of the same tensor.
inline Block intersect(const Block& a, const Block& b) {
  Block out;
  for (std::size_t i = 0; i < a.ranges.size(); ++i)
    out.ranges.push_back(intersect(a.ranges[i], b.ranges[i]));
  return out;
}

/// Whether `inner` (a block inside `box`) is one run of a row-major array over `box`: single
/// positions along the dims before some dim, and the whole box along the dims after it.
inline bool contiguous_in(const Block& box, const Block& inner) {
  std::size_t d = 0;
  while (d < inner.ranges.size() && inner.ranges[d].size() == 1) ++d;
  for (std::size_t e = d + 1; e < inner.ranges.size(); ++e)
    if (inner.ranges[e] != box.ranges[e]) return false;
  return true;
}

/// `box` minus `inner` (a block inside it) as disjoint slabs: along dim d, the parts before and
/// after inner's range, over inner's ranges in the dims before d and box's in the dims after.
inline std::vector<Block> outside(const Block& box, const Block& inner) {
  std::vector<Block> slabs;
  for (std::size_t d = 0; d < inner.ranges.size(); ++d)
    for (const Range along : {Range{box.ranges[d].begin, inner.ranges[d].begin},
                              Range{inner.ranges[d].end, box.ranges[d].end}}) {
      if (along.empty()) continue;
      Block slab;
      for (std::size_t e = 0; e < inner.ranges.size(); ++e)
        slab.ranges.push_back(e < d ? inner.ranges[e] : e == d ? along : box.ranges[e]);
      if (!slab.empty()) slabs.push_back(std::move(slab));
    }
  return slabs;
}

/**
 * A tensor's global shape placed on a mesh by a layout.
 *
 * ```cpp
 * TensorLayout t("batch:2, x:10, y:6", "rows:2; cols:2", "x:rows; y:cols");
 * t.to_string();            // [batch=2, x=10@rows, y=6@cols]
 * t.block(3).ranges;        // processor 3 (rows=1, cols=1): batch [0,2) x [5,10) y [3,6)
 * ```
 * @post for every processor p, block(p) lies inside the shape
 * @post the blocks of the processors that share coordinates on the unused mesh axes are disjoint
 *       and cover the shape; processors that differ only on unused axes hold the same block
 */
class TensorLayout {
 public:
  TensorLayout() = default;
  TensorLayout(Shape shape, MeshShape mesh, const Layout& layout)
      : shape_(std::move(shape)), mesh_(std::move(mesh)), axis_of_dim_(shape_.rank(), -1) {
    for (const auto& rule : layout.rules()) {
      auto axis = mesh_.find(rule.mesh_axis);
      if (!axis)
        throw LayoutError("layout " + detail::quote(layout.to_string()) + " names mesh axis " +
                          detail::quote(rule.mesh_axis) + ", but mesh " + mesh_.to_string() +
                          " has axes " + detail::quote_list(mesh_.names()));
      auto position = shape_.find(rule.dim);
      if (!position) continue;  // a rule for dims this tensor does not have
      for (std::size_t other = 0; other < shape_.rank(); ++other)
        if (axis_of_dim_[other] == static_cast<int>(*axis))
          throw LayoutError("layout " + detail::quote(layout.to_string()) + " splits both dims " +
                            detail::quote(shape_[other].name) + " and " + detail::quote(rule.dim) +
                            " of tensor " + shape_.to_string() + " over mesh axis " +
                            detail::quote(rule.mesh_axis) +
                            "; a mesh axis splits at most one dim of a tensor");
      axis_of_dim_[*position] = static_cast<int>(*axis);
    }
  }

  const Shape& shape() const { return shape_; }
  const MeshShape& mesh_shape() const { return mesh_; }
  std::size_t rank() const { return shape_.rank(); }

  /// The rules that apply to this tensor, in shape order.
  Layout layout() const {
    std::vector<LayoutRule> rules;
    for (std::size_t d = 0; d < shape_.rank(); ++d)
      if (axis_of_dim_[d] >= 0) rules.push_back({shape_[d].name, mesh_[axis_of_dim_[d]].name});
    return Layout(std::move(rules));
  }

  /// The same tensor under another layout on the same mesh.
  TensorLayout with_layout(const Layout& layout) const { return {shape_, mesh_, layout}; }

  /// Mesh axis position splitting dim `position`, or nullopt if that dim is replicated.
  std::optional<std::size_t> mesh_axis_of(std::size_t position) const {
    if (axis_of_dim_.at(position) < 0) return std::nullopt;
    return static_cast<std::size_t>(axis_of_dim_[position]);
  }
  std::optional<std::size_t> mesh_axis_of(std::string_view dim) const {
    return mesh_axis_of(shape_.position(dim));
  }
  bool is_split(std::string_view dim) const { return mesh_axis_of(dim).has_value(); }

  /// Position of the dim split over mesh axis `axis`, or nullopt if the tensor is replicated there.
  std::optional<std::size_t> dim_on_axis(std::size_t axis) const {
    for (std::size_t d = 0; d < axis_of_dim_.size(); ++d)
      if (axis_of_dim_[d] == static_cast<int>(axis)) return d;
    return std::nullopt;
  }

  /// The block processor `coord` holds.
  Block block(const MeshCoord& coord) const {
    Block out;
    for (std::size_t d = 0; d < shape_.rank(); ++d) {
      const auto n = shape_[d].size;
      const int axis = axis_of_dim_[d];
      out.ranges.push_back(axis < 0 ? Range{0, n}
                                    : block_range(n, mesh_[axis].size, coord.at(axis)));
    }
    return out;
  }
  Block block(int processor) const { return block(mesh_.coord_of(processor)); }

  /// `[batch=2, x=256@rows, y=256@cols, z=256]`
  std::string to_string() const {
    std::string out = "[";
    for (std::size_t d = 0; d < shape_.rank(); ++d) {
      if (d) out += ", ";
      out += shape_[d].name + "=" + std::to_string(shape_[d].size);
      if (axis_of_dim_[d] >= 0) out += "@" + mesh_[axis_of_dim_[d]].name;
    }
    return out + "]";
  }

  friend bool operator==(const TensorLayout& a, const TensorLayout& b) {
    return a.shape_ == b.shape_ && a.mesh_ == b.mesh_ && a.axis_of_dim_ == b.axis_of_dim_;
  }
  friend bool operator!=(const TensorLayout& a, const TensorLayout& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const TensorLayout& t) {
    return out << t.to_string();
  }

 private:
  Shape shape_;
  MeshShape mesh_;
  std::vector<int> axis_of_dim_;  // mesh axis position per dim, -1 where replicated
};

}  // namespace meshtensor
