#pragma once
// Small string helpers shared by the error messages of core/.

#include <string>
#include <string_view>
#include <vector>

namespace meshtensor::detail {

inline std::string quote(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Joins quoted names: `"x", "y", "z"`; `(none)` for an empty list.
inline std::string quote_list(const std::vector<std::string>& names) {
  if (names.empty()) return "(none)";
  std::string out;
  for (const auto& name : names) {
    if (!out.empty()) out += ", ";
    out += quote(name);
  }
  return out;
}

}  // namespace meshtensor::detail
