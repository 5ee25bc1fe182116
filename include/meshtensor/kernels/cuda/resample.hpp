#pragma once
// Resampling one dim (kernels/cpu/reference/resample.hpp) on a processor that computes on a GPU: a
// thread per output element adds its taps; the adjoint takes a thread per source element, which
// adds the gradients of the outputs that read it (their list built on the host), so no two
// threads write one element and no atomics are needed. Both add in the CPU loops' order, from
// zero. The same source up-samples by tiling windows (kernels/common/tile_up_sampling.hpp). Each
// host function returns false, doing nothing, unless the thread computes on a GPU, the
// blocks are in GPU memory, and they are float, double or bfloat16.

#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/common/tile_up_sampling.hpp"
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
// Up-sampling by windows that tile the output (kernels/common/tile_up_sampling.hpp): a thread per
// output channel of a listed position sums its input channels in order, in float, as the CPU
// loop does; the sum and then the bias added are rounded to T.
struct UpTiles {
  long long positions, c_in, c_out, in_channel_stride, out_channel_stride;
};

template <class T, class B>
__device__ void up_sample_tiles(UpTiles u, const long long* input, const long long* output,
                                const long long* tap, const T* in, const T* weight, const B* bias,
                                T* out) {
  const long long n = u.positions * u.c_out;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
       e += (long long)blockDim.x * gridDim.x) {
    const long long c = e % u.c_out, p = e / u.c_out;
    const T* x = in + input[p];
    const T* w = weight + tap[p] * u.c_in * u.c_out + c;
    float sum = 0.0f;
    for (long long ci = 0; ci < u.c_in; ++ci)
      sum += float(x[ci * u.in_channel_stride]) * float(w[ci * u.c_out]);
    out[output[p] + c * u.out_channel_stride] =
        bias ? T(float(T(sum)) + float(T(bias[c]))) : T(sum);
  }
}

extern "C" __global__ void up_sample_tiles_f32(UpTiles u, const long long* input,
                                               const long long* output, const long long* tap,
                                               const float* in, const float* weight,
                                               const float* bias, float* out) {
  up_sample_tiles(u, input, output, tap, in, weight, bias, out);
}
extern "C" __global__ void up_sample_tiles_f64(UpTiles u, const long long* input,
                                               const long long* output, const long long* tap,
                                               const double* in, const double* weight,
                                               const double* bias, double* out) {
  up_sample_tiles(u, input, output, tap, in, weight, bias, out);
}
extern "C" __global__ void up_sample_tiles_bf16(UpTiles u, const long long* input,
                                                const long long* output, const long long* tap,
                                                const bfloat16* in, const bfloat16* weight,
                                                const float* bias, bfloat16* out) {
  up_sample_tiles(u, input, output, tap, in, weight, bias, out);
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
// The kernels' UpTiles.
struct UpTiles {
  std::int64_t positions, c_in, c_out, in_channel_stride, out_channel_stride;
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

/// kernels::up_sample_tiles on the GPU (bias float, double for double blocks); false when it
/// cannot run there.
template <class T, class B>
bool up_sample_tiles(const TileUpSampling& u, const T* input, const T* weight, const B* bias,
                     T* out) {
  using Bias = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if constexpr (!has_kernels_for<T> || !std::is_same_v<B, Bias>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const std::int64_t n = u.positions() * u.c_out;
    if (n == 0) return true;
    const cudaStream_t stream = cuda::compute_stream();
    const cuda::StreamBuffer inputs = upload<long long>(u.input, stream);
    const cuda::StreamBuffer outputs = upload<long long>(u.output, stream);
    const cuda::StreamBuffer taps = upload<long long>(u.tap, stream);
    run_kernel(
        resample_source(),
        instance<T>("up_sample_tiles_f32", "up_sample_tiles_f64", "up_sample_tiles_bf16"), n,
        detail::UpTiles{u.positions(), u.c_in, u.c_out, u.in_channel_stride, u.out_channel_stride},
        inputs.as<long long>(), outputs.as<long long>(), taps.as<long long>(), input, weight, bias,
        out);
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
