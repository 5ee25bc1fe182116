#pragma once
// meshtensor's own CUDA kernels for element-wise work on a processor that computes on a GPU,
// compiled at run time (device/runtime_compiler.hpp; cuDNN's kernels are in
// kernels/cuda/cudnn_conv.hpp): the built-in unary and binary ops, a gradient times an op's
// derivative, copies between strided boxes (packing halos and messages, broadcasting, reordering
// dims), and accumulation. The ops' formulas are the CPU loops' own text
// (kernels/common/elementwise_formulas.hpp), so +, -, *, / and the comparisons agree with the CPU
// bit for bit; exp, log, tanh and pow use CUDA's math library, within a few units in the last place
// of the host's. bfloat16 blocks compute in float and round each result, as the CPU loops do. Each
// host function returns false, doing nothing, unless the calling thread computes on a GPU and every
// operand is in GPU memory; the caller then runs its CPU loop.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/elementwise_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"

namespace meshtensor::kernels::gpu {

/// The kernels, after the formulas: grid-stride loops over n elements; a zip walks up to 8 dims
/// with each operand's strides (0 where it is broadcast).
inline const char* elementwise_kernels_text() {
  static const char* const text{R"(
template <int op, class T>
__device__ T unary_by_code(int code, T x, T s) {
  if constexpr (op == UnaryOp::count) return x;
  else return code == op ? unary_formula<op>(x, s) : unary_by_code<op + 1>(code, x, s);
}
template <int op, class T>
__device__ T binary_by_code(int code, T x, T y) {
  if constexpr (op == BinaryOp::count) return x;
  else return code == op ? binary_formula<op>(x, y) : binary_by_code<op + 1>(code, x, y);
}

// The host's Walk: a box of up to 8 dims and the strides of a, b and the output over it.
struct Walk {
  long long rank;
  long long sizes[8];
  long long strides[3][8];
};

#define MESHTENSOR_GRID_STRIDE(i, n)                                          \
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; \
       i += (long long)blockDim.x * gridDim.x)

template <class T>
__device__ void map_values(int code, T s, const T* x, T* out, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) out[i] = unary_by_code<0>(code, x[i], s);
}
template <class T>
__device__ void times_derivative(int code, T s, const T* g, const T* x, T* out, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) out[i] = g[i] * unary_by_code<0>(code, x[i], s);
}
// Each operand's offset of the walk's i-th index (row-major).
__device__ void offsets_of(const Walk& w, long long i, long long* at) {
  at[0] = at[1] = at[2] = 0;
  for (long long d = w.rank - 1; d >= 0; --d) {
    const long long k = i % w.sizes[d];
    i /= w.sizes[d];
    for (int j = 0; j < 3; ++j) at[j] += k * w.strides[j][d];
  }
}
template <class T>
__device__ void zip_values(int code, const Walk& w, const T* a, const T* b, T* out, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) {
    long long at[3];
    offsets_of(w, i, at);
    out[at[2]] = binary_by_code<0>(code, a[at[0]], b[at[1]]);
  }
}
// A copy between strided boxes: from operand 0's offsets to the output's, any 1-, 2-, 4- or 8-byte
// type.
template <class T>
__device__ void copy_walk(const Walk& w, const T* from, T* to, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) {
    long long at[3];
    offsets_of(w, i, at);
    to[at[2]] = from[at[0]];
  }
}
template <class T>
__device__ void accumulate(T* into, const T* add, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) into[i] += add[i];
}

