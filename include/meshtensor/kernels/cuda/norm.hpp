#pragma once
// The normalisations (ops/norm.hpp) on a processor that computes on a GPU. A block's elements each
// belong to one statistic, their "key" (batch norm: the channel); the kernels take
//   - the moments of every key (count, mean, sum of squared deviations): blocks of 256 threads
//     each take a chunk of one key's elements, its mean first and the squared deviations from
//     that mean second, both summed in double in shared memory; one pass then combines each key's
//     chunks in order (Chan et al.). On a channels-last block, whose keys are side by side in
//     each row, a thread per key and group of rows does the same alone, so that neighbouring
//     threads read neighbouring values;
//   - scale x + shift per key, floored (a fused ReLU), a thread per element;
//   - the gradient's two sums per key, of g' and of g' (s x + h), where g' is g masked by the
//     ReLU, chunked (or by lanes) as the moments, and the chunks added by the sums' add_chunks;
//   - the input gradient p g' + q v + r per key, a thread per element;
//   - the per-key arithmetic between them (statistics from moments, coefficients, gradient terms),
//     a thread per key.
// The formulas are the CPU loops' own (kernels/common/norm_formulas.hpp). No atomics: the same
// inputs give the same results on every run. Per-key numbers are doubles in the GPU's memory,
// read there by the kernels and rounded to the data's compute type (float for bfloat16): nothing
// goes to the host, nothing waits. Each host function returns false, doing nothing, unless the
// thread computes on a GPU, the block is float, double or bfloat16, and it has at most 8 dims
// longer than one.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "meshtensor/kernels/common/norm_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"
#include "meshtensor/kernels/cuda/sum.hpp"

namespace meshtensor::kernels::gpu {

/// The kernels, after the formulas.
inline const char* norm_kernels_text() {
  static const char* const text{R"(
// The host's KeyedBlock: a row-major block, each dim's step in the key index, and the boxes of
// keys and of one key's elements with their steps in the block.
struct KeyedBlock {
  long long rank, kept_rank, reduced_rank;
  long long sizes[8], key_strides[8];
  long long kept[8], kept_strides[8];
  long long reduced[8], reduced_strides[8];
};

// Index i of a row-major box of `rank` dims, stepped through by `strides`.
__device__ long long step(long long i, long long rank, const long long* sizes,
                          const long long* strides) {
  long long at = 0;
  for (long long d = rank - 1; d >= 0; --d) {
    at += i % sizes[d] * strides[d];
    i /= sizes[d];
  }
  return at;
}
// The key of the element at offset `at`; the offset of a key's first element, and of its element
// i from there.
__device__ long long key_of(const KeyedBlock& s, long long at) {
  return step(at, s.rank, s.sizes, s.key_strides);
}
__device__ long long key_start(const KeyedBlock& s, long long key) {
  return step(key, s.kept_rank, s.kept, s.kept_strides);
}
__device__ long long element_offset(const KeyedBlock& s, long long i) {
  return step(i, s.reduced_rank, s.reduced, s.reduced_strides);
}

// The sum of every thread's `value` over the block (blockDim.x a power of two, at most 256), in
// the same order on every run; every thread gets it.
__device__ double block_sum(double* lane, double value) {
  lane[threadIdx.x] = value;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  const double total = lane[0];
  __syncthreads();
  return total;
}

// Where a fused ReLU passed the gradient: where its output, computed again from x, is positive.
// x null: everywhere. Values are stored as T and computed in C (float for bfloat16), the per-key
// constants rounded to C.
template <class T, class C>
__device__ C masked(T g, const T* x, const double* scale, const double* shift, long long at,
                    long long key) {
  if (!x) return C(g);
  return affine_floor(C(scale[key]), C(x[at]), C(shift[key]), C(0)) > C(0) ? C(g) : C(0);
}

// Block (blockIdx.x, blockIdx.y): the count, mean and sum of squared deviations of chunk y of key
// x's elements, at partial[3 (x gridDim.y + y)].
template <class T>
__device__ void moments_chunk(const KeyedBlock& s, const T* x, double* partial, long long terms,
                              long long chunk) {
  __shared__ double lane[256];
  const long long key = blockIdx.x, begin = blockIdx.y * chunk;
  const long long end = begin + chunk < terms ? begin + chunk : terms;
  const T* first = x + key_start(s, key);
  double total = 0;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x)
    total += (double)first[element_offset(s, i)];
  const double count = (double)(end - begin), mean = block_sum(lane, total) / count;
  double squares = 0;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double deviation = (double)first[element_offset(s, i)] - mean;
    squares += deviation * deviation;
  }
  const double m2 = block_sum(lane, squares);
  if (threadIdx.x == 0) {
    double* out = partial + 3 * (key * gridDim.y + blockIdx.y);
    out[0] = count;
    out[1] = mean;
    out[2] = m2;
  }
}

// Block (blockIdx.x, blockIdx.y): over chunk y of key x's elements, the sums of g' and of
// g' (scale v + shift), at partial[(2 x + w) gridDim.y + y].
template <class T, class C>
__device__ void gradient_sums_chunk(const KeyedBlock& s, const T* g, const T* v,
                                    const double* scale, const double* shift, const T* mask_x,
                                    const double* mask_scale, const double* mask_shift,
                                    double* partial, long long terms, long long chunk) {
  __shared__ double lane[256];
  const long long key = blockIdx.x, begin = blockIdx.y * chunk;
  const long long end = begin + chunk < terms ? begin + chunk : terms;
  const long long start = key_start(s, key);
  double sums[2] = {0, 0};
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const long long at = start + element_offset(s, i);
    const C kept = masked<T, C>(g[at], mask_x, mask_scale, mask_shift, at, key);
    sums[0] += (double)kept;
    sums[1] += (double)(kept * (C(scale[key]) * C(v[at]) + C(shift[key])));
  }
  for (int w = 0; w < 2; ++w) {
    const double total = block_sum(lane, sums[w]);
    if (threadIdx.x == 0) partial[(2 * key + w) * gridDim.y + blockIdx.y] = total;
  }
}

