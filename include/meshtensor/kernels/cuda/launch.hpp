#pragma once
// How meshtensor's own kernels run on a processor's GPU: queued on the processor's compute stream,
// their operands in its GPU memory. The call returns without waiting for it: the host waits
// (device/host_access.hpp) only before it touches memory itself.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/memory.hpp"
#include "meshtensor/device/runtime_compiler.hpp"

namespace meshtensor::kernels::gpu {

/// Whether meshtensor's element kernels exist for T (float, double and bfloat16).
template <class T>
constexpr bool has_kernels_for =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16>;

/// The name of T's instance of a kernel: `f32`, `f64` or `bf16`.
template <class T>
const char* instance(const char* f32, const char* f64, const char* bf16) {
  if constexpr (std::is_same_v<T, bfloat16>) return bf16;
  return std::is_same_v<T, float> ? f32 : f64;
}

/// bfloat16 in the GPU sources: core/bfloat16.hpp's type said again for NVRTC (16 bits stored,
/// arithmetic in float, rounded to nearest even with denormals as zero), so that a kernel
/// instantiated on it computes what the CPU loop instantiated on meshtensor::bfloat16 does.
inline const char* bfloat16_text() {
  return R"(
struct bfloat16 {
  unsigned short bits;
  bfloat16() = default;
  __device__ bfloat16(float value) : bits(round(value)) {}
  __device__ operator float() const { return __uint_as_float((unsigned)bits << 16); }
  __device__ static unsigned short round(float value) {
    unsigned u = __float_as_uint(value);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  __device__ friend bfloat16 operator-(bfloat16 a) {
    bfloat16 out;
    out.bits = (unsigned short)(a.bits ^ 0x8000u);
    return out;
  }
  __device__ bfloat16& operator+=(float x) { return *this = float(*this) + x; }
  __device__ bfloat16& operator-=(float x) { return *this = float(*this) - x; }
  __device__ bfloat16& operator*=(float x) { return *this = float(*this) * x; }
  __device__ bfloat16& operator/=(float x) { return *this = float(*this) / x; }
};
)";
}

/// The text of a GPU source made of code shared with the CPU loops (kernels/shared_source.hpp)
/// and the kernels that call it, after bfloat16; kept for the life of the process.
inline const char* with_shared_code(const char* shared_code, const char* kernels) {
  auto* text = new std::string("#define MESHTENSOR_DEVICE __device__\n");  // never freed
  *text += bfloat16_text();
  *text += shared_code;
  *text += "\n";
  *text += kernels;
  return text->c_str();
}

/// `values`, each converted to T, in device memory for the calls queued next on `stream`. (A copy
/// from pageable host memory has read it by the time cudaMemcpyAsync returns, CUDA documents, so
/// `converted` may go at once.)
template <class T, class V>
cuda::StreamBuffer upload(const std::vector<V>& values, cudaStream_t stream) {
  const std::vector<T> converted(values.begin(), values.end());
  cuda::StreamBuffer scratch(converted.size() * sizeof(T));
  cuda::copy_from_host(scratch.as<T>(), converted.data(), converted.size() * sizeof(T), stream);
  return scratch;
}

/// Queues `kernel` of `source` over n threads with `args`.
template <class... Args>
void run_kernel(const cuda::KernelSource& source, const char* kernel, std::int64_t n,
                Args... args) {
  cuda::launch(cuda::kernel(source, kernel), n, cuda::compute_stream(), args...);
}

}  // namespace meshtensor::kernels::gpu