extern "C" __global__ void map_f32(int code, float s, const float* x, float* out, long long n) {
  map_values(code, s, x, out, n);
}
extern "C" __global__ void map_f64(int code, double s, const double* x, double* out, long long n) {
  map_values(code, s, x, out, n);
}
extern "C" __global__ void times_derivative_f32(int code, float s, const float* g, const float* x,
                                                float* out, long long n) {
  times_derivative(code, s, g, x, out, n);
}
extern "C" __global__ void times_derivative_f64(int code, double s, const double* g,
                                                const double* x, double* out, long long n) {
  times_derivative(code, s, g, x, out, n);
}
extern "C" __global__ void zip_f32(int code, Walk w, const float* a, const float* b, float* out,
                                   long long n) {
  zip_values(code, w, a, b, out, n);
}
extern "C" __global__ void zip_f64(int code, Walk w, const double* a, const double* b,
                                   double* out, long long n) {
  zip_values(code, w, a, b, out, n);
}
extern "C" __global__ void copy_1_byte(Walk w, const unsigned char* from, unsigned char* to,
                                       long long n) {
  copy_walk(w, from, to, n);
}
extern "C" __global__ void copy_2_bytes(Walk w, const unsigned short* from, unsigned short* to,
                                        long long n) {
  copy_walk(w, from, to, n);
}
extern "C" __global__ void copy_4_bytes(Walk w, const unsigned* from, unsigned* to, long long n) {
  copy_walk(w, from, to, n);
}
extern "C" __global__ void copy_8_bytes(Walk w, const unsigned long long* from,
                                        unsigned long long* to, long long n) {
  copy_walk(w, from, to, n);
}
// float -> bfloat16 as VCVTNEPS2BF16 rounds (kernels/cpu/convert.hpp), and back.
extern "C" __global__ void convert_f32_bf16(const float* from, bfloat16* to, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) to[i] = bfloat16(from[i]);
}
extern "C" __global__ void convert_bf16_f32(const bfloat16* from, float* to, long long n) {
  MESHTENSOR_GRID_STRIDE(i, n) to[i] = from[i];
}
// bfloat16: the formulas in float, each result rounded once, as the CPU loops compute them (the
// scalar comes as a float, exactly the bfloat16 it was).
extern "C" __global__ void map_bf16(int code, float s, const bfloat16* x, bfloat16* out,
                                    long long n) {
  map_values(code, bfloat16(s), x, out, n);
}
extern "C" __global__ void times_derivative_bf16(int code, float s, const bfloat16* g,
                                                 const bfloat16* x, bfloat16* out, long long n) {
  times_derivative(code, bfloat16(s), g, x, out, n);
}
extern "C" __global__ void zip_bf16(int code, Walk w, const bfloat16* a, const bfloat16* b,
                                    bfloat16* out, long long n) {
  zip_values(code, w, a, b, out, n);
}
extern "C" __global__ void accumulate_bf16(bfloat16* into, const bfloat16* add, long long n) {
  accumulate(into, add, n);
}
extern "C" __global__ void accumulate_f32(float* into, const float* add, long long n) {
  accumulate(into, add, n);
}
extern "C" __global__ void accumulate_f64(double* into, const double* add, long long n) {
  accumulate(into, add, n);
}
)"};
  return text;
}

/// The GPU source: the shared formulas, then the kernels.
inline const cuda::KernelSource& elementwise_source() {
  static const cuda::KernelSource source{
      "meshtensor_elementwise.cu",
      with_shared_code(shared::elementwise_formulas_text(), elementwise_kernels_text())};
  return source;
}

namespace detail {
constexpr int walk_dims = 8;

// The kernels' Walk (all 64-bit: the same layout on both sides).
struct Walk {
  std::int64_t rank = 0;
  std::int64_t sizes[walk_dims] = {};
  std::int64_t strides[3][walk_dims] = {};
};

// The kernels' walk over a box of `sizes` (dims merged where every operand allows); false if more
// than 8 dims remain.
inline bool walk_of(const Sizes& sizes, const std::array<Strides, 3>& strides, Walk* walk) {
  Sizes merged;
  std::array<Strides, 3> merged_strides;
  std::tie(merged, merged_strides) = merge_dims<3>(sizes, strides);
  if (merged.size() > std::size_t(walk_dims)) return false;
  walk->rank = static_cast<std::int64_t>(merged.size());  // 0 for a box of size-1 dims
  for (std::size_t d = 0; d < merged.size(); ++d) {
    walk->sizes[d] = merged[d];
    for (int k = 0; k < 3; ++k) walk->strides[k][d] = merged_strides[k][d];
  }
  return true;
}
}  // namespace detail

/// out[i] = unary_formula<code>(x[i], s) for i < n, on the GPU; false when it cannot run there.
template <class T>
bool map(int code, T s, const T* x, T* out, std::int64_t n) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(elementwise_source(), instance<T>("map_f32", "map_f64", "map_bf16"), n, code,
               compute_t<T>(s), x, out, static_cast<long long>(n));
    return true;
  }
}

