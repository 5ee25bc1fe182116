#pragma once
// Layout rules: which tensor dim is split over which mesh axis. A layout is global to a program and
// may name dims a given tensor lacks; a dim it does not mention is replicated.

#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "meshtensor/core/detail/parse.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// One rule: tensor dim `dim` is split over mesh axis `mesh_axis`.
struct LayoutRule {
  std::string dim;
  std::string mesh_axis;

  friend bool operator==(const LayoutRule& a, const LayoutRule& b) {
    return a.dim == b.dim && a.mesh_axis == b.mesh_axis;
  }
  friend bool operator!=(const LayoutRule& a, const LayoutRule& b) { return !(a == b); }
};

/**
 * Rules from tensor dims to mesh axes, in Mesh-TensorFlow syntax. The empty layout replicates
 * everything. A dim maps to at most one mesh axis; several dims may name the same mesh axis as
 * long as no single tensor has two of them (checked when the layout meets a tensor).
 *
 * ```cpp
 * Layout layout("x:rows; y:cols");
 * layout.mesh_axis_of("x");   // "rows"
 * layout.mesh_axis_of("z");   // nullopt: z is replicated
 * ```
 */
class Layout {
 public:
  Layout() = default;
  Layout(std::initializer_list<LayoutRule> rules) : rules_(rules) { check(); }
  explicit Layout(std::vector<LayoutRule> rules) : rules_(std::move(rules)) { check(); }
  Layout(const char* text) : Layout(parse(text)) {}
  Layout(const std::string& text) : Layout(parse(text)) {}

  // A temporary gives its rules away, so `for (auto& r : make_layout().rules())` is safe.
  const std::vector<LayoutRule>& rules() const& { return rules_; }
  std::vector<LayoutRule> rules() && { return std::move(rules_); }
  bool empty() const { return rules_.empty(); }

  std::optional<std::string> mesh_axis_of(std::string_view dim) const {
    for (const auto& rule : rules_)
      if (rule.dim == dim) return rule.mesh_axis;
    return std::nullopt;
  }

  /// Mesh-TensorFlow syntax, e.g. `x:rows; y:cols`; parsing it gives this layout back.
  std::string to_string() const {
    std::string out;
    for (const auto& rule : rules_) {
      if (!out.empty()) out += "; ";
      out += rule.dim + ":" + rule.mesh_axis;
    }
    return out;
  }

  friend bool operator==(const Layout& a, const Layout& b) { return a.rules_ == b.rules_; }
  friend bool operator!=(const Layout& a, const Layout& b) { return !(a == b); }
  friend std::ostream& operator<<(std::ostream& out, const Layout& layout) {
    return out << '"' << layout.to_string() << '"';
  }

 private:
  static std::vector<LayoutRule> parse(std::string_view text) {
    std::vector<LayoutRule> rules;
    for (auto& [dim, axis] : detail::parse_pairs(text, "layout", "x:rows; y:cols")) {
      if (!detail::is_valid_name(axis))
        throw ParseError("cannot parse layout " + detail::quote(text) + ": dim " +
                         detail::quote(dim) + " is mapped to " + detail::quote(axis) +
                         ", which is not a mesh axis name");
      rules.push_back({dim, axis});
    }
    check_rules(rules, text);
    return rules;
  }

  void check() const {
    for (const auto& rule : rules_)
      if (!detail::is_valid_name(rule.dim) || !detail::is_valid_name(rule.mesh_axis))
        throw LayoutError("layout rule " + detail::quote(rule.dim + ":" + rule.mesh_axis) +
                          " needs a dim name and a mesh axis name");
    check_rules(rules_, to_string());
  }

  static void check_rules(const std::vector<LayoutRule>& rules, std::string_view text) {
    for (std::size_t i = 0; i < rules.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (rules[i].dim == rules[j].dim)
          throw LayoutError(
              "layout " + detail::quote(text) + " maps dim " + detail::quote(rules[i].dim) +
              " to two mesh axes, " + detail::quote(rules[j].mesh_axis) + " and " +
              detail::quote(rules[i].mesh_axis) + "; a dim is split over at most one mesh axis");
  }

  std::vector<LayoutRule> rules_;
};

}  // namespace meshtensor
