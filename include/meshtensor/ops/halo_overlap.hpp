#pragma once
// Whether convolutions overlap their halo exchange with the rows that need no halo (the default),
// or exchange first and compute after: MESHTENSOR_HALO_OVERLAP=on|off. The results are the same
// either way; off is there to measure what the overlap hides (bench/run.sh's scaling table).

#include <cstdlib>
#include <string>

#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// The overlap setting `value` (MESHTENSOR_HALO_OVERLAP's text, or null where unset) stands for.
inline bool halo_overlap_setting(const char* value) {
  const std::string text = value ? value : "on";
  if (text != "on" && text != "off")
    throw Error("MESHTENSOR_HALO_OVERLAP=" + text + ": expected on (the default) or off");
  return text == "on";
}

/// Whether this process's convolutions overlap their halo exchanges: read once.
inline bool halo_overlap() {
  static const bool on = halo_overlap_setting(std::getenv("MESHTENSOR_HALO_OVERLAP"));
  return on;
}

}  // namespace meshtensor
