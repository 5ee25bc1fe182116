#pragma once
// The library version; CMake's project() version is generated from the same numbers.

#define MESHTENSOR_VERSION_MAJOR 0
#define MESHTENSOR_VERSION_MINOR 1
#define MESHTENSOR_VERSION_PATCH 0

namespace meshtensor {
constexpr const char* version = "0.1.0";
}  // namespace meshtensor
