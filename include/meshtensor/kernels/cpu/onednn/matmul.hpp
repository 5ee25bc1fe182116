#pragma once
// Einsum's contractions of two operands that are batches of matrix products
// (kernels/common/gemm_shape.hpp), through oneDNN's matmul: its optimised kernels (AVX2/AVX-512
// GEMM, AMX and bf16 where the CPU has them) sum in float, so results agree with the
// double-accumulated fold to float rounding, as a matrix product in PyTorch does.
//
// A GemmShape is the column-major C = op(A) op(B); oneDNN's matmul is row-major dst = src x
// weights, so it computes the row-major n x m matrix C^T = op(B)^T op(A)^T: src is the rows'
// operand (B), weights the columns' operand (A), each at its own strides. The results are float
// (bfloat16 operands too): the caller widens or rounds them.

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/gemm_shape.hpp"
#include "meshtensor/kernels/cpu/onednn/context.hpp"

namespace meshtensor::kernels::onednn {
namespace detail {

template <class T>
constexpr bool multiplied_type = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

struct MatmulPrimitive {
  Step step;
  memory::desc src, weights, dst;
  bool available = false;  // false: oneDNN has only its reference kernel for it here
};

// A batch of row-major `rows` x `columns` matrices at these strides (one matrix: no batch dim).
inline memory::desc matrices(const GemmShape& g, std::int64_t rows, std::int64_t columns,
                             std::int64_t row_stride, std::int64_t column_stride,
                             std::int64_t batch_stride, memory::data_type type) {
  if (g.batch == 1) return memory::desc({rows, columns}, type, {row_stride, column_stride});
  return memory::desc({g.batch, rows, columns}, type, {batch_stride, row_stride, column_stride});
}

template <class T>
MatmulPrimitive& matmul_primitive(const GemmShape& g) {
  static_assert(multiplied_type<T>);
  struct Matmuls {};
  auto& cache = cache_of<MatmulPrimitive, Matmuls>();
  const std::vector<std::int64_t> key{std::is_same_v<T, float>,
                                      g.m,
                                      g.n,
                                      g.k,
                                      g.batch,
                                      g.transpose_a,
                                      g.transpose_b,
                                      g.lda,
                                      g.ldb,
                                      g.ldc,
                                      g.stride_a,
                                      g.stride_b,
                                      g.stride_c};
  auto& slot = cache[key];
  if (slot) return *slot;
  slot = std::make_unique<MatmulPrimitive>();
  const auto type = std::is_same_v<T, float> ? memory::data_type::f32 : memory::data_type::bf16;
  // src = op(B)^T (n x k), weights = op(A)^T (k x m), dst = C^T (n x m).
  slot->src = g.transpose_b ? matrices(g, g.n, g.k, 1, g.ldb, g.stride_b, type)
                            : matrices(g, g.n, g.k, g.ldb, 1, g.stride_b, type);
  slot->weights = g.transpose_a ? matrices(g, g.k, g.m, 1, g.lda, g.stride_a, type)
                                : matrices(g, g.k, g.m, g.lda, 1, g.stride_a, type);
  slot->dst = matrices(g, g.n, g.m, g.ldc, 1, g.stride_c, memory::data_type::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Made one processor at a time, as convolutions are: oneDNN 2.6's brgemm kernels (AVX-512) size
  // their blocking through statics that every thread shares.
  const auto creating = convolution_creation_lock();
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(slot->src, slot->weights, slot->dst),
                                          attr, context().engine);
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return *slot;
    slot->step = {dnnl::matmul(pd), pd.scratchpad_desc()};
    slot->available = true;
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
  }
  return *slot;
}

}  // namespace detail

/// Whether oneDNN runs the GEMM `g` on T with an optimised kernel on this CPU.
template <class T>
bool matmul_runs(const GemmShape& g) {
  if constexpr (!detail::multiplied_type<T>)
    return false;
  else
    return detail::matmul_primitive<T>(g).available;
}

/// Bytes of oneDNN's scratchpad for a matmul of `g` on T (matmul_runs<T>(g) must hold), as a call
/// takes it from the pool (in floats).
template <class T>
std::size_t matmul_scratchpad_bytes(const GemmShape& g) {
  const std::size_t bytes = detail::matmul_primitive<T>(g).step.scratchpad.get_size();
  return (bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float);
}

/// The float results of the GEMM `g` (matmul_runs<T>(g) must hold) into `out`, g.batch *
/// g.stride_c of them, where `a` is the operand g.a_operand names and `b` the other.
template <class T>
void matmul(const GemmShape& g, const T* a, const T* b, float* out) {
  static_assert(detail::multiplied_type<T>);
  const auto& p = detail::matmul_primitive<T>(g);
  detail::CallMemory call;
  detail::execute(p.step, call,
                  {{DNNL_ARG_SRC, call.wrap(p.src, b)},
                   {DNNL_ARG_WEIGHTS, call.wrap(p.weights, a)},
                   {DNNL_ARG_DST, call.wrap(p.dst, out)}});
}

}  // namespace meshtensor::kernels::onednn
