#pragma once
// Sums of products, and the max and min reductions' folds, on a processor that computes on a GPU.
// Sums: what einsum and the sum reductions ask of
// kernels::parallel_sum (kernels/cpu/reference/fold.hpp) — for each index of an outer box, the sum
// over an inner box of the product of one or two operands, accumulated in double. Many outputs of
// few terms each (a contraction over channels) take a thread per output, adding the terms in
// order; few outputs of many terms (a bias gradient: a sum per channel over a whole activation)
// take blocks that each sum a chunk of one output's terms in shared memory, then one pass adds
// each output's chunks in order. No atomics: the same inputs give the same sums on every run.
// The order differs from the CPU's, so results agree with it to double rounding before the final
// rounding to the tensor's type. Each host function returns false, doing nothing, unless the
// thread computes on a GPU, every operand is in GPU memory, the operands are float,
// double or bfloat16, and each box has at most 8 dims.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/cpu/reference/fold.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The sum kernels' source.
inline const char* sum_kernels_text() {
  static const char* const text{R"(
// The host's SumShape: the outer and inner boxes and each operand's strides over them.
struct SumShape {
  long long operands, outer_rank, inner_rank;
  long long outer[8], inner[8];
  long long outer_strides[2][8], inner_strides[2][8];
};

// Each operand's offset of outer index o.
__device__ void outer_offsets(const SumShape& s, long long o, long long* at) {
  at[0] = at[1] = 0;
  for (long long d = s.outer_rank - 1; d >= 0; --d) {
    const long long k = o % s.outer[d];
    o /= s.outer[d];
    at[0] += k * s.outer_strides[0][d];
    at[1] += k * s.outer_strides[1][d];
  }
}

// Each operand's offset of inner index i from the outer offsets `base`.
__device__ void inner_offsets(const SumShape& s, const long long* base, long long i,
                              long long* at) {
  at[0] = base[0];
  at[1] = base[1];
  for (long long d = s.inner_rank - 1; d >= 0; --d) {
    const long long k = i % s.inner[d];
    i /= s.inner[d];
    at[0] += k * s.inner_strides[0][d];
    at[1] += k * s.inner_strides[1][d];
  }
}

// The product of the operands at inner index i from the outer offsets `base`.
template <class T>
__device__ double term(const SumShape& s, const T* a, const T* b, const long long* base,
                       long long i) {
  long long at[2];
  inner_offsets(s, base, i, at);
  double product = (double)a[at[0]];
  if (s.operands == 2) product *= (double)b[at[1]];
  return product;
}

// A thread per output, adding its terms in order.
template <class T>
__device__ void sum_per_output(const SumShape& s, const T* a, const T* b, double* out,
                               long long outputs, long long terms) {
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < outputs;
       o += (long long)blockDim.x * gridDim.x) {
    long long base[2];
    outer_offsets(s, o, base);
    double total = 0;
    for (long long i = 0; i < terms; ++i) total += term(s, a, b, base, i);
    out[o] = total;
  }
}

// Block (blockIdx.x, blockIdx.y) sums chunk y of output x's terms: each thread a strided share,
// then a tree over the block's threads (blockDim.x a power of two, at most 256).
template <class T>
__device__ void sum_chunk(const SumShape& s, const T* a, const T* b, double* partial,
                          long long terms, long long chunk) {
  __shared__ double lane[256];
  const long long o = blockIdx.x, begin = blockIdx.y * chunk;
  const long long end = begin + chunk < terms ? begin + chunk : terms;
  long long base[2];
  outer_offsets(s, o, base);
  double total = 0;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) total += term(s, a, b, base, i);
  lane[threadIdx.x] = total;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[o * gridDim.y + blockIdx.y] = lane[0];
}

// The fold of acc and v that the CPU's max (code larger) or min (smaller) reduction takes.
template <class T>
__device__ T extreme(int code, T acc, T v) {
  return code == BinaryOp::larger ? binary_formula<BinaryOp::larger>(acc, v)
                                  : binary_formula<BinaryOp::smaller>(acc, v);
}

