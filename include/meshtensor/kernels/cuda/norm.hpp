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
//   - the input gradient p g' + q v + r per key, a thread per element.
// The formulas are the CPU loops' own (kernels/common/norm_formulas.hpp). No atomics: the same
// inputs give the same results on every run. The per-key constants come from the host and go to the
// GPU with each call. Each host function returns false, doing nothing, unless the thread
// computes on a GPU, the block is in device or managed memory, it is float, double or bfloat16
// (computed in float, as on the CPU), and it has at most 8 dims longer than one.

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
// x null: everywhere. Values are stored as T and computed in C (float for bfloat16), as the
// per-key constants are.
template <class T, class C>
__device__ C masked(T g, const T* x, const C* scale, const C* shift, long long at, long long key) {
  if (!x) return C(g);
  return affine_floor(scale[key], C(x[at]), shift[key], C(0)) > C(0) ? C(g) : C(0);
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
__device__ void gradient_sums_chunk(const KeyedBlock& s, const T* g, const T* v, const C* scale,
                                    const C* shift, const T* mask_x, const C* mask_scale,
                                    const C* mask_shift, double* partial, long long terms,
                                    long long chunk) {
  __shared__ double lane[256];
  const long long key = blockIdx.x, begin = blockIdx.y * chunk;
  const long long end = begin + chunk < terms ? begin + chunk : terms;
  const long long start = key_start(s, key);
  double sums[2] = {0, 0};
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const long long at = start + element_offset(s, i);
    const C kept = masked(g[at], mask_x, mask_scale, mask_shift, at, key);
    sums[0] += (double)kept;
    sums[1] += (double)(kept * (scale[key] * C(v[at]) + shift[key]));
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
__device__ void gradient_sums_lanes(const KeyedBlock& s, const T* g, const T* v, const C* scale,
                                    const C* shift, const T* mask_x, const C* mask_scale,
                                    const C* mask_shift, double* partial, long long rows,
                                    long long groups) {
  const long long keys = key_count(s);
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < keys * groups;
       t += (long long)blockDim.x * gridDim.x) {
    const long long key = t % keys, group = t / keys;
    double sums[2] = {0, 0};
    for (long long r = group; r < rows; r += groups) {
      const long long at = r * keys + key;
      const C kept = masked(g[at], mask_x, mask_scale, mask_shift, at, key);
      sums[0] += (double)kept;
      sums[1] += (double)(kept * (scale[key] * C(v[at]) + shift[key]));
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
__device__ void affine(const KeyedBlock& s, const T* x, const C* scale, const C* shift, C floor,
                       T* out, long long n) {
  for (long long at = blockIdx.x * (long long)blockDim.x + threadIdx.x; at < n;
       at += (long long)blockDim.x * gridDim.x) {
    const long long key = key_of(s, at);
    out[at] = T(affine_floor(scale[key], C(x[at]), shift[key], floor));
  }
}

template <class T, class C>
__device__ void input_gradient(const KeyedBlock& s, const T* g, const T* v, const T* mask_x,
                               const C* mask_scale, const C* mask_shift, const C* p, const C* q,
                               const C* r, T* dx, long long n) {
  for (long long at = blockIdx.x * (long long)blockDim.x + threadIdx.x; at < n;
       at += (long long)blockDim.x * gridDim.x) {
    const long long key = key_of(s, at);
    const C kept = masked(g[at], mask_x, mask_scale, mask_shift, at, key);
    dx[at] = T(affine_input_gradient(p[key], kept, q[key], C(v[at]), r[key]));
  }
}

extern "C" __global__ void moments_chunk_f32(KeyedBlock s, const float* x, double* partial,
                                             long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void moments_chunk_f64(KeyedBlock s, const double* x, double* partial,
                                             long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void gradient_sums_chunk_f32(KeyedBlock s, const float* g, const float* v,
                                                   const float* scale, const float* shift,
                                                   const float* mask_x, const float* mask_scale,
                                                   const float* mask_shift, double* partial,
                                                   long long terms, long long chunk) {
  gradient_sums_chunk(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, terms,
                      chunk);
}
extern "C" __global__ void gradient_sums_chunk_f64(KeyedBlock s, const double* g, const double* v,
                                                   const double* scale, const double* shift,
                                                   const double* mask_x, const double* mask_scale,
                                                   const double* mask_shift, double* partial,
                                                   long long terms, long long chunk) {
  gradient_sums_chunk(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, terms,
                      chunk);
}
extern "C" __global__ void moments_lanes_f32(KeyedBlock s, const float* x, double* partial,
                                             long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
extern "C" __global__ void moments_lanes_f64(KeyedBlock s, const double* x, double* partial,
                                             long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
extern "C" __global__ void gradient_sums_lanes_f32(KeyedBlock s, const float* g, const float* v,
                                                   const float* scale, const float* shift,
                                                   const float* mask_x, const float* mask_scale,
                                                   const float* mask_shift, double* partial,
                                                   long long rows, long long groups) {
  gradient_sums_lanes(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, rows,
                      groups);
}
extern "C" __global__ void gradient_sums_lanes_f64(KeyedBlock s, const double* g, const double* v,
                                                   const double* scale, const double* shift,
                                                   const double* mask_x, const double* mask_scale,
                                                   const double* mask_shift, double* partial,
                                                   long long rows, long long groups) {
  gradient_sums_lanes(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, rows,
                      groups);
}
extern "C" __global__ void affine_f32(KeyedBlock s, const float* x, const float* scale,
                                      const float* shift, float floor, float* out, long long n) {
  affine(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void affine_f64(KeyedBlock s, const double* x, const double* scale,
                                      const double* shift, double floor, double* out,
                                      long long n) {
  affine(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void input_gradient_f32(KeyedBlock s, const float* g, const float* v,
                                              const float* mask_x, const float* mask_scale,
                                              const float* mask_shift, const float* p,
                                              const float* q, const float* r, float* dx,
                                              long long n) {
  input_gradient(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
}
extern "C" __global__ void input_gradient_f64(KeyedBlock s, const double* g, const double* v,
                                              const double* mask_x, const double* mask_scale,
                                              const double* mask_shift, const double* p,
                                              const double* q, const double* r, double* dx,
                                              long long n) {
  input_gradient(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
}
// bfloat16 values, float constants and arithmetic (as the CPU loops' compute_t).
extern "C" __global__ void moments_chunk_bf16(KeyedBlock s, const bfloat16* x, double* partial,
                                              long long terms, long long chunk) {
  moments_chunk(s, x, partial, terms, chunk);
}
extern "C" __global__ void moments_lanes_bf16(KeyedBlock s, const bfloat16* x, double* partial,
                                              long long rows, long long groups) {
  moments_lanes(s, x, partial, rows, groups);
}
extern "C" __global__ void gradient_sums_chunk_bf16(KeyedBlock s, const bfloat16* g,
                                                    const bfloat16* v, const float* scale,
                                                    const float* shift, const bfloat16* mask_x,
                                                    const float* mask_scale,
                                                    const float* mask_shift, double* partial,
                                                    long long terms, long long chunk) {
  gradient_sums_chunk(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, terms,
                      chunk);
}
extern "C" __global__ void gradient_sums_lanes_bf16(KeyedBlock s, const bfloat16* g,
                                                    const bfloat16* v, const float* scale,
                                                    const float* shift, const bfloat16* mask_x,
                                                    const float* mask_scale,
                                                    const float* mask_shift, double* partial,
                                                    long long rows, long long groups) {
  gradient_sums_lanes(s, g, v, scale, shift, mask_x, mask_scale, mask_shift, partial, rows,
                      groups);
}
extern "C" __global__ void affine_bf16(KeyedBlock s, const bfloat16* x, const float* scale,
                                       const float* shift, float floor, bfloat16* out,
                                       long long n) {
  affine(s, x, scale, shift, floor, out, n);
}
extern "C" __global__ void input_gradient_bf16(KeyedBlock s, const bfloat16* g, const bfloat16* v,
                                               const bfloat16* mask_x, const float* mask_scale,
                                               const float* mask_shift, const float* p,
                                               const float* q, const float* r, bfloat16* dx,
                                               long long n) {
  input_gradient(s, g, v, mask_x, mask_scale, mask_shift, p, q, r, dx, n);
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

// Per-key constants in T on the GPU, one list after another: lists[j] at as<T>() + j keys (zeros
// for a null list). T is the kernels' compute type: float for bfloat16 blocks.
template <class T>
cuda::StreamBuffer key_constants(std::initializer_list<const std::vector<double>*> lists,
                                 std::size_t keys, cudaStream_t stream) {
  std::vector<double> all;
  for (const auto* list : lists) {
    if (list)
      all.insert(all.end(), list->begin(), list->end());
    else
      all.resize(all.size() + keys, 0.0);
  }
  return upload<T>(all, stream);
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

// Per key, `width` doubles into `result` (on the host): `first` over the block (its arguments
// `args`, then the partials and, by chunks, the elements per key and per chunk or, by lanes, the
// rows and the groups of rows), then `combine` over `combined` threads (the partials, the chunks
// or groups, the results, `combined`).
template <class... Args>
void reduce_per_key(const KeyedBlock& block, FirstPass first, cudaKernel_t combine,
                    std::int64_t keys, std::int64_t terms, std::int64_t width,
                    std::int64_t combined, double* result, cudaStream_t stream, Args... args) {
  const bool lanes = keys_innermost(block);
  const std::int64_t chunk = lanes ? rows_per_lane : chunk_of(terms),
                     chunks = (terms + chunk - 1) / chunk;
  const cuda::StreamBuffer partial(std::size_t(width * keys * chunks) * sizeof(double), stream),
      on_gpu(std::size_t(width * keys) * sizeof(double), stream);
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
               static_cast<long long>(chunks), on_gpu.as<double>(),
               static_cast<long long>(combined));
  cuda::check(
      cudaMemcpyAsync(result, on_gpu.as<double>(), std::size_t(width * keys) * sizeof(double),
                      cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync");
  ++device_activity().waits;
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}
}  // namespace detail

/// The count, mean and sum of squared deviations of each key's elements, 3 per key into `out`
/// (keys of `keys`); false when it cannot run on the GPU.
template <class T>
bool norm_moments(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                  std::vector<shared::PartialMoments>* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t n = num_elements(sizes), terms = keys > 0 ? n / keys : 0;
    out->assign(std::size_t(keys), shared::PartialMoments{0, 0, 0});
    if (n == 0) return true;
    std::vector<double> moments(std::size_t(3 * keys));  // count, mean, m2 per key
    const cudaStream_t stream = cuda::compute_stream();
    cuda::prefetch_to_gpu(x, std::size_t(n) * sizeof(T), stream);
    detail::reduce_per_key(
        block,
        {instance<T>("moments_chunk_f32", "moments_chunk_f64", "moments_chunk_bf16"),
         instance<T>("moments_lanes_f32", "moments_lanes_f64", "moments_lanes_bf16")},
        cuda::kernel(norm_source(), "combine_moment_chunks"), keys, terms, 3, keys, moments.data(),
        stream, x);
    for (std::int64_t k = 0; k < keys; ++k)
      (*out)[std::size_t(k)] = {moments[3 * k], moments[3 * k + 1], moments[3 * k + 2]};
    return true;
  }
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element; false when it cannot
/// run on the GPU.
template <class T>
bool norm_affine(const Sizes& sizes, const Strides& key_strides, const T* x,
                 const std::vector<double>& scale, const std::vector<double>& shift, T floor,
                 T* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t n = num_elements(sizes);
    if (n == 0) return true;
    const std::size_t keys = scale.size();
    using C = compute_t<T>;
    const cuda::StreamBuffer constants =
        detail::key_constants<C>({&scale, &shift}, keys, cuda::compute_stream());
    const C* c = constants.as<C>();
    run_kernel(norm_source(), instance<T>("affine_f32", "affine_f64", "affine_bf16"), n,
               {operand(x, n), operand(out, n)}, block, x, c, c + keys, C(floor), out,
               static_cast<long long>(n));
    return true;
  }
}

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`,
/// 2 per key into `sums`; false when it cannot run on the GPU.
template <class T>
bool norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, const T* g, const T* v,
                        const std::vector<double>& scale, const std::vector<double>& shift,
                        const ReluMask<T>& mask, std::vector<double>* sums) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t keys = std::int64_t(scale.size()), n = num_elements(sizes);
    const std::int64_t terms = keys > 0 ? n / keys : 0;
    sums->assign(std::size_t(2 * keys), 0.0);
    if (n == 0) return true;
    const cudaStream_t stream = cuda::compute_stream();
    for (const T* data : {g, v, mask.x})
      if (data) cuda::prefetch_to_gpu(data, std::size_t(n) * sizeof(T), stream);
    using C = compute_t<T>;
    const cuda::StreamBuffer constants = detail::key_constants<C>(
        {&scale, &shift, mask.scale, mask.shift}, std::size_t(keys), stream);
    const C* c = constants.as<C>();
    detail::reduce_per_key(block,
                           {instance<T>("gradient_sums_chunk_f32", "gradient_sums_chunk_f64",
                                        "gradient_sums_chunk_bf16"),
                            instance<T>("gradient_sums_lanes_f32", "gradient_sums_lanes_f64",
                                        "gradient_sums_lanes_bf16")},
                           cuda::kernel(sum_source(), "add_chunks"), keys, terms, 2, 2 * keys,
                           sums->data(), stream, g, v, c, c + keys, mask.x, c + 2 * keys,
                           c + 3 * keys);
    return true;
  }
}

/// dx = p[key] g' + q[key] v + r[key], g' being g masked by `mask`; false when it cannot run on
/// the GPU.
template <class T>
bool norm_input_gradient(const Sizes& sizes, const Strides& key_strides, const T* g, const T* v,
                         const ReluMask<T>& mask, const std::vector<double>& p,
                         const std::vector<double>& q, const std::vector<double>& r, T* dx) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    detail::KeyedBlock block;
    if (!cuda::computes_on_gpu() || !detail::keyed_block_of(sizes, key_strides, &block))
      return false;
    const std::int64_t n = num_elements(sizes);
    if (n == 0) return true;
    const std::size_t keys = p.size();
    using C = compute_t<T>;
    const cuda::StreamBuffer constants = detail::key_constants<C>(
        {mask.scale, mask.shift, &p, &q, &r}, keys, cuda::compute_stream());
    const C* c = constants.as<C>();
    run_kernel(norm_source(),
               instance<T>("input_gradient_f32", "input_gradient_f64", "input_gradient_bf16"), n,
               {operand(g, n), operand(v, n), operand(dx, n), operand(mask.x ? mask.x : g, n)},
               block, g, v, mask.x, c, c + keys, c + 2 * keys, c + 3 * keys, c + 4 * keys, dx,
               static_cast<long long>(n));
    return true;
  }
}

}  // namespace meshtensor::kernels::gpu