// On a block whose rows are the keys side by side (channels last), thread (key, g) of a grid of
// keys x groups takes key's elements in rows g, g + groups, ...: neighbouring threads read
// neighbouring values. Its results go where the chunked kernels put chunk g's.
__device__ long long key_count(const KeyedBlock& s) {
  long long keys = 1;
  for (long long d = 0; d < s.kept_rank; ++d) keys *= s.kept[d];
  return keys;
}

template <class T>
__device__ void moments_lanes(const KeyedBlock& s, const T* x, double* partial, long long rows,
                              long long groups) {
  const long long keys = key_count(s);
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < keys * groups;
       t += (long long)blockDim.x * gridDim.x) {
    const long long key = t % keys, g = t / keys;
    double total = 0, count = 0;
    for (long long r = g; r < rows; r += groups, count += 1) total += (double)x[r * keys + key];
    const double mean = total / count;
    double squares = 0;
    for (long long r = g; r < rows; r += groups) {
      const double deviation = (double)x[r * keys + key] - mean;
      squares += deviation * deviation;
    }
    double* out = partial + 3 * (key * groups + g);
    out[0] = count;
    out[1] = mean;
    out[2] = squares;
  }
}

template <class T, class C>
__device__ void gradient_sums_lanes(const KeyedBlock& s, const T* g, const T* v,
                                    const double* scale, const double* shift, const T* mask_x,
                                    const double* mask_scale, const double* mask_shift,
                                    double* partial, long long rows, long long groups) {
  const long long keys = key_count(s);
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < keys * groups;
       t += (long long)blockDim.x * gridDim.x) {
    const long long key = t % keys, group = t / keys;
    double sums[2] = {0, 0};
    for (long long r = group; r < rows; r += groups) {
      const long long at = r * keys + key;
      const C kept = masked<T, C>(g[at], mask_x, mask_scale, mask_shift, at, key);
      sums[0] += (double)kept;
      sums[1] += (double)(kept * (C(scale[key]) * C(v[at]) + C(shift[key])));
    }
    partial[2 * key * groups + group] = sums[0];
    partial[(2 * key + 1) * groups + group] = sums[1];
  }
}

// out[3 k ...] = key k's chunks combined in order.
extern "C" __global__ void combine_moment_chunks(const double* partial, long long chunks,
                                                 double* out, long long keys) {
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < keys;
       k += (long long)blockDim.x * gridDim.x) {
    PartialMoments total = {0, 0, 0};
    for (long long c = 0; c < chunks; ++c) {
      const double* p = partial + 3 * (k * chunks + c);
      const PartialMoments part = {p[0], p[1], p[2]};
      total = combine_moments(total, part);
    }
    out[3 * k] = total.count;
    out[3 * k + 1] = total.mean;
    out[3 * k + 2] = total.m2;
  }
}