// A thread per output, folding its values in order from `init`.
template <class T>
__device__ void extreme_per_output(const SumShape& s, const T* a, T* out, long long outputs,
                                   long long terms, int code, T init) {
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < outputs;
       o += (long long)blockDim.x * gridDim.x) {
    long long base[2], at[2];
    outer_offsets(s, o, base);
    T acc = init;
    for (long long i = 0; i < terms; ++i) {
      inner_offsets(s, base, i, at);
      acc = extreme(code, acc, a[at[0]]);
    }
    out[o] = acc;
  }
}

// Block (blockIdx.x, blockIdx.y) folds chunk y of output x's values: each thread a strided share,
// then a tree over the block's threads (values of T held exactly in double).
template <class T>
__device__ void extreme_chunk(const SumShape& s, const T* a, T* partial, long long terms,
                              long long chunk, int code, T init) {
  __shared__ double lane[256];
  const long long o = blockIdx.x, begin = blockIdx.y * chunk;
  const long long end = begin + chunk < terms ? begin + chunk : terms;
  long long base[2], at[2];
  outer_offsets(s, o, base);
  T acc = init;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    inner_offsets(s, base, i, at);
    acc = extreme(code, acc, a[at[0]]);
  }
  lane[threadIdx.x] = (double)acc;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      lane[threadIdx.x] = (double)extreme(code, (T)lane[threadIdx.x], (T)lane[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[o * gridDim.y + blockIdx.y] = (T)lane[0];
}

// out[o] = output o's chunks folded in order from `init`.
template <class T>
__device__ void extreme_of_chunks(const T* partial, long long chunks, T* out, long long outputs,
                                  int code, T init) {
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < outputs;
       o += (long long)blockDim.x * gridDim.x) {
    T acc = init;
    for (long long c = 0; c < chunks; ++c) acc = extreme(code, acc, partial[o * chunks + c]);
    out[o] = acc;
  }
}

