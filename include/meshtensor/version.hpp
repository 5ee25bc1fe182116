#pragma once
// The library version, in one place: CMake's project() version, the pkg-config file and
// `unet3d --version` read these numbers; a test checks CITATION.cff and CHANGELOG.md against them.

#define MESHTENSOR_VERSION_MAJOR 0
#define MESHTENSOR_VERSION_MINOR 1
#define MESHTENSOR_VERSION_PATCH 0

#define MESHTENSOR_VERSION_TEXT_(x) #x
#define MESHTENSOR_VERSION_TEXT(x) MESHTENSOR_VERSION_TEXT_(x)

namespace meshtensor {
/// "MAJOR.MINOR.PATCH"
constexpr const char* version =
    MESHTENSOR_VERSION_TEXT(MESHTENSOR_VERSION_MAJOR) "." MESHTENSOR_VERSION_TEXT(
        MESHTENSOR_VERSION_MINOR) "." MESHTENSOR_VERSION_TEXT(MESHTENSOR_VERSION_PATCH);
}  // namespace meshtensor
