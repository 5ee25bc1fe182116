#pragma once
// Whether convolutions overlap their halo exchange with the rows that need no halo (the default),
// or exchange first and compute after (Settings::halo_overlap, MESHTENSOR_HALO_OVERLAP=off). The
// results are the same either way; off is there to measure what the overlap hides.

#include "meshtensor/device/processor.hpp"

namespace meshtensor {

/// Whether the calling processor's convolutions overlap their halo exchanges.
inline bool halo_overlap() { return current_processor().settings().halo_overlap; }

}  // namespace meshtensor