template <class T, class C>
__device__ void affine(const KeyedBlock& s, const T* x, const double* scale, const double* shift,
                       C floor, T* out, long long n) {
  for (long long at = blockIdx.x * (long long)blockDim.x + threadIdx.x; at < n;
       at += (long long)blockDim.x * gridDim.x) {
    const long long key = key_of(s, at);
    out[at] = T(affine_floor(C(scale[key]), C(x[at]), C(shift[key]), floor));
  }
}

template <class T, class C>
__device__ void input_gradient(const KeyedBlock& s, const T* g, const T* v, const T* mask_x,
                               const double* mask_scale, const double* mask_shift,
                               const double* p, const double* q, const double* r, T* dx,
                               long long n) {
  for (long long at = blockIdx.x * (long long)blockDim.x + threadIdx.x; at < n;
       at += (long long)blockDim.x * gridDim.x) {
    const long long key = key_of(s, at);
    const C kept = masked<T, C>(g[at], mask_x, mask_scale, mask_shift, at, key);
    dx[at] = T(affine_input_gradient(C(p[key]), kept, C(q[key]), C(v[at]), C(r[key])));
  }
}

#define FOR_EACH_KEY(k, keys)                                                     \
  for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < keys; \
       k += (long long)blockDim.x * gridDim.x)

extern "C" __global__ void statistics(const double* parts, long long count_parts, long long keys,
                                      double count, double epsilon, double* stats) {
  FOR_EACH_KEY(k, keys) finish_statistics(parts, count_parts, keys, k, count, epsilon, stats);
}

template <class W>
__device__ void coefficients(const double* stats, long long keys, const W* gamma, const W* beta,
                             double* a, double* b) {
  FOR_EACH_KEY(k, keys)
  affine_coefficients(stats, keys, k, !gamma, gamma ? (double)gamma[k] : 1.0,
                      gamma ? (double)beta[k] : 0.0, a, b);
}

template <class W>
__device__ void terms(const double* stats, long long keys, const W* gamma, const double* sums,
                      double count, double* p, double* q, double* r) {
  FOR_EACH_KEY(k, keys)
  gradient_terms(stats, keys, k, !gamma, gamma ? (double)gamma[k] : 1.0, sums, count, p, q, r);
}

template <class T>
__device__ void inverse_std(const T* variance, long long n, double epsilon, T* out) {
  FOR_EACH_KEY(i, n) out[i] = T(1.0 / sqrt((double)variance[i] + epsilon));
}

