#pragma once
// The CUDA runtime as the GPU backend sees it, without any processor's state: error checks that
// name the call, the versions of the driver and the runtime, the GPUs this process can see, and
// their memory as a source of a processor's blocks. Needs the CUDA runtime (meshtensor::cuda).

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshtensor/core/environment.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/memory/pool.hpp"

namespace meshtensor::cuda {

/// Throws DeviceError naming `call` and CUDA's reason unless `code` is cudaSuccess.
inline void check(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  throw DeviceError(std::string(call) + " failed: " + cudaGetErrorName(code) + " (" +
                    cudaGetErrorString(code) + ")");
}

/// A CUDA version number (12080) as "12.8"; "none" for 0 (no driver).
inline std::string version_string(int version) {
  if (version <= 0) return "none";
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

/// The CUDA version the installed driver supports (0 when no driver is loaded), and that of the
/// runtime this program was built with.
struct Versions {
  int driver = 0;
  int runtime = 0;
};

inline Versions versions() {
  Versions v;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = CUDART_VERSION;
  return v;
}

/// The GPUs this process can see; throws NoGpuError when there is no driver or none is visible
/// (CUDA_VISIBLE_DEVICES), DeviceError when the driver is older than the runtime.
inline int visible_gpus() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  const Versions v = versions();
  const std::optional<std::string> visible = cuda_visible_devices();
  const std::string visible_note =
      visible ? " (CUDA_VISIBLE_DEVICES=\"" + *visible + "\")" : std::string();
  if (code == cudaErrorInsufficientDriver || code == cudaErrorCompatNotSupportedOnDevice) {
    (void)cudaGetLastError();  // the error is sticky for this call only; clear it
    if (v.driver == 0)
      throw NoGpuError(
          "no NVIDIA driver is loaded on this host (libcuda.so was not found or did not start), "
          "so it has no usable GPU; run on a host with an NVIDIA GPU and its driver, or use the "
          "threads or mpi transport");
    throw DeviceError("the NVIDIA driver on this host supports CUDA " + version_string(v.driver) +
                      " but this program was built with the CUDA " + version_string(v.runtime) +
                      " runtime; install a newer driver or build with an older CUDA toolkit");
  }
  if (code == cudaErrorNoDevice || (code == cudaSuccess && count == 0)) {
    (void)cudaGetLastError();
    throw NoGpuError("no GPU is visible to this process" + visible_note +
                     "; run on a host with an NVIDIA GPU, or use the threads or mpi transport");
  }
  check(code, "cudaGetDeviceCount");
  return count;
}

/// What identifies a GPU across the processes of a host, and names it in messages.
struct GpuIdentity {
  int ordinal = -1;         // in this process's numbering (after CUDA_VISIBLE_DEVICES)
  std::string uuid;         // 32 hex digits, the same in every process
  std::string description;  // "GPU 0 (NVIDIA H100 80GB HBM3, PCI 0000:1b:00.0)"
};

inline GpuIdentity identify_gpu(int ordinal) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, ordinal), "cudaGetDeviceProperties");
  GpuIdentity id;
  id.ordinal = ordinal;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    const auto byte = static_cast<unsigned char>(properties.uuid.bytes[i]);
    id.uuid += hex[byte >> 4];
    id.uuid += hex[byte & 15];
  }
  char pci[32];
  std::snprintf(pci, sizeof pci, "%04x:%02x:%02x.0", properties.pciDomainID, properties.pciBusID,
                properties.pciDeviceID);
  id.description = "GPU " + std::to_string(ordinal) + " (" + properties.name + ", PCI " + pci + ")";
  return id;
}

namespace detail {
inline void* map_device(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // out of memory: the pool gives back its cache, then says so
    return nullptr;
  }
  return p;
}
// cudaFree waits for the GPU's work first: nothing queued still uses the block. The pool keeps
// freed blocks for the next use, so a step in its steady state frees none.
inline void unmap_device(void* base, std::size_t) { (void)cudaFree(base); }
}  // namespace detail

/// Memory of the calling thread's current GPU (cudaMalloc): a GPU processor's blocks, which NCCL,
/// cuDNN and CUDA kernels use in place, and the host reaches only by copies
/// (kernels/transfer.hpp). Never managed memory: asking for more of it than the card holds can
/// hang the GPU, where cudaMalloc fails and the pool says so.
inline MemorySource device_memory() {
  MemorySource source;
  source.map = &detail::map_device;
  source.unmap = &detail::unmap_device;
  source.in_parts = false;  // cudaFree takes whole allocations only
  source.name = "GPU memory";
  source.space = MemorySpace::device;
  return source;
}

}  // namespace meshtensor::cuda
