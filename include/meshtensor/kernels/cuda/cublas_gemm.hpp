#pragma once
// Einsum's contractions of two operands that are batches of matrix products
// (kernels/common/gemm_shape.hpp), on a processor that computes on a GPU, through cuBLAS's strided
// batched GEMM (cuBLAS loaded on first use, kernels/cuda/cublas_library.hpp). cuBLAS accumulates in
// the operands' type, with fused multiply-adds and without TF32 (its default math mode), so float
// results agree with the double-accumulated sums of the CPU and of kernels/cuda/sum.hpp to float
// rounding, as a matrix product in PyTorch does. Each call returns false, computing nothing, when
// the operands are not float or double, not both in GPU memory, or the contraction is
// not a GEMM; the caller then runs the sum kernels.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <string>
#include <type_traits>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/cuda.hpp"
#include "meshtensor/device/memory.hpp"
#include "meshtensor/kernels/common/gemm_shape.hpp"
#include "meshtensor/kernels/cuda/cublas_library.hpp"
#include "meshtensor/kernels/cuda/launch.hpp"
#include "meshtensor/kernels/cuda/sum.hpp"

namespace meshtensor::kernels::cublas {
namespace detail {

inline void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw DeviceError(std::string(call) + " failed: " + library().status_string(status));
}

/// The calling thread's cuBLAS handle on its current GPU, on its compute stream.
class Handle {
 public:
  Handle() {
    check(library().create(&handle_), "cublasCreate");
    check(library().set_stream(handle_, cuda::compute_stream()), "cublasSetStream");
  }
  ~Handle() {
    if (handle_) (void)library().destroy(handle_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

inline cublasHandle_t handle() { return current_processor().state<Handle>().get(); }

inline cublasOperation_t operation(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace detail

/// out[o] = sum over i of x(o, i) y(o, i) as a strided batched GEMM; false when it cannot run.
template <class T>
bool gemm_sum(const Sizes& outer, const Sizes& inner, const std::array<FoldOperand<T>, 2>& operands,
              double* out) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    return false;
  } else {
    if (!cuda::computes_on_gpu()) return false;
    const auto shape = gemm_shape_of(outer, inner, operands);
    if (!shape) return false;
    const GemmShape& g = *shape;
    const T* a = operands[g.a_operand].data;
    const T* b = operands[1 - g.a_operand].data;
    const cudaStream_t stream = cuda::compute_stream();
    const std::int64_t outputs = g.batch * g.stride_c;
    const T one = 1, zero = 0;
    ++device_activity().library_calls;
    if constexpr (std::is_same_v<T, double>) {
      detail::check(
          library().dgemm_strided_batched(
              detail::handle(), detail::operation(g.transpose_a), detail::operation(g.transpose_b),
              int(g.m), int(g.n), int(g.k), &one, a, int(g.lda), g.stride_a, b, int(g.ldb),
              g.stride_b, &zero, out, int(g.ldc), g.stride_c, int(g.batch)),
          "cublasDgemmStridedBatched");
    } else {
      // Float products into scratch, widened into the double accumulator the caller reads.
      const cuda::StreamBuffer product(std::size_t(outputs) * sizeof(float));
      detail::check(
          library().sgemm_strided_batched(
              detail::handle(), detail::operation(g.transpose_a), detail::operation(g.transpose_b),
              int(g.m), int(g.n), int(g.k), &one, a, int(g.lda), g.stride_a, b, int(g.ldb),
              g.stride_b, &zero, product.as<float>(), int(g.ldc), g.stride_c, int(g.batch)),
          "cublasSgemmStridedBatched");
      cuda::launch(cuda::kernel(gpu::sum_source(), "widen_f32"), outputs, stream,
                   static_cast<const float*>(product.as<float>()), out,
                   static_cast<long long>(outputs));
    }
    return true;
  }
}

}  // namespace meshtensor::kernels::cublas
