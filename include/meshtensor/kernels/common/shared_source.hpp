#pragma once
// Code that runs on both sides: compiled here by the host compiler for the CPU loops, and kept as
// text for the GPU kernels compiled at run time (device/runtime_compiler.hpp). One text for both
// means a formula cannot drift between the CPU and the GPU: the element-wise ops and the optimiser
// updates say what they compute once.
//
//   MESHTENSOR_SHARED_SOURCE(name, code...) defines `code` and `inline const char* name()`, its
//   text. Inside `code`, MESHTENSOR_DEVICE marks a function the GPU calls (empty here; a GPU
//   source defines it as __device__ before the text). The text is one line without comments, so
//   the code keeps to what both compilers take: no preprocessor lines, no string literals, and
//   math functions unqualified (std's float overloads are brought in below; NVRTC has its own).

#include <cmath>

#define MESHTENSOR_DEVICE

#define MESHTENSOR_SHARED_SOURCE(name, ...) \
  __VA_ARGS__                               \
  inline const char* name() { return #__VA_ARGS__; }

namespace meshtensor::kernels::shared {
// Unqualified math calls in shared code take these: float stays float, as on the GPU.
using std::erfc;
using std::exp;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;
}  // namespace meshtensor::kernels::shared
