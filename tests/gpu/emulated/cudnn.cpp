// The emulated cuDNN (libcudnn.so.9): the calls of kernels/cuda/cudnn_conv.hpp by their documented
// semantics, run in their handle's stream on the emulated GPU (device.hpp), so that the mapping of
// meshtensor's convolutions onto cuDNN (descriptors, padding, transposed convolutions as
// adjoints, weight orders, alpha and beta) is tested on machines without a GPU.
//  - Nd tensors are N, C, D, H, W with any strides; 5-D NHWC filters are stored K, D, H, W, C and
//    described as {K, C, D, H, W}; convolution is cross-correlation with symmetric padding, and a
//    call whose output dims differ from the forward output-dim formula is refused (BAD_PARAM), as
//    cuDNN does; y = alpha * result + beta * y, with beta = 0 never reading y.
//  - A call reads its descriptors and scalars when it is made (the caller may destroy them next)
//    and its operands when its stream runs; an operand in host memory is an illegal address.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "device.hpp"

struct cudnnTensorStruct {
  int dims[5], strides[5];
};
struct cudnnFilterStruct {
  int dims[5];
  cudnnTensorFormat_t format;
};
struct cudnnConvolutionStruct {
  int pad[3], stride[3], dilation[3];
  cudnnConvolutionMode_t mode;
};
struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

long offset_of(const cudnnTensorStruct* t, const int* index) {
  long at = 0;
  for (int i = 0; i < 5; ++i) at += long(index[i]) * t->strides[i];
  return at;
}

// Calls f(index) for every index of a 5-D tensor.
template <class F>
void for_each_index(const cudnnTensorStruct* t, F&& f) {
  int i[5];
  for (i[0] = 0; i[0] < t->dims[0]; ++i[0])
    for (i[1] = 0; i[1] < t->dims[1]; ++i[1])
      for (i[2] = 0; i[2] < t->dims[2]; ++i[2])
        for (i[3] = 0; i[3] < t->dims[3]; ++i[3])
          for (i[4] = 0; i[4] < t->dims[4]; ++i[4]) f(i);
}

long filter_offset(const cudnnFilterStruct* w, int k, int c, const int* tap) {
  return ((long(k) * w->dims[2] + tap[0]) * w->dims[3] + tap[1]) * w->dims[4] * w->dims[1] +
         long(tap[2]) * w->dims[1] + c;
}

bool dims_agree(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y) {
  if (w->format != CUDNN_TENSOR_NHWC || conv->mode != CUDNN_CROSS_CORRELATION) return false;
  if (x->dims[0] != y->dims[0] || x->dims[1] != w->dims[1] || y->dims[1] != w->dims[0])
    return false;
  for (int d = 0; d < 3; ++d) {
    const int span = (w->dims[2 + d] - 1) * conv->dilation[d] + 1;
    if ((x->dims[2 + d] + 2 * conv->pad[d] - span) / conv->stride[d] + 1 != y->dims[2 + d])
      return false;
  }
  return true;
}

// Calls f(x offset, filter offset, y offset) for every product of the convolution x -> y.
template <class F>
void for_each_product(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                      const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, F&& f) {
  for_each_index(y, [&](const int* o) {
    int tap[3];
    for (tap[0] = 0; tap[0] < w->dims[2]; ++tap[0])
      for (tap[1] = 0; tap[1] < w->dims[3]; ++tap[1])
        for (tap[2] = 0; tap[2] < w->dims[4]; ++tap[2]) {
          int xi[5] = {o[0], 0, 0, 0, 0};
          bool inside = true;
          for (int d = 0; d < 3; ++d) {
            xi[2 + d] = o[2 + d] * conv->stride[d] + tap[d] * conv->dilation[d] - conv->pad[d];
            inside &= xi[2 + d] >= 0 && xi[2 + d] < x->dims[2 + d];
          }
          if (!inside) continue;
          for (xi[1] = 0; xi[1] < x->dims[1]; ++xi[1])
            f(offset_of(x, xi), filter_offset(w, o[1], xi[1], tap), offset_of(y, o));
        }
  });
}

void scale(const cudnnTensorStruct* t, float* data, float beta) {
  for_each_index(t, [&](const int* i) {
    float& v = data[offset_of(t, i)];
    v = beta == 0 ? 0.0f : v * beta;
  });
}

template <class Perf>
cudnnStatus_t one_algorithm(int* count, Perf* perf, std::size_t memory) {
  *count = 1;
  perf[0] = {};
  perf[0].status = CUDNN_STATUS_SUCCESS;
  perf[0].determinism = CUDNN_DETERMINISTIC;
  perf[0].mathType = CUDNN_FMA_MATH;
  perf[0].memory = memory;
  return CUDNN_STATUS_SUCCESS;
}

float value(const void* scalar) { return *static_cast<const float*>(scalar); }
const float* as_float(const void* p) { return static_cast<const float*>(p); }

// Queues `work`, a call's computation, in `handle`'s stream, once its operands are known to be
// where a GPU can reach them.
template <class Work>
cudnnStatus_t in_stream(cudnnHandle_t handle, const char* call,
                        std::initializer_list<const void*> operands, Work work) {
  for (const void* p : operands)
    if (!emulated_gpu::device_accessible(p)) {
      emulated_gpu::fail(cudaErrorIllegalAddress,
                         std::string(call) + " was given an operand in host memory");
      return CUDNN_STATUS_EXECUTION_FAILED;
    }
  emulated_gpu::count("cudnn");
  emulated_gpu::enqueue(handle->stream, std::move(work));
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

// --- cuDNN ------------------------------------------------------------------------------------
cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t* handle) {
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
const char* CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t) { return "emulated cuDNN error"; }

