// The emulated cuBLAS (libcublas.so.13, which meshtensor loads by name): the strided batched
// GEMMs as cuBLAS defines them — column-major, op(A) and op(B) transposed or not, alpha and beta
// read from the host at the call (the default pointer mode), accumulated in the operands' type —
// run in the handle's stream on the emulated GPU.
#include <cublas_v2.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "device.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

template <class T>
cublasStatus_t gemm_strided_batched(cublasHandle_t handle, const char* call,
                                    cublasOperation_t transa, cublasOperation_t transb, int m,
                                    int n, int k, const T* alpha, const T* a, int lda,
                                    long long stride_a, const T* b, int ldb, long long stride_b,
                                    const T* beta, T* c, int ldc, long long stride_c, int batches) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || batches < 0 || ldc < std::max(1, m) ||
      lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const void* p :
       {static_cast<const void*>(a), static_cast<const void*>(b), static_cast<const void*>(c)})
    if (!emulated_gpu::device_accessible(p)) {
      emulated_gpu::fail(cudaErrorIllegalAddress,
                         std::string(call) + " was given a matrix in host memory");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  emulated_gpu::count("cublas");
  emulated_gpu::enqueue(handle->stream, [=, alpha = *alpha, beta = *beta] {
    for (int batch = 0; batch < batches; ++batch) {
      const T* ab = a + batch * stride_a;
      const T* bb = b + batch * stride_b;
      T* cb = c + batch * stride_c;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          T total = 0;
          for (int l = 0; l < k; ++l)
            total +=
                (ta ? ab[l + i * lda] : ab[i + l * lda]) * (tb ? bb[j + l * ldb] : bb[l + j * ldb]);
          T& out = cb[i + j * ldc];
          out = beta == T(0) ? alpha * total : alpha * total + beta * out;
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return "cuBLAS error (emulated)";
  }
}
cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* a, int lda, long long stride_a, const float* b, int ldb,
    long long stride_b, const float* beta, float* c, int ldc, long long stride_c, int batches) {
  return gemm_strided_batched(handle, "cublasSgemmStridedBatched", transa, transb, m, n, k, alpha,
                              a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batches);
}
cublasStatus_t CUBLASWINAPI cublasDgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const double* alpha, const double* a, int lda, long long stride_a, const double* b, int ldb,
    long long stride_b, const double* beta, double* c, int ldc, long long stride_c, int batches) {
  return gemm_strided_batched(handle, "cublasDgemmStridedBatched", transa, transb, m, n, k, alpha,
                              a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batches);
}

}  // extern "C"
