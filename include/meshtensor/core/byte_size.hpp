#pragma once
// Sizes of memory written as people write them: "2GiB", "512MiB", "1.5GB", "64G" (Slurm's --mem
// reads G as GiB, and so does this), "1000000" bytes; and printed for people: "4.3 MiB".

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// The bytes `text` says; anything else — no number, an unknown unit, zero, a negative, NaN — is
/// an Error naming `what` (a flag, a setting) and what would be valid.
inline double parse_bytes(const std::string& text, const std::string& what = "a memory size") {
  auto refuse = [&](const std::string& why) -> double {
    throw Error(what + " \"" + text + "\": " + why +
                "; write a number and a unit, e.g. 2GiB, 512MiB, 1.5GB, 64G (binary), or bytes");
  };
  std::size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    return refuse("not a size");
  }
  if (!std::isfinite(number) || number <= 0) return refuse("the size must be a positive number");
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  const struct {
    const char* name;
    double bytes;
  } units[] = {{"", 1},
               {"B", 1},
               {"K", 1024.0},
               {"KiB", 1024.0},
               {"KB", 1e3},
               {"M", 1048576.0},
               {"MiB", 1048576.0},
               {"MB", 1e6},
               {"G", 1073741824.0},
               {"GiB", 1073741824.0},
               {"GB", 1e9},
               {"T", 1099511627776.0},
               {"TiB", 1099511627776.0},
               {"TB", 1e12}};
  for (const auto& u : units) {
    if (unit != u.name) continue;
    // "1e300T" overflows to infinity, which would read as no limit at all (tests/fuzz found it).
    if (!std::isfinite(number * u.bytes)) return refuse("the size is too large to count");
    return number * u.bytes;
  }
  return refuse("unknown unit \"" + unit +
                "\" (valid: B, K, KiB, KB, M, MiB, MB, G, GiB, GB, T, "
                "TiB, TB)");
}

/// `bytes` in the largest binary unit it fills, with one decimal: "512 B", "16.0 KiB", "4.3 MiB".
inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) bytes /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.1f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

}  // namespace meshtensor
