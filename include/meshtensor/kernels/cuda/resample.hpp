#pragma once
// Resampling one dim (kernels/cpu/reference/resample.hpp) on a processor that computes on a GPU: a
// thread per output element adds its taps; the adjoint takes a thread per source element, which
// adds the gradients of the outputs that read it (their list built on the host), so no two
// threads write one element and no atomics are needed. Both add in the CPU loops' order, from
// zero. Each host function returns false, doing nothing, unless the thread computes on a GPU, the
// blocks are in GPU memory, and they are float, double or bfloat16.

#include <cstdint>

#include "meshtensor/kernels/cpu/reference/resample.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The kernels' text.
inline const char* resample_kernels_text() {
  static const char* const text{R"(
// Blocks as [outer][dim][inner], with `outputs` positions along the dim on the output side and
// `sources` on the source side.
struct ResampleShape {
  long long outer, outputs, sources, inner;
};

template <class T>
__device__ void resample(ResampleShape s, const long long* index, const T* weight, const T* box,
                         T* out) {
  const long long n = s.outer * s.outputs * s.inner;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
       e += (long long)blockDim.x * gridDim.x) {
    const long long b = e % s.inner, o = e / s.inner % s.outputs, a = e / s.inner / s.outputs;
    T total = T(0);
    for (int k = 0; k < 2; ++k) {
      const long long i = index[2 * o + k];
      if (i >= 0) total += weight[2 * o + k] * box[(a * s.sources + i) * s.inner + b];
    }
    out[e] = total;
  }
}

template <class T>
__device__ void resample_adjoint(ResampleShape s, const long long* start, const long long* reader,
                                 const T* weight, const T* g, T* grad_box) {
  const long long n = s.outer * s.sources * s.inner;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
       e += (long long)blockDim.x * gridDim.x) {
    const long long b = e % s.inner, i = e / s.inner % s.sources, a = e / s.inner / s.sources;
    T total = T(0);
    for (long long j = start[i]; j < start[i + 1]; ++j)
      total += weight[j] * g[(a * s.outputs + reader[j]) * s.inner + b];
    grad_box[e] = total;
  }
}

extern "C" __global__ void resample_f32(ResampleShape s, const long long* index,
                                        const float* weight, const float* box, float* out) {
  resample(s, index, weight, box, out);
}
extern "C" __global__ void resample_f64(ResampleShape s, const long long* index,
                                        const double* weight, const double* box, double* out) {
  resample(s, index, weight, box, out);
}
extern "C" __global__ void resample_adjoint_f32(ResampleShape s, const long long* start,
                                                const long long* reader, const float* weight,
                                                const float* g, float* grad_box) {
  resample_adjoint(s, start, reader, weight, g, grad_box);
}
extern "C" __global__ void resample_adjoint_f64(ResampleShape s, const long long* start,
                                                const long long* reader, const double* weight,
                                                const double* g, double* grad_box) {
  resample_adjoint(s, start, reader, weight, g, grad_box);
}
// bfloat16: the weights rounded to it and each addition rounded, as the reference loops on
// bfloat16 add.
extern "C" __global__ void resample_bf16(ResampleShape s, const long long* index,
                                         const bfloat16* weight, const bfloat16* box,
                                         bfloat16* out) {
  resample(s, index, weight, box, out);
}
extern "C" __global__ void resample_adjoint_bf16(ResampleShape s, const long long* start,
                                                 const long long* reader, const bfloat16* weight,
                                                 const bfloat16* g, bfloat16* grad_box) {
  resample_adjoint(s, start, reader, weight, g, grad_box);
}
)"};
  return text;
}

/// The GPU source.
inline const cuda::KernelSource& resample_source() {
  static const cuda::KernelSource source{"meshtensor_resample.cu",
                                         with_shared_code("", resample_kernels_text())};
  return source;
}

namespace detail {
// The kernels' ResampleShape.
struct ResampleShape {
  std::int64_t outer, outputs, sources, inner;
};
inline ResampleShape resample_shape_of(const ResampleTaps& taps) {
  return {taps.outer, taps.outputs(), taps.sources, taps.inner};
}
}  // namespace detail

/// kernels::resample on the GPU; false when it cannot run there.
template <class T>
bool resample(const ResampleTaps& taps, const T* box, T* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const std::int64_t n = taps.outer * taps.outputs() * taps.inner;
    if (n == 0) return true;
    const cudaStream_t stream = cuda::compute_stream();
    const cuda::StreamBuffer index = upload<long long>(taps.index, stream);
    const cuda::StreamBuffer weight = upload<T>(taps.weight, stream);
    run_kernel(resample_source(), instance<T>("resample_f32", "resample_f64", "resample_bf16"), n,
               detail::resample_shape_of(taps), index.as<long long>(), weight.as<T>(), box, out);
    return true;
  }
}

/// kernels::resample_adjoint on the GPU; false when it cannot run there.
template <class T>
bool resample_adjoint(const ResampleTaps& taps, const T* g, T* grad_box) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const std::int64_t n = taps.outer * taps.sources * taps.inner;
    if (n == 0) return true;
    const ResampleReaders readers = readers_of(taps);
    const cudaStream_t stream = cuda::compute_stream();
    const cuda::StreamBuffer start = upload<long long>(readers.start, stream);
    const cuda::StreamBuffer reader = upload<long long>(readers.reader, stream);
    const cuda::StreamBuffer weight = upload<T>(readers.weight, stream);
    run_kernel(resample_source(),
               instance<T>("resample_adjoint_f32", "resample_adjoint_f64", "resample_adjoint_bf16"),
               n, detail::resample_shape_of(taps), start.as<long long>(), reader.as<long long>(),
               weight.as<T>(), g, grad_box);
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
