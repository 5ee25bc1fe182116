#pragma once
// The named axes of a processor mesh, e.g. `rows:4; cols:2`. Processors are numbered row-major over
// the axes (the last axis varies fastest), as in Mesh-TensorFlow.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/detail/parse.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// One axis of a mesh: a name and how many processors lie along it.
struct MeshAxis {
  std::string name;
  int size = 1;

  friend bool operator==(const MeshAxis& a, const MeshAxis& b) {
    return a.name == b.name && a.size == b.size;
  }
  friend bool operator!=(const MeshAxis& a, const MeshAxis& b) { return !(a == b); }
};

/// Coordinates of one processor, one entry per mesh axis.
using MeshCoord = std::vector<int>;

/**
 * Named mesh axes. The empty mesh shape is a single processor.
 *
 * ```cpp
 * MeshShape mesh("rows:2; cols:4");   // 8 processors; processor 5 is at rows=1, cols=1
 * ```
 */
class MeshShape {
 public:
  MeshShape() = default;
  MeshShape(std::initializer_list<MeshAxis> axes) : axes_(axes) { check(); }
  explicit MeshShape(std::vector<MeshAxis> axes) : axes_(std::move(axes)) { check(); }
  MeshShape(const char* text) : MeshShape(parse(text)) {}
  MeshShape(const std::string& text) : MeshShape(parse(text)) {}

  std::size_t rank() const { return axes_.size(); }
  const std::vector<MeshAxis>& axes() const& { return axes_; }
  std::vector<MeshAxis> axes() && { return std::move(axes_); }
  const MeshAxis& operator[](std::size_t position) const { return axes_.at(position); }
  auto begin() const { return axes_.begin(); }
  auto end() const { return axes_.end(); }

  /// The product of the axes' sizes (checked at construction to fit an int).
  int num_processors() const {
    int n = 1;
    for (const auto& axis : axes_) n *= axis.size;
    return n;
  }

  std::optional<std::size_t> find(std::string_view name) const {
    for (std::size_t i = 0; i < axes_.size(); ++i)
      if (axes_[i].name == name) return i;
    return std::nullopt;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& axis : axes_) out.push_back(axis.name);
    return out;
  }

  /// @pre 0 <= processor < num_processors()
  /// @post processor_of(coord_of(p)) == p
  MeshCoord coord_of(int processor) const {
    check_processor(processor);
    MeshCoord coord(axes_.size());
    for (std::size_t i = axes_.size(); i-- > 0;) {
      coord[i] = processor % axes_[i].size;
      processor /= axes_[i].size;
    }
    return coord;
  }

  int processor_of(const MeshCoord& coord) const {
    if (coord.size() != axes_.size())
      throw MeshError("mesh " + to_string() + " has " + std::to_string(axes_.size()) +
                      " axes but a coordinate with " + std::to_string(coord.size()) +
                      " entries was given");
    int processor = 0;
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      if (coord[i] < 0 || coord[i] >= axes_[i].size)
        throw MeshError("coordinate " + std::to_string(coord[i]) + " is outside mesh axis " +
                        detail::quote(axes_[i].name) + " of size " + std::to_string(axes_[i].size));
      processor = processor * axes_[i].size + coord[i];
    }
    return processor;
  }

  std::string to_string() const {
    std::string out = "[";
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      if (i) out += ", ";
      out += axes_[i].name + "=" + std::to_string(axes_[i].size);
    }
    return out + "]";
  }

  friend bool operator==(const MeshShape& a, const MeshShape& b) { return a.axes_ == b.axes_; }
  friend bool operator!=(const MeshShape& a, const MeshShape& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const MeshShape& mesh) {
    return out << mesh.to_string();
  }

 private:
  static std::vector<MeshAxis> parse(std::string_view text) {
    std::vector<MeshAxis> axes;
    for (auto& [name, value] : detail::parse_pairs(text, "mesh shape", "rows:4; cols:2")) {
      auto size = detail::parse_size(value, text, "mesh shape", name);
      if (size <= 0 || size > (1 << 24))
        throw ParseError("cannot parse mesh shape " + detail::quote(text) + ": axis " +
                         detail::quote(name) + " has size " + value +
                         "; a mesh axis needs between 1 and 16777216 processors");
      axes.push_back({name, static_cast<int>(size)});
    }
    return axes;
  }

  void check() const {
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      if (!detail::is_valid_name(axes_[i].name))
        throw MeshError("mesh axis name " + detail::quote(axes_[i].name) +
                        " is not a name: use a letter or '_', then letters, digits or '_'");
      if (axes_[i].size <= 0)
        throw MeshError("mesh axis " + detail::quote(axes_[i].name) + " has size " +
                        std::to_string(axes_[i].size) + "; a mesh axis needs at least 1 processor");
      for (std::size_t j = 0; j < i; ++j)
        if (axes_[i].name == axes_[j].name)
          throw MeshError("mesh axis " + detail::quote(axes_[i].name) +
                          " appears twice in a mesh shape; every mesh axis needs its own name");
    }
    int processors = 1;
    for (const auto& axis : axes_) {
      const auto product = detail::checked_product(processors, axis.size);
      if (!product)
        throw MeshError("mesh " + to_string() + " has more processors than " +
                        std::to_string(std::numeric_limits<int>::max()) +
                        " (the product of its axes' sizes overflows); use smaller axes");
      processors = *product;
    }
  }

  void check_processor(int processor) const {
    if (processor < 0 || processor >= num_processors())
      throw MeshError("processor " + std::to_string(processor) + " is outside mesh " + to_string() +
                      " of " + std::to_string(num_processors()) + " processors");
  }

  std::vector<MeshAxis> axes_;
};

}  // namespace meshtensor