extern "C" __global__ void extreme_per_output_f32(SumShape s, const float* a, float* out,
                                                  long long outputs, long long terms, int code,
                                                  float init) {
  extreme_per_output(s, a, out, outputs, terms, code, init);
}
extern "C" __global__ void extreme_per_output_f64(SumShape s, const double* a, double* out,
                                                  long long outputs, long long terms, int code,
                                                  double init) {
  extreme_per_output(s, a, out, outputs, terms, code, init);
}
extern "C" __global__ void extreme_chunk_f32(SumShape s, const float* a, float* partial,
                                             long long terms, long long chunk, int code,
                                             float init) {
  extreme_chunk(s, a, partial, terms, chunk, code, init);
}
extern "C" __global__ void extreme_chunk_f64(SumShape s, const double* a, double* partial,
                                             long long terms, long long chunk, int code,
                                             double init) {
  extreme_chunk(s, a, partial, terms, chunk, code, init);
}
extern "C" __global__ void extreme_of_chunks_f32(const float* partial, long long chunks,
                                                 float* out, long long outputs, int code,
                                                 float init) {
  extreme_of_chunks(partial, chunks, out, outputs, code, init);
}
extern "C" __global__ void extreme_of_chunks_f64(const double* partial, long long chunks,
                                                 double* out, long long outputs, int code,
                                                 double init) {
  extreme_of_chunks(partial, chunks, out, outputs, code, init);
}
extern "C" __global__ void sum_per_output_f32(SumShape s, const float* a, const float* b,
                                              double* out, long long outputs, long long terms) {
  sum_per_output(s, a, b, out, outputs, terms);
}
extern "C" __global__ void sum_per_output_f64(SumShape s, const double* a, const double* b,
                                              double* out, long long outputs, long long terms) {
  sum_per_output(s, a, b, out, outputs, terms);
}
extern "C" __global__ void sum_chunk_f32(SumShape s, const float* a, const float* b,
                                         double* partial, long long terms, long long chunk) {
  sum_chunk(s, a, b, partial, terms, chunk);
}
extern "C" __global__ void sum_chunk_f64(SumShape s, const double* a, const double* b,
                                         double* partial, long long terms, long long chunk) {
  sum_chunk(s, a, b, partial, terms, chunk);
}
// out[i] = in[i] in double: float products (cuBLAS's) into a double accumulator.
extern "C" __global__ void widen_f32(const float* in, double* out, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    out[i] = (double)in[i];
}
// out[i] = in[i] / divisor, rounded to the tensor's type: a double accumulator into the result
// (divisor 1 for a sum, the count for a mean).
template <class T>
__device__ void narrow(const double* in, T* out, long long n, double divisor) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)blockDim.x * gridDim.x)
    out[i] = (T)(in[i] / divisor);
}
extern "C" __global__ void narrow_f32(const double* in, float* out, long long n, double divisor) {
  narrow(in, out, n, divisor);
}
extern "C" __global__ void narrow_f64(const double* in, double* out, long long n,
                                      double divisor) {
  narrow(in, out, n, divisor);
}
// bfloat16 operands, read as float and multiplied in double; the bounds of a fold come as floats.
extern "C" __global__ void sum_per_output_bf16(SumShape s, const bfloat16* a, const bfloat16* b,
                                               double* out, long long outputs, long long terms) {
  sum_per_output(s, a, b, out, outputs, terms);
}
extern "C" __global__ void sum_chunk_bf16(SumShape s, const bfloat16* a, const bfloat16* b,
                                          double* partial, long long terms, long long chunk) {
  sum_chunk(s, a, b, partial, terms, chunk);
}
extern "C" __global__ void narrow_bf16(const double* in, bfloat16* out, long long n,
                                       double divisor) {
  narrow(in, out, n, divisor);
}
extern "C" __global__ void extreme_per_output_bf16(SumShape s, const bfloat16* a, bfloat16* out,
                                                   long long outputs, long long terms, int code,
                                                   float init) {
  extreme_per_output(s, a, out, outputs, terms, code, bfloat16(init));
}
extern "C" __global__ void extreme_chunk_bf16(SumShape s, const bfloat16* a, bfloat16* partial,
                                              long long terms, long long chunk, int code,
                                              float init) {
  extreme_chunk(s, a, partial, terms, chunk, code, bfloat16(init));
}
extern "C" __global__ void extreme_of_chunks_bf16(const bfloat16* partial, long long chunks,
                                                  bfloat16* out, long long outputs, int code,
                                                  float init) {
  extreme_of_chunks(partial, chunks, out, outputs, code, bfloat16(init));
}
// out[a, b] = the position k of the largest in[a, k, b], the first on ties (argmax): a thread per
// output, reading the values as the CPU loop compares them.
template <class T, class Out>
__device__ void argmax(const T* in, Out* out, long long outer, long long n, long long inner) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < outer * inner;
       e += (long long)blockDim.x * gridDim.x) {
    const T* first = in + e / inner * n * inner + e % inner;
    long long best = 0;
    for (long long k = 1; k < n; ++k)
      if (first[k * inner] > first[best * inner]) best = k;
    out[e] = (Out)best;
  }
}
extern "C" __global__ void argmax_f32_u8(const float* in, unsigned char* out, long long outer,
                                         long long n, long long inner) {
  argmax(in, out, outer, n, inner);
}
extern "C" __global__ void argmax_f64_u8(const double* in, unsigned char* out, long long outer,
                                         long long n, long long inner) {
  argmax(in, out, outer, n, inner);
}
extern "C" __global__ void argmax_bf16_u8(const bfloat16* in, unsigned char* out, long long outer,
                                          long long n, long long inner) {
  argmax(in, out, outer, n, inner);
}
extern "C" __global__ void argmax_f32_i32(const float* in, int* out, long long outer, long long n,
                                          long long inner) {
  argmax(in, out, outer, n, inner);
}
extern "C" __global__ void argmax_f64_i32(const double* in, int* out, long long outer,
                                          long long n, long long inner) {
  argmax(in, out, outer, n, inner);
}
extern "C" __global__ void argmax_bf16_i32(const bfloat16* in, int* out, long long outer,
                                           long long n, long long inner) {
  argmax(in, out, outer, n, inner);
}
// out[o] = the sum of output o's chunks, in order.
extern "C" __global__ void add_chunks(const double* partial, long long chunks, double* out,
                                      long long outputs) {
  for (long long o = blockIdx.x * (long long)blockDim.x + threadIdx.x; o < outputs;
       o += (long long)blockDim.x * gridDim.x) {
    double total = 0;
    for (long long c = 0; c < chunks; ++c) total += partial[o * chunks + c];
    out[o] = total;
  }
}
)"};
  return text;
}

