#pragma once
// meshtensor's CUDA kernels as the emulated runtime runs them: compiled for the host from the
// same sources NVRTC compiles (extracted from the headers at build time), found by name.
#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace emulated_gpu {

/// The work of one launch: the kernel over its grid, with the arguments it was launched with.
using Launch = std::function<void()>;

struct Kernel {
  const char* name;
  /// Copies a launch's arguments (as cudaLaunchKernel does: the caller's may go right after) and
  /// returns the launch; empty, with `error` saying why, when an argument is a pointer into host
  /// memory, which a kernel on a GPU cannot read.
  std::function<Launch(void** arguments, dim3 grid, std::string* error)> bind;
};

/// The kernel named `name`, or null when no source defines one.
const Kernel* find_kernel(const std::string& name);

}  // namespace emulated_gpu