/// out[i] = g[i] * unary_formula<code>(x[i], s) for i < n: a gradient through a unary op.
template <class T>
bool times_derivative(int code, T s, const T* g, const T* x, T* out, std::int64_t n) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(elementwise_source(),
               instance<T>("times_derivative_f32", "times_derivative_f64", "times_derivative_bf16"),
               n, code, compute_t<T>(s), g, x, out, static_cast<long long>(n));
    return true;
  }
}

/// binary_formula<code> of a and b at each index of `sizes`, into out; strides[0..2] are a's, b's
/// and out's (in elements, 0 where broadcast). False when it cannot run on the GPU, or the box has
/// more than 8 dims once merged.
template <class T>
bool zip(int code, const Sizes& sizes, const std::array<Strides, 3>& strides, const T* a,
         const T* b, T* out) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const std::int64_t n = num_elements(sizes);
    if (n == 0) return true;
    detail::Walk walk;
    if (!detail::walk_of(sizes, strides, &walk)) return false;
    run_kernel(elementwise_source(), instance<T>("zip_f32", "zip_f64", "zip_bf16"), n, code, walk,
               a, b, out, static_cast<long long>(n));
    return true;
  }
}

/// to[i * to_strides] = from[i * from_strides] for every index i of `box`, on the GPU, as
/// kernels/cpu/reference/copy_box.hpp: for elements of 1, 2, 4 or 8 bytes; false when it cannot
/// run there.
template <class T>
bool copy_box(const Sizes& box, const T* from, const Strides& from_strides, T* to,
              const Strides& to_strides) {
  if constexpr ((sizeof(T) != 1 && sizeof(T) != 2 && sizeof(T) != 4 && sizeof(T) != 8) ||
                !std::is_trivially_copyable_v<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const std::int64_t n = num_elements(box);
    if (n == 0) return true;
    detail::Walk walk;
    if (!detail::walk_of(box, {from_strides, Strides(box.size(), 0), to_strides}, &walk))
      return false;
    const char* kernel = sizeof(T) == 1   ? "copy_1_byte"
                         : sizeof(T) == 2 ? "copy_2_bytes"
                         : sizeof(T) == 4 ? "copy_4_bytes"
                                          : "copy_8_bytes";
    run_kernel(elementwise_source(), kernel, n, walk, static_cast<const void*>(from),
               static_cast<void*>(to), static_cast<long long>(n));
    return true;
  }
}

/// to[i] = from[i] between float and bfloat16, on the GPU; false for other pairs.
template <class From, class To>
bool convert(const From* from, std::int64_t n, To* to) {
  constexpr bool narrows = std::is_same_v<From, float> && std::is_same_v<To, bfloat16>;
  constexpr bool widens = std::is_same_v<From, bfloat16> && std::is_same_v<To, float>;
  if constexpr (!narrows && !widens) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(elementwise_source(), narrows ? "convert_f32_bf16" : "convert_bf16_f32", n,
               static_cast<const void*>(from), static_cast<void*>(to), static_cast<long long>(n));
    return true;
  }
}

/// into[i] += add[i] for i < n, on the GPU; false when it cannot run there.
template <class T>
bool accumulate(T* into, const T* add, std::int64_t n) {
  if constexpr (!has_kernels_for<T>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    run_kernel(elementwise_source(),
               instance<T>("accumulate_f32", "accumulate_f64", "accumulate_bf16"), n, into, add,
               static_cast<long long>(n));
    return true;
  }
}

// The ops' functors: a built-in op (kernels/common/elementwise_formulas.hpp) carries its code and
// runs on the GPU; a function the user wrote does not (false: the CPU loop runs it).
template <class T, class F>
bool map_builtin(const F& f, const T* x, T* out, std::int64_t n) {
  if constexpr (has_code<F>) return map<T>(F::code, f.s, x, out, n);
  return false;
}
template <class T, class D>
bool times_derivative_builtin(const D& df, const T* g, const T* x, T* out, std::int64_t n) {
  if constexpr (has_code<D>) return times_derivative<T>(D::code, df.s, g, x, out, n);
  return false;
}
template <class T, class F>
bool zip_builtin([[maybe_unused]] const F& f, const Sizes& sizes,
                 const std::array<Strides, 3>& strides, const T* a, const T* b, T* out) {
  if constexpr (has_code<F>) return zip<T>(F::code, sizes, strides, a, b, out);
  return false;
}

}  // namespace meshtensor::kernels::gpu
