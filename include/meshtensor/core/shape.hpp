#pragma once
// An ordered list of dims with unique names: the global shape of a tensor, or the local shape of
// one processor's block of it.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/detail/parse.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/dim.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/**
 * Ordered dims with unique names, parsed from Mesh-TensorFlow syntax or built from dims.
 *
 * ```cpp
 * Shape a("batch:2, x:256, y:256");
 * Shape b{Dim{"batch", 2}, Dim{"x", 256}, Dim{"y", 256}};   // a == b, prints [batch=2, x=256,
 * y=256]
 * ```
 */
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<Dim> dims) : dims_(dims) { check_unique(); }
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)) { check_unique(); }
  /// Parses `"name:size, name:size"` (',' or ';' between entries).
  Shape(const char* text) : Shape(parse(text)) {}
  Shape(const std::string& text) : Shape(parse(text)) {}

  std::size_t rank() const { return dims_.size(); }
  bool empty() const { return dims_.empty(); }
  const std::vector<Dim>& dims() const& { return dims_; }
  std::vector<Dim> dims() && { return std::move(dims_); }
  const Dim& operator[](std::size_t position) const { return dims_.at(position); }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }

  /// Product of the sizes: 1 for a scalar (no dims); checked at construction to fit 64 bits.
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (const auto& dim : dims_) n *= dim.size;
    return n;
  }

  std::optional<std::size_t> find(std::string_view name) const {
    for (std::size_t i = 0; i < dims_.size(); ++i)
      if (dims_[i].name == name) return i;
    return std::nullopt;
  }
  bool contains(std::string_view name) const { return find(name).has_value(); }

  /// Position of a dim that must exist; throws naming the dim and the dims there are.
  std::size_t position(std::string_view name) const {
    if (auto i = find(name)) return *i;
    throw ShapeError("shape " + to_string() + " has no dim " + detail::quote(name) +
                     "; its dims are " + detail::quote_list(names()));
  }
  const Dim& dim(std::string_view name) const { return dims_[position(name)]; }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& dim : dims_) out.push_back(dim.name);
    return out;
  }
  std::vector<std::int64_t> sizes() const {
    std::vector<std::int64_t> out;
    for (const auto& dim : dims_) out.push_back(dim.size);
    return out;
  }

  std::string to_string() const {
    std::string out = "[";
    for (std::size_t i = 0; i < dims_.size(); ++i) {
      if (i) out += ", ";
      out += dims_[i].name + "=" + std::to_string(dims_[i].size);
    }
    return out + "]";
  }

  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const Shape& shape) {
    return out << shape.to_string();
  }

 private:
  static std::vector<Dim> parse(std::string_view text) {
    std::vector<Dim> dims;
    for (auto& [name, value] : detail::parse_pairs(text, "shape", "batch:2, x:256")) {
      auto size = detail::parse_size(value, text, "shape", name);
      if (size <= 0)
        throw ParseError("cannot parse shape " + detail::quote(text) + ": dim " +
                         detail::quote(name) + " has size " + value +
                         "; a dim's size must be positive");
      dims.emplace_back(name, size);
    }
    return dims;
  }

  void check_unique() const {
    for (std::size_t i = 0; i < dims_.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (dims_[i].name == dims_[j].name)
          throw ShapeError("dim " + detail::quote(dims_[i].name) +
                           " appears twice in a shape; every dim of a tensor needs its own name");
    std::int64_t elements = 1;
    for (const auto& dim : dims_) {
      const auto product = detail::checked_product(elements, dim.size);
      if (!product)
        throw ShapeError("shape " + to_string() +
                         " has more elements than a 64-bit count holds (the product of its "
                         "dims' sizes overflows at dim " +
                         detail::quote(dim.name) + ")");
      elements = *product;
    }
  }

  std::vector<Dim> dims_;
};

}  // namespace meshtensor
