#pragma once
// The CUDA runtime as the GPU backend sees it: error checks that name the call, the versions of
// the driver and the runtime, and the GPUs this process can see. Needs the CUDA runtime
// (meshtensor::cuda); nothing here communicates.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/core/error.hpp"

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
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : std::string();
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

/// Where `data` lives as CUDA sees it: device, managed or (pinned) host memory; unregistered for
/// ordinary host memory and null.
inline cudaMemoryType memory_type(const void* data) {
  if (!data) return cudaMemoryTypeUnregistered;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown host pointer: not an error worth keeping
    return cudaMemoryTypeUnregistered;
  }
  return attributes.type;
}

/// Whether a GPU can use `data` in place: device or managed memory (host memory, pageable or
/// pinned, needs a copy).
inline bool device_accessible(const void* data) {
  const cudaMemoryType type = memory_type(data);
  return type == cudaMemoryTypeDevice || type == cudaMemoryTypeManaged;
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

/// The GPU the calling thread's processor computes on, or -1 when it computes on the CPU. Kernels
/// with a GPU version run it when this is set (and their operands are in device memory).
inline int& gpu_of_this_thread() {
  thread_local int gpu = -1;
  return gpu;
}

/// The calling thread's stream on its current GPU, on which its kernels (cuDNN's and meshtensor's
/// own) run in order; made on first use, kept for the thread's life.
inline cudaStream_t compute_stream() {
  struct Streams {
    std::vector<cudaStream_t> per_gpu;
    ~Streams() {
      for (auto s : per_gpu)
        if (s) (void)cudaStreamDestroy(s);
    }
  };
  thread_local Streams streams;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (streams.per_gpu.size() <= static_cast<std::size_t>(device))
    streams.per_gpu.resize(device + 1, nullptr);
  cudaStream_t& stream = streams.per_gpu[device];
  if (!stream) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  return stream;
}

/// Waits until the GPU has run everything queued on the calling thread's compute stream; nothing
/// to wait for when the thread's processor computes on the CPU. GPU calls return once queued (the
/// host goes on preparing the next while they run); the host waits before it touches memory that
/// queued work may read or write: a CPU loop over a block in GPU memory, a result it reads.
inline void finish_queued_work() {
  if (gpu_of_this_thread() < 0) return;
  check(cudaStreamSynchronize(compute_stream()), "cudaStreamSynchronize");
}

/// Whether a GPU kernel may run here on `operands`: the calling thread computes on a GPU and
/// every operand is in device or managed memory. (The thread is asked first: on the CPU that is
/// all a kernel call costs.)
inline bool runs_here(std::initializer_list<const void*> operands) {
  if (gpu_of_this_thread() < 0) return false;
  for (const void* p : operands)
    if (!device_accessible(p)) return false;
  return true;
}

/// The calling thread's T for its current GPU (a library handle on the thread's compute stream),
/// made on first use and kept for the thread's life.
template <class T>
T& per_thread_on_current_gpu() {
  thread_local std::map<int, std::unique_ptr<T>> per_gpu;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  auto& slot = per_gpu[device];
  if (!slot) slot = std::make_unique<T>();
  return *slot;
}

/// For its lifetime the calling thread's processor computes on `gpu`, which becomes current.
class ComputeOnGpu {
 public:
  explicit ComputeOnGpu(int gpu) : previous_(gpu_of_this_thread()) {
    check(cudaSetDevice(gpu), "cudaSetDevice");
    gpu_of_this_thread() = gpu;
  }
  ~ComputeOnGpu() { gpu_of_this_thread() = previous_; }
  ComputeOnGpu(const ComputeOnGpu&) = delete;
  ComputeOnGpu& operator=(const ComputeOnGpu&) = delete;

 private:
  int previous_;
};

}  // namespace meshtensor::cuda