/// The GPU source: the element-wise formulas (the folds take larger and smaller from them), then
/// the kernels.
inline const cuda::KernelSource& sum_source() {
  static const cuda::KernelSource source{
      "meshtensor_sum.cu",
      with_shared_code(shared::elementwise_formulas_text(), sum_kernels_text())};
  return source;
}

namespace detail {
constexpr int sum_dims = 8;

// The kernels' SumShape (all 64-bit: the same layout on both sides).
struct SumShape {
  std::int64_t operands = 1, outer_rank = 0, inner_rank = 0;
  std::int64_t outer[sum_dims] = {}, inner[sum_dims] = {};
  std::int64_t outer_strides[2][sum_dims] = {}, inner_strides[2][sum_dims] = {};
};

// The shape of a sum; false if a box has more than 8 dims.
template <class T, std::size_t N>
bool sum_shape_of(const Sizes& outer, const Sizes& inner,
                  const std::array<FoldOperand<T>, N>& operands, SumShape* shape) {
  static_assert(N == 1 || N == 2, "sums of one operand or of the products of two");
  if (outer.size() > std::size_t(sum_dims) || inner.size() > std::size_t(sum_dims)) return false;
  shape->operands = std::int64_t(N);
  shape->outer_rank = std::int64_t(outer.size());
  shape->inner_rank = std::int64_t(inner.size());
  for (std::size_t k = 0; k < N; ++k) {
    for (std::size_t d = 0; d < outer.size(); ++d) {
      shape->outer[d] = outer[d];
      shape->outer_strides[k][d] = operands[k].outer_strides[d];
    }
    for (std::size_t d = 0; d < inner.size(); ++d) {
      shape->inner[d] = inner[d];
      shape->inner_strides[k][d] = operands[k].inner_strides[d];
    }
  }
  return true;
}

// Terms per output below which a thread per output does better than blocks per output.
constexpr std::int64_t terms_per_thread = 256;
// Terms each block of the chunked sum adds.
constexpr std::int64_t chunk_terms = 256 * 32;
constexpr std::int64_t max_chunks = 65535;
// The terms of a chunk: chunk_terms, more where the chunks would pass max_chunks (a grid's limit
// along y).
inline std::int64_t chunk_of(std::int64_t terms) {
  return std::max(chunk_terms, (terms + max_chunks - 1) / max_chunks);
}
}  // namespace detail

/// out[o] = sum over the inner box of the product of the operands at (o, i), for every index o of
/// the outer box (row-major), on the GPU; false when it cannot run there.
template <class Acc, class T, std::size_t N>
bool sum(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, N>& operands,
         Acc* out) {
  if constexpr (!has_kernels_for<T> || !std::is_same_v<Acc, double> || (N != 1 && N != 2)) {
    return false;
  } else {
    const T* a = operands[0].data;
    const T* b = operands[N - 1].data;
    if (!cuda::computes_on_gpu()) return false;
    detail::SumShape shape;
    if (!detail::sum_shape_of(outer, inner, operands, &shape)) return false;
    const std::int64_t outputs = num_elements(outer), terms = num_elements(inner);
    if (outputs == 0) return true;
    const cudaStream_t stream = cuda::compute_stream();
    if (terms < detail::terms_per_thread || outputs > (std::int64_t(1) << 31) - 1) {
      cuda::launch(
          cuda::kernel(sum_source(), instance<T>("sum_per_output_f32", "sum_per_output_f64",
                                                 "sum_per_output_bf16")),
          outputs, stream, shape, a, b, out, static_cast<long long>(outputs),
          static_cast<long long>(terms));
    } else {
      const std::int64_t chunk = detail::chunk_of(terms);
      const std::int64_t chunks = (terms + chunk - 1) / chunk;
      const cuda::StreamBuffer partial(std::size_t(outputs * chunks) * sizeof(double));
      cuda::launch_grid(
          cuda::kernel(sum_source(),
                       instance<T>("sum_chunk_f32", "sum_chunk_f64", "sum_chunk_bf16")),
          dim3(unsigned(outputs), unsigned(chunks)), dim3(256), stream, shape, a, b,
          partial.as<double>(), static_cast<long long>(terms), static_cast<long long>(chunk));
      cuda::launch(cuda::kernel(sum_source(), "add_chunks"), outputs, stream,
                   static_cast<const double*>(partial.as<double>()), static_cast<long long>(chunks),
                   out, static_cast<long long>(outputs));
    }
    return true;
  }
}

