#pragma once
// A list of dim names, as ops take them: `reduce_sum(t, {"x", "y"})` or `einsum({a, b}, "batch,
// k")`.

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "meshtensor/core/detail/parse.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/shape.hpp"

namespace meshtensor {

/// Dim names, given as a list or as one string separated by ',' or ';'.
class DimNames {
 public:
  DimNames() = default;
  DimNames(std::initializer_list<std::string> names) : names_(names) { check(); }
  DimNames(std::vector<std::string> names) : names_(std::move(names)) { check(); }
  DimNames(const char* text) : DimNames(parse(text)) {}
  DimNames(const std::string& text) : DimNames(parse(text)) {}
  /// The names of a shape's dims.
  DimNames(const Shape& shape) : names_(shape.names()) {}

  const std::vector<std::string>& names() const& { return names_; }
  std::vector<std::string> names() && { return std::move(names_); }
  std::size_t size() const { return names_.size(); }
  bool empty() const { return names_.empty(); }
  auto begin() const { return names_.begin(); }
  auto end() const { return names_.end(); }
  bool contains(std::string_view name) const {
    for (const auto& n : names_)
      if (n == name) return true;
    return false;
  }

 private:
  static std::vector<std::string> parse(std::string_view text) {
    std::vector<std::string> names;
    for (auto piece : detail::split_list(text)) names.emplace_back(piece);
    return names;
  }
  void check() const {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (!detail::is_valid_name(names_[i]))
        throw ShapeError("dim name " + detail::quote(names_[i]) +
                         " is not a name: use a letter or '_', then letters, digits or '_'");
      for (std::size_t j = 0; j < i; ++j)
        if (names_[i] == names_[j])
          throw ShapeError("dim " + detail::quote(names_[i]) + " is listed twice in " +
                           detail::quote_list(names_));
    }
  }

  std::vector<std::string> names_;
};

}  // namespace meshtensor
