#pragma once
// CUDA kernels compiled at run time. meshtensor is a header-only library built by the host
// compiler, so its own CUDA kernels are sources in headers (kernels/cuda/), compiled by NVRTC the
// first time a process needs them, for the GPU it runs on, then loaded with the CUDA runtime's
// library calls (no link to the driver library, so programs still start on machines without one)
// and launched with cudaLaunchKernel. NVRTC itself is loaded then too, not linked
// (device/loaded_library.hpp): mapped, it costs a process memory. Compiling needs no GPU:
// tests compile every source on machines without one.

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/loaded_library.hpp"

namespace meshtensor::cuda {

/// A CUDA C++ translation unit: `name` (for messages and NVRTC's logs) and its text.
struct KernelSource {
  const char* name;
  const char* text;
};

/// The NVRTC functions meshtensor calls.
struct Nvrtc {
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) program_log = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
};

/// NVRTC of the CUDA version meshtensor was built with, loaded on first use; throws DeviceError
/// naming it if it cannot be.
inline const Nvrtc& nvrtc() {
  static const Nvrtc loaded = [] {
    const std::string version = std::to_string(CUDART_VERSION / 1000);
    const LoadedLibrary library("libnvrtc.so." + version, "NVRTC " + version);
    Nvrtc n;
    library.look_up("nvrtcGetErrorString", &n.error_string);
    library.look_up("nvrtcCreateProgram", &n.create_program);
    library.look_up("nvrtcDestroyProgram", &n.destroy_program);
    library.look_up("nvrtcCompileProgram", &n.compile_program);
    library.look_up("nvrtcGetProgramLogSize", &n.program_log_size);
    library.look_up("nvrtcGetProgramLog", &n.program_log);
    library.look_up("nvrtcGetPTXSize", &n.ptx_size);
    library.look_up("nvrtcGetPTX", &n.ptx);
    return n;
  }();
  return loaded;
}

/// The PTX of `source` for a virtual architecture ("compute_90"); throws DeviceError with
/// NVRTC's log when it does not compile.
inline std::string compile_to_ptx(const KernelSource& source, const std::string& architecture) {
  const Nvrtc& n = nvrtc();
  auto check_nvrtc = [&](nvrtcResult result, const char* call) {
    if (result != NVRTC_SUCCESS)
      throw DeviceError(std::string(call) + " failed for kernel source " + source.name + ": " +
                        n.error_string(result));
  };
  nvrtcProgram program = nullptr;
  check_nvrtc(n.create_program(&program, source.text, source.name, 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(
      &program, [](nvrtcProgram* p) { (void)nvrtc().destroy_program(p); });
  const std::string arch = "--gpu-architecture=" + architecture;
  // Plain IEEE arithmetic, as the CPU kernels: no fused approximations, no flush to zero.
  const char* options[] = {arch.c_str(),  "--std=c++17",     "--fmad=false",
                           "--ftz=false", "--prec-div=true", "--prec-sqrt=true"};
  const nvrtcResult compiled =
      n.compile_program(program, static_cast<int>(std::size(options)), options);
  if (compiled != NVRTC_SUCCESS) {
    std::size_t size = 0;
    n.program_log_size(program, &size);
    std::string log(size, '\0');
    if (size) n.program_log(program, log.data());
    throw DeviceError(std::string("kernel source ") + source.name + " does not compile for " +
                      architecture + ": " + n.error_string(compiled) + "\n" + log);
  }
  std::size_t size = 0;
  check_nvrtc(n.ptx_size(program, &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check_nvrtc(n.ptx(program, ptx.data()), "nvrtcGetPTX");
  return ptx;
}

/// The virtual architecture of GPU `device` ("compute_90" for an H100).
inline std::string architecture_of(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
        "cudaDeviceGetAttribute");
  return "compute_" + std::to_string(major) + std::to_string(minor);
}

namespace detail {
// Loaded sources, per GPU and source: compiled once per process.
class LoadedSources {
 public:
  cudaKernel_t kernel(const KernelSource& source, const char* name) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    std::lock_guard<std::mutex> lock(mutex_);
    auto& library = libraries_[{device, source.text}];
    if (!library) {
      const std::string ptx = compile_to_ptx(source, architecture_of(device));
      check(cudaLibraryLoadData(&library, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            "cudaLibraryLoadData");
    }
    cudaKernel_t kernel = nullptr;
    check(cudaLibraryGetKernel(&kernel, library, name), "cudaLibraryGetKernel");
    return kernel;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, const char*>, cudaLibrary_t> libraries_;  // unloaded at exit by CUDA
};

inline LoadedSources& loaded_sources() {
  static auto* sources = new LoadedSources();  // never destroyed: kernels may run at exit
  return *sources;
}
}  // namespace detail

/// Kernel `name` (declared extern "C" in `source`) on the current GPU.
inline cudaKernel_t kernel(const KernelSource& source, const char* name) {
  return detail::loaded_sources().kernel(source, name);
}

/// Launches `kernel` on `stream` as a grid of `blocks` of `threads` with `args` (each passed by
/// value, as the kernel declares it).
template <class... Args>
void launch_grid(cudaKernel_t kernel, dim3 blocks, dim3 threads, cudaStream_t stream,
                 Args... args) {
  void* parameters[] = {static_cast<void*>(&args)...};
  ++device_activity().kernels;
  check(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), blocks, threads, parameters, 0,
                         stream),
        "cudaLaunchKernel");
}

/// Launches `kernel` on `stream` over `n` threads (blocks of 256; kernels loop over the indices
/// with the grid's stride, so a grid capped at 2^30 blocks covers any n).
template <class... Args>
void launch(cudaKernel_t kernel, long long n, cudaStream_t stream, Args... args) {
  if (n <= 0) return;
  constexpr unsigned threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  launch_grid(kernel, dim3(static_cast<unsigned>(std::min<long long>(blocks, 1 << 30))),
              dim3(threads), stream, args...);
}

}  // namespace meshtensor::cuda