/// out[i] = in[i] / divisor rounded to T, for i < n, on the GPU; false when it cannot run there.
template <class T>
bool narrow(const double* in, T* out, std::int64_t n, double divisor) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(sum_source(), instance<T>("narrow_f32", "narrow_f64", "narrow_bf16"), n, in, out,
               static_cast<long long>(n), divisor);
    return true;
  }
}

/// out[o] = the largest (is_max) or smallest of the operand's values over the inner box, folded
/// from `init` by the CPU's formula, for every index o of the outer box (row-major), on the GPU;
/// false when it cannot run there. Equal to the CPU's fold but for the sign of a zero maximum.
template <class T>
bool extreme(const Sizes& outer, const Sizes& inner, const FoldOperand<T>& operand, T* out,
             bool is_max, T init) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    detail::SumShape shape;
    if (!detail::sum_shape_of<T, 1>(outer, inner, {operand}, &shape)) return false;
    const std::int64_t outputs = num_elements(outer), terms = num_elements(inner);
    if (outputs == 0) return true;
    const int code = is_max ? BinaryOp::larger : BinaryOp::smaller;
    const cudaStream_t stream = cuda::compute_stream();
    if (terms < detail::terms_per_thread || outputs > (std::int64_t(1) << 31) - 1) {
      cuda::launch(
          cuda::kernel(sum_source(), instance<T>("extreme_per_output_f32", "extreme_per_output_f64",
                                                 "extreme_per_output_bf16")),
          outputs, stream, shape, operand.data, out, static_cast<long long>(outputs),
          static_cast<long long>(terms), code, compute_t<T>(init));
    } else {
      const std::int64_t chunk = detail::chunk_of(terms);
      const std::int64_t chunks = (terms + chunk - 1) / chunk;
      const cuda::StreamBuffer partial(std::size_t(outputs * chunks) * sizeof(T));
      cuda::launch_grid(
          cuda::kernel(sum_source(),
                       instance<T>("extreme_chunk_f32", "extreme_chunk_f64", "extreme_chunk_bf16")),
          dim3(unsigned(outputs), unsigned(chunks)), dim3(256), stream, shape, operand.data,
          partial.as<T>(), static_cast<long long>(terms), static_cast<long long>(chunk), code,
          compute_t<T>(init));
      cuda::launch(
          cuda::kernel(sum_source(), instance<T>("extreme_of_chunks_f32", "extreme_of_chunks_f64",
                                                 "extreme_of_chunks_bf16")),
          outputs, stream, static_cast<const T*>(partial.as<T>()), static_cast<long long>(chunks),
          out, static_cast<long long>(outputs), code, compute_t<T>(init));
    }
    return true;
  }
}

/// out[a, b] = the position along the middle dim of [outer][n][inner] of the largest value of
/// `in`, the first on ties, on the GPU; false when it cannot run there (indices of uint8 or
/// int32 only).
template <class Out, class T>
bool argmax(const T* in, std::int64_t outer, std::int64_t n, std::int64_t inner, Out* out) {
  constexpr bool bytes = std::is_same_v<Out, std::uint8_t>;
  if constexpr (!has_kernels_for<T> || !(bytes || std::is_same_v<Out, std::int32_t>)) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const char* kernel = bytes ? instance<T>("argmax_f32_u8", "argmax_f64_u8", "argmax_bf16_u8")
                               : instance<T>("argmax_f32_i32", "argmax_f64_i32", "argmax_bf16_i32");
    run_kernel(sum_source(), kernel, outer * inner, in, out, static_cast<long long>(outer),
               static_cast<long long>(n), static_cast<long long>(inner));
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