extern "C" __global__ void moments_chunk_f32(KeyedBlock s, const float* x, double* partial,
                                             long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void moments_chunk_f64(KeyedBlock s, const double* x, double* partial,
                                             long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void moments_chunk_bf16(KeyedBlock s, const bfloat16* x, double* partial,
                                              long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void moments_lanes_f32(KeyedBlock s, const float* x, double* partial,
                                             long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
extern "C" __global__ void moments_lanes_f64(KeyedBlock s, const double* x, double* partial,
                                             long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
extern "C" __global__ void moments_lanes_bf16(KeyedBlock s, const bfloat16* x, double* partial,
                                              long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
// The passes with per-key constants, for each type of data (computed in float for bfloat16).
extern "C" __global__ void gradient_sums_chunk_f32(
    KeyedBlock s, const float* g, const float* v, const double* scale, const double* shift,
    const float* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long terms, long long chunk) {
  gradient_sums_chunk<float, float>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               terms, chunk);
}
extern "C" __global__ void gradient_sums_lanes_f32(
    KeyedBlock s, const float* g, const float* v, const double* scale, const double* shift,
    const float* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long rows, long long groups) {
  gradient_sums_lanes<float, float>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               rows, groups);
}
extern "C" __global__ void affine_f32(KeyedBlock s, const float* x, const double* scale,
                                      const double* shift, float floor, float* out, long long n) {
  affine<float, float>(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void input_gradient_f32(KeyedBlock s, const float* g, const float* v,
                                              const float* mask_x, const double* mask_scale,
                                              const double* mask_shift, const double* p,
                                              const double* q, const double* r, float* dx,
                                              long long n) {
  input_gradient<float, float>(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
}
extern "C" __global__ void coefficients_f32(const double* stats, long long keys,
                                            const float* gamma, const float* beta, double* a,
                                            double* b) {
  coefficients(stats, keys, gamma, beta, a, b);
}
extern "C" __global__ void gradient_terms_f32(const double* stats, long long keys,
                                              const float* gamma, const double* sums, double count,
                                              double* p, double* q, double* r) {
  terms(stats, keys, gamma, sums, count, p, q, r);
}
extern "C" __global__ void inverse_std_f32(const float* variance, long long n, double epsilon,
                                           float* out) {
  inverse_std(variance, n, epsilon, out);
}
extern "C" __global__ void gradient_sums_chunk_f64(
    KeyedBlock s, const double* g, const double* v, const double* scale, const double* shift,
    const double* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long terms, long long chunk) {
  gradient_sums_chunk<double, double>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               terms, chunk);
}
extern "C" __global__ void gradient_sums_lanes_f64(
    KeyedBlock s, const double* g, const double* v, const double* scale, const double* shift,
    const double* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long rows, long long groups) {
  gradient_sums_lanes<double, double>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               rows, groups);
}
extern "C" __global__ void affine_f64(KeyedBlock s, const double* x, const double* scale,
                                      const double* shift, double floor, double* out, long long n) {
  affine<double, double>(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void input_gradient_f64(KeyedBlock s, const double* g, const double* v,
                                              const double* mask_x, const double* mask_scale,
                                              const double* mask_shift, const double* p,
                                              const double* q, const double* r, double* dx,
                                              long long n) {
  input_gradient<double, double>(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
}
extern "C" __global__ void coefficients_f64(const double* stats, long long keys,
                                            const double* gamma, const double* beta, double* a,
                                            double* b) {
  coefficients(stats, keys, gamma, beta, a, b);
}
extern "C" __global__ void gradient_terms_f64(const double* stats, long long keys,
                                              const double* gamma, const double* sums, double count,
                                              double* p, double* q, double* r) {
  terms(stats, keys, gamma, sums, count, p, q, r);
}
extern "C" __global__ void inverse_std_f64(const double* variance, long long n, double epsilon,
                                           double* out) {
  inverse_std(variance, n, epsilon, out);
}
extern "C" __global__ void gradient_sums_chunk_bf16(
    KeyedBlock s, const bfloat16* g, const bfloat16* v, const double* scale, const double* shift,
    const bfloat16* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long terms, long long chunk) {
  gradient_sums_chunk<bfloat16, float>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               terms, chunk);
}
extern "C" __global__ void gradient_sums_lanes_bf16(
    KeyedBlock s, const bfloat16* g, const bfloat16* v, const double* scale, const double* shift,
    const bfloat16* mask_x, const double* mask_scale, const double* mask_shift, double* partial,
    long long rows, long long groups) {
  gradient_sums_lanes<bfloat16, float>(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial,
                               rows, groups);
}
extern "C" __global__ void affine_bf16(KeyedBlock s, const bfloat16* x, const double* scale,
                                      const double* shift, float floor, bfloat16* out, long long n) {
  affine<bfloat16, float>(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void input_gradient_bf16(KeyedBlock s, const bfloat16* g, const bfloat16* v,
                                              const bfloat16* mask_x, const double* mask_scale,
                                              const double* mask_shift, const double* p,
                                              const double* q, const double* r, bfloat16* dx,
                                              long long n) {
  input_gradient<bfloat16, float>(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
}
extern "C" __global__ void coefficients_bf16(const double* stats, long long keys,
                                            const bfloat16* gamma, const bfloat16* beta, double* a,
                                            double* b) {
  coefficients(stats, keys, gamma, beta, a, b);
}
extern "C" __global__ void gradient_terms_bf16(const double* stats, long long keys,
                                              const bfloat16* gamma, const double* sums, double count,
                                              double* p, double* q, double* r) {
  terms(stats, keys, gamma, sums, count, p, q, r);
}
extern "C" __global__ void inverse_std_bf16(const bfloat16* variance, long long n, double epsilon,
                                           bfloat16* out) {
  inverse_std(variance, n, epsilon, out);
}
)"};
  return text;
}

/// The GPU source: the shared formulas, then the kernels.
inline const cuda::KernelSource& norm_source() {
  static const cuda::KernelSource source{
      "meshtensor_norm.cu", with_shared_code(shared::norm_formulas_text(), norm_kernels_text())};
  return source;
}

namespace detail {
constexpr int keyed_dims = 8;

// The kernels' KeyedBlock (all 64-bit: the same layout on both sides).
struct KeyedBlock {
  std::int64_t rank = 0, kept_rank = 0, reduced_rank = 0;
  std::int64_t sizes[keyed_dims] = {}, key_strides[keyed_dims] = {};
  std::int64_t kept[keyed_dims] = {}, kept_strides[keyed_dims] = {};
  std::int64_t reduced[keyed_dims] = {}, reduced_strides[keyed_dims] = {};
};

// The KeyedBlock of a row-major block whose dims step the key index by `key_strides` (0 for a
// reduced dim; the kept dims' steps are row-major over them); false past 8 dims longer than one.
inline bool keyed_block_of(const Sizes& sizes, const Strides& key_strides, KeyedBlock* out) {
  const Strides value_strides = row_major_strides(sizes);
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;  // no step: neither the key nor the offset moves along it
    if (out->rank == keyed_dims) return false;
    out->sizes[out->rank] = sizes[d];
    out->key_strides[out->rank++] = key_strides[d];
    if (key_strides[d] != 0) {
      out->kept[out->kept_rank] = sizes[d];
      out->kept_strides[out->kept_rank++] = value_strides[d];
    } else {
      out->reduced[out->reduced_rank] = sizes[d];
      out->reduced_strides[out->reduced_rank++] = value_strides[d];
    }
  }
  return true;
}

// Whether the key of the element at offset `at` is at % keys: the kept dims are the block's
// innermost (channels last), and the block is rows of the keys side by side.
inline bool keys_innermost(const KeyedBlock& block) {
  for (std::int64_t d = 0; d < block.rank; ++d)
    if ((block.key_strides[d] != 0) != (d >= block.rank - block.kept_rank)) return false;
  return true;
}

// Rows each thread of the lane kernels takes.
constexpr std::int64_t rows_per_lane = 256;

// A reduction's first pass, by chunks (a block of threads per chunk of a key's elements) or by
// lanes (a thread per key and group of rows, on a keys-innermost block): the kernel's name, f32 or
// f64.
struct FirstPass {
  const char* chunks;
  const char* lanes;
};

// Per key, `width` doubles into `result` (in the GPU's memory): `first` over the block (its
// arguments `args`, then the partials and, by chunks, the elements per key and per chunk or, by
// lanes, the rows and the groups of rows), then `combine` over `combined` threads (the partials,
// the chunks or groups, the results, `combined`).
template <class... Args>
void reduce_per_key(const KeyedBlock& block, FirstPass first, cudaKernel_t combine,
                    std::int64_t keys, std::int64_t terms, std::int64_t width,
                    std::int64_t combined, double* result, cudaStream_t stream, Args... args) {
  const bool lanes = keys_innermost(block);
  const std::int64_t chunk = lanes ? rows_per_lane : chunk_of(terms),
                     chunks = (terms + chunk - 1) / chunk;
  const cuda::StreamBuffer partial(std::size_t(width * keys * chunks) * sizeof(double));
  if (lanes)
    cuda::launch(cuda::kernel(norm_source(), first.lanes), keys * chunks, stream, block, args...,
                 partial.as<double>(), static_cast<long long>(terms),
                 static_cast<long long>(chunks));
  else
    cuda::launch_grid(cuda::kernel(norm_source(), first.chunks),
                      dim3(unsigned(keys), unsigned(chunks)), dim3(256), stream, block, args...,
                      partial.as<double>(), static_cast<long long>(terms),
                      static_cast<long long>(chunk));
  cuda::launch(combine, combined, stream, static_cast<const double*>(partial.as<double>()),
               static_cast<long long>(chunks), result, static_cast<long long>(combined));
}
}  // namespace detail

/// The count, mean and sum of squared deviations of each key's elements, 3 per key into
/// `moments` (in the GPU's memory); false when it cannot run on the GPU.
template <class T>
bool norm_moments(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                  double* moments) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    if (keys == 0) return true;
    const std::int64_t n = num_elements(sizes), terms = n / keys;
    const cudaStream_t stream = cuda::compute_stream();
    if (n == 0) {  // no elements: every key's moments are zeros
      cuda::check(cudaMemsetAsync(moments, 0, std::size_t(3 * keys) * sizeof(double), stream),
                  "cudaMemsetAsync");
      return true;
    }
    detail::reduce_per_key(
        block,
        {instance<T>("moments_chunk_f32", "moments_chunk_f64", "moments_chunk_bf16"),
         instance<T>("moments_lanes_f32", "moments_lanes_f64", "moments_lanes_bf16")},
        cuda::kernel(norm_source(), "combine_moment_chunks"), keys, terms, 3, keys, moments, stream,
        x);
    return true;
  }
}

/// kernels::norm_statistics on the GPU; false when the processor computes elsewhere.
inline bool norm_statistics(const double* parts, std::int64_t count_parts, std::int64_t keys,
                            double count, double epsilon, double* stats) {
  if (!cuda::computes_on_gpu()) return false;
  cuda::launch(cuda::kernel(norm_source(), "statistics"), keys, cuda::compute_stream(), parts,
               static_cast<long long>(count_parts), static_cast<long long>(keys), count, epsilon,
               stats);
  return true;
}

/// kernels::norm_coefficients on the GPU; false when it cannot run there.
template <class W>
bool norm_coefficients(const double* stats, std::int64_t keys, const W* gamma, const W* beta,
                       double* a, double* b) {
  if constexpr (!has_kernels_for<W>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    cuda::launch(
        cuda::kernel(norm_source(),
                     instance<W>("coefficients_f32", "coefficients_f64", "coefficients_bf16")),
        keys, cuda::compute_stream(), stats, static_cast<long long>(keys), gamma, beta, a, b);
    return true;
  }
}

/// kernels::norm_gradient_terms on the GPU; false when it cannot run there.
template <class W>
bool norm_gradient_terms(const double* stats, std::int64_t keys, const W* gamma, const double* sums,
                         double count, double* p, double* q, double* r) {
  if constexpr (!has_kernels_for<W>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    cuda::launch(cuda::kernel(norm_source(), instance<W>("gradient_terms_f32", "gradient_terms_f64",
                                                         "gradient_terms_bf16")),
                 keys, cuda::compute_stream(), stats, static_cast<long long>(keys), gamma, sums,
                 count, p, q, r);
    return true;
  }
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element; false when it cannot
/// run on the GPU.
template <class T>
bool norm_affine(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                 const double* scale, const double* shift, T floor, T* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t n = num_elements(sizes);
    if (n == 0 || keys == 0) return true;
    run_kernel(norm_source(), instance<T>("affine_f32", "affine_f64", "affine_bf16"), n, block, x,
               scale, shift, compute_t<T>(floor), out, static_cast<long long>(n));
    return true;
  }
}

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`,
/// 2 per key into `sums` (in the GPU's memory); false when it cannot run on the GPU.
template <class T>
bool norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                        const T* g, const T* v, const double* scale, const double* shift,
                        const ReluMask<T>& mask, double* sums) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    if (keys == 0) return true;
    const std::int64_t n = num_elements(sizes), terms = n / keys;
    const cudaStream_t stream = cuda::compute_stream();
    if (n == 0) {
      cuda::check(cudaMemsetAsync(sums, 0, std::size_t(2 * keys) * sizeof(double), stream),
                  "cudaMemsetAsync");
      return true;
    }
    detail::reduce_per_key(block,
                           {instance<T>("gradient_sums_chunk_f32", "gradient_sums_chunk_f64",
                                        "gradient_sums_chunk_bf16"),
                            instance<T>("gradient_sums_lanes_f32", "gradient_sums_lanes_f64",
                                        "gradient_sums_lanes_bf16")},
                           cuda::kernel(sum_source(), "add_chunks"), keys, terms, 2, 2 * keys, sums,
                           stream, g, v, scale, shift, mask.x, mask.scale, mask.shift);
    return true;
  }
}

/// dx = p[key] g' + q[key] v + r[key], g' being g masked by `mask`; false when it cannot run on
/// the GPU.
template <class T>
bool norm_input_gradient(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                         const T* g, const T* v, const ReluMask<T>& mask, const double* p,
                         const double* q, const double* r, T* dx) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t n = num_elements(sizes);
    if (n == 0 || keys == 0) return true;
    run_kernel(norm_source(),
               instance<T>("input_gradient_f32", "input_gradient_f64", "input_gradient_bf16"), n,
               block, g, v, mask.x, mask.scale, mask.shift, p, q, r, dx, static_cast<long long>(n));
    return true;
  }
}

/// out[i] = 1 / sqrt(variance[i] + epsilon) in double, rounded to T; false when it cannot run on
/// the GPU.
template <class T>
bool norm_inverse_std(const T* variance, std::int64_t n, double epsilon, T* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(norm_source(), instance<T>("inverse_std_f32", "inverse_std_f64", "inverse_std_bf16"),
               n, variance, static_cast<long long>(n), epsilon, out);
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
