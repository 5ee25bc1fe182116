#pragma once
// The CUDA built-ins meshtensor's kernels use, for running their sources as host C++ (the sources
// are extracted from the headers at build time): a block is one thread, so a kernel's loops over
// its block's threads run once and its grid-stride loops step by the grid. Whoever runs a kernel
// walks the grid by setting blockIdx and gridDim (per host thread).
#include <cstring>

#include <meshtensor/core/bfloat16.hpp>

#undef __global__
#undef __device__
#undef __shared__
#define __global__
#define __device__
#define __shared__

namespace host_cuda {
struct Index {
  unsigned x = 0, y = 0;
};
inline thread_local Index blockIdx{0, 0}, gridDim{1, 1};
inline const Index threadIdx{0, 0}, blockDim{1, 1};
inline void __syncthreads() {}
inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// The sources' bfloat16 is the GPU's copy of the host's type (kernels/cuda/launch.hpp): here it is
// the host's itself.
using bfloat16 = meshtensor::bfloat16;
}  // namespace host_cuda