cudnnStatus_t CUDNNWINAPI cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  *d = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t,
                                                     int n, const int dims[], const int strides[]) {
  if (n != 5) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < 5; ++i) {
    if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
    d->dims[i] = dims[i];
    d->strides[i] = strides[i];
  }
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  *d = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t,
                                                     cudnnTensorFormat_t format, int n,
                                                     const int dims[]) {
  if (n != 5) return CUDNN_STATUS_NOT_SUPPORTED;
  d->format = format;
  for (int i = 0; i < 5; ++i) d->dims[i] = dims[i];
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  *d = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n,
                                                          const int pad[], const int stride[],
                                                          const int dilation[],
                                                          cudnnConvolutionMode_t mode,
                                                          cudnnDataType_t) {
  if (n != 3) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < 3; ++i) {
    if (pad[i] < 0 || stride[i] < 1 || dilation[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    d->pad[i] = pad[i];
    d->stride[i] = stride[i];
    d->dilation[i] = dilation[i];
  }
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t,
                                                      cudnnMathType_t) {
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnTransformTensor(cudnnHandle_t handle, const void* alpha,
                                               const cudnnTensorDescriptor_t xd, const void* x,
                                               const void* beta, const cudnnTensorDescriptor_t yd,
                                               void* y) {
  for (int i = 0; i < 5; ++i)
    if (xd->dims[i] != yd->dims[i]) return CUDNN_STATUS_BAD_PARAM;
  return in_stream(handle, "cudnnTransformTensor", {x, y},
                   [a = value(alpha), b = value(beta), xt = *xd, x = as_float(x), yt = *yd,
                    y = static_cast<float*>(y)] {
                     for_each_index(&xt, [&](const int* i) {
                       float& to = y[offset_of(&yt, i)];
                       const float from = x[offset_of(&xt, i)];
                       to = b == 0 ? a * from : a * from + b * to;
                     });
                   });
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int, int* count,
    cudnnConvolutionFwdAlgoPerf_t* perf) {
  if (!dims_agree(x, w, conv, y)) return CUDNN_STATUS_BAD_PARAM;
  return one_algorithm(count, perf, 16);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t y,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t x, const int, int* count,
    cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  if (!dims_agree(x, w, conv, y)) return CUDNN_STATUS_BAD_PARAM;
  return one_algorithm(count, perf, 0);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t y,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t w, const int, int* count,
    cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  if (!dims_agree(x, w, conv, y)) return CUDNN_STATUS_BAD_PARAM;
  return one_algorithm(count, perf, 8);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                                  const cudnnTensorDescriptor_t xd, const void* x,
                                                  const cudnnFilterDescriptor_t wd, const void* w,
                                                  const cudnnConvolutionDescriptor_t conv,
                                                  cudnnConvolutionFwdAlgo_t, void*, size_t,
                                                  const void* beta,
                                                  const cudnnTensorDescriptor_t yd, void* y) {
  if (!dims_agree(xd, wd, conv, yd)) return CUDNN_STATUS_BAD_PARAM;
  return in_stream(handle, "cudnnConvolutionForward", {x, w, y},
                   [a = value(alpha), b = value(beta), xt = *xd, x = as_float(x), wt = *wd,
                    w = as_float(w), ct = *conv, yt = *yd, y = static_cast<float*>(y)] {
                     scale(&yt, y, b);
                     for_each_product(&xt, &wt, &ct, &yt, [&](long xi, long wi, long yi) {
                       y[yi] += a * x[xi] * w[wi];
                     });
                   });
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wd, const void* w,
    const cudnnTensorDescriptor_t yd, const void* dy, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionBwdDataAlgo_t, void*, size_t, const void* beta,
    const cudnnTensorDescriptor_t xd, void* dx) {
  if (!dims_agree(xd, wd, conv, yd)) return CUDNN_STATUS_BAD_PARAM;
  return in_stream(handle, "cudnnConvolutionBackwardData", {w, dy, dx},
                   [a = value(alpha), b = value(beta), xt = *xd, dx = static_cast<float*>(dx),
                    wt = *wd, w = as_float(w), ct = *conv, yt = *yd, dy = as_float(dy)] {
                     scale(&xt, dx, b);
                     for_each_product(&xt, &wt, &ct, &yt, [&](long xi, long wi, long yi) {
                       dx[xi] += a * dy[yi] * w[wi];
                     });
                   });
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
    const cudnnTensorDescriptor_t yd, const void* dy, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionBwdFilterAlgo_t, void*, size_t, const void* beta,
    const cudnnFilterDescriptor_t wd, void* dw) {
  if (!dims_agree(xd, wd, conv, yd)) return CUDNN_STATUS_BAD_PARAM;
  return in_stream(
      handle, "cudnnConvolutionBackwardFilter", {x, dy, dw},
      [a = value(alpha), b = value(beta), xt = *xd, x = as_float(x), yt = *yd, dy = as_float(dy),
       ct = *conv, wt = *wd, dw = static_cast<float*>(dw)] {
        const long n = long(wt.dims[0]) * wt.dims[1] * wt.dims[2] * wt.dims[3] * wt.dims[4];
        for (long i = 0; i < n; ++i) dw[i] = b == 0 ? 0.0f : b * dw[i];
        for_each_product(&xt, &wt, &ct, &yt,
                         [&](long xi, long wi, long yi) { dw[wi] += a * x[xi] * dy[yi]; });
      });
}

}  // extern "C"
