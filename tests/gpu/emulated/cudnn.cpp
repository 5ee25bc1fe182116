// The emulated cuDNN (libcudnn.so.9): the calls of kernels/cuda/cudnn_conv.hpp by their documented
// semantics, run in their handle's stream on the emulated GPU (device.hpp), so that the mapping of
// meshtensor's convolutions onto cuDNN (descriptors, padding, transposed convolutions as
// adjoints, weight orders, alpha and beta) is tested on machines without a GPU.
//  - Nd tensors are N, C, D, H, W with any strides; 5-D NHWC filters are stored K, D, H, W, C and
//    described as {K, C, D, H, W}; convolution is cross-correlation with symmetric padding, and a
//    call whose output dims differ from the forward output-dim formula is refused (BAD_PARAM), as
//    cuDNN does; y = alpha * result + beta * y, with beta = 0 never reading y.
//  - Elements are float or bfloat16; a convolution's x, filter and y share one type and compute
//    in float (bfloat16 as cuDNN's PSEUDO_BFLOAT16_CONFIG: each result rounded once, to nearest
//    even), other combinations are NOT_SUPPORTED. The heuristics offer bfloat16 problems a
//    tensor-op algorithm, float ones an FMA one.
//  - A call reads its descriptors and scalars when it is made (the caller may destroy them next)
//    and its operands when its stream runs; an operand in host memory is an illegal address.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device.hpp"

struct cudnnTensorStruct {
  int dims[5], strides[5];
  cudnnDataType_t type;
};
struct cudnnFilterStruct {
  int dims[5];
  cudnnTensorFormat_t format;
  cudnnDataType_t type;
};
struct cudnnConvolutionStruct {
  int pad[3], stride[3], dilation[3];
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
};
struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

bool element_type(cudnnDataType_t type) {
  return type == CUDNN_DATA_FLOAT || type == CUDNN_DATA_BFLOAT16;
}

// Element i of `data`, of `type`, as a float; and a float stored there (bfloat16 rounded to
// nearest even, NaN kept a NaN).
float load(const void* data, cudnnDataType_t type, long i) {
  if (type == CUDNN_DATA_FLOAT) return static_cast<const float*>(data)[i];
  const std::uint32_t bits = std::uint32_t(static_cast<const std::uint16_t*>(data)[i]) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
void store(void* data, cudnnDataType_t type, long i, float value) {
  if (type == CUDNN_DATA_FLOAT) {
    static_cast<float*>(data)[i] = value;
    return;
  }
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const std::uint32_t rounded = nan ? (bits | 0x00400000u) : bits + 0x7FFFu + ((bits >> 16) & 1u);
  static_cast<std::uint16_t*>(data)[i] = std::uint16_t(rounded >> 16);
}

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

// Whether a convolution's operands share a type it computes in float.
bool types_agree(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                 const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y) {
  return x->type == w->type && y->type == w->type && conv->compute == CUDNN_DATA_FLOAT;
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

// What cuDNN answers a convolution x -> y it is given: SUCCESS where it runs it.
cudnnStatus_t refusal(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                      const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y) {
  if (!types_agree(x, w, conv, y)) return CUDNN_STATUS_NOT_SUPPORTED;
  return dims_agree(x, w, conv, y) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
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

// A call's result accumulated in float over a tensor's elements, starting from beta times what
// `data` holds (beta 0 never reads it), and stored back once: bfloat16 rounds each result once.
class Result {
 public:
  Result(const cudnnTensorStruct& t, void* data, float beta) : t_(t), data_(data) {
    long span = 1;
    for (int i = 0; i < 5; ++i) span += long(t.dims[i] - 1) * t.strides[i];
    sum_.assign(std::size_t(span), 0.0f);
    if (beta != 0)
      for_each_index(&t_, [&](const int* i) {
        const long at = offset_of(&t_, i);
        sum_[at] = beta * load(data_, t_.type, at);
      });
  }
  float& operator[](long at) { return sum_[std::size_t(at)]; }
  void store_all() {
    for_each_index(&t_, [&](const int* i) {
      const long at = offset_of(&t_, i);
      store(data_, t_.type, at, sum_[at]);
    });
  }

 private:
  cudnnTensorStruct t_;
  void* data_;
  std::vector<float> sum_;
};

// The algorithms the heuristics suggest: one, or with MESHTENSOR_EMULATED_CUDNN_ALGORITHMS=3 three,
// in the heuristics' order but slowest first: 0 and 1 (multiply-adds; 40 and 20 ms more) and 2
// (tensor cores; for float, TF32). Their results are the same.
int algorithms_offered() {
  const char* set = std::getenv("MESHTENSOR_EMULATED_CUDNN_ALGORITHMS");
  return set && std::string(set) == "3" ? 3 : 1;
}

template <class Perf>
cudnnStatus_t suggested_algorithms(int* count, Perf* perf, int room, std::size_t memory,
                                   cudnnDataType_t type) {
  *count = std::min(algorithms_offered(), room);
  for (int i = 0; i < *count; ++i) {
    perf[i] = {};
    perf[i].algo = static_cast<decltype(perf[i].algo)>(i);
    perf[i].status = CUDNN_STATUS_SUCCESS;
    perf[i].determinism = CUDNN_DETERMINISTIC;
    const bool tensor_cores = type == CUDNN_DATA_BFLOAT16 || i == 2;
    perf[i].mathType = tensor_cores ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    perf[i].memory = memory;
  }
  return CUDNN_STATUS_SUCCESS;
}

// Of several algorithms, 0 and 1 take longer, by more than a busy machine's noise, so that a
// timing tells them apart.
void run_as(int algorithm) {
  if (algorithm < 2 && algorithms_offered() > 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(algorithm == 0 ? 40 : 20));
}

float value(const void* scalar) { return *static_cast<const float*>(scalar); }

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

// A filter's elements as a tensor of its own (dense, K * D * H * W * C of them), for a result.
cudnnTensorStruct as_tensor(const cudnnFilterStruct& w) {
  const int n = w.dims[0] * w.dims[1] * w.dims[2] * w.dims[3] * w.dims[4];
  return {{n, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, w.type};
}

// Queues one of the convolution x -> y's three calls: out (of `out_t`) = alpha * the sum over its
// products of term(x offset, filter offset, y offset) -> {out offset, product}, + beta * out.
template <class Term>
cudnnStatus_t convolution_call(cudnnHandle_t handle, const char* call,
                               std::initializer_list<const void*> operands, const void* alpha,
                               const void* beta, const cudnnTensorStruct* xd,
                               const cudnnFilterStruct* wd, const cudnnConvolutionStruct* conv,
                               const cudnnTensorStruct* yd, const cudnnTensorStruct& out_t,
                               void* out, int algorithm, Term term) {
  if (const cudnnStatus_t refused = refusal(xd, wd, conv, yd); refused != CUDNN_STATUS_SUCCESS)
    return refused;
  return in_stream(handle, call, operands,
                   [a = value(alpha), b = value(beta), xt = *xd, wt = *wd, ct = *conv, yt = *yd,
                    out_t, out, algorithm, term] {
                     run_as(algorithm);
                     Result sum(out_t, out, b);
                     for_each_product(&xt, &wt, &ct, &yt, [&](long xi, long wi, long yi) {
                       const auto [at, product] = term(xi, wi, yi);
                       sum[at] += a * product;
                     });
                     sum.store_all();
                   });
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
cudnnStatus_t CUDNNWINAPI cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d,
                                                     cudnnDataType_t type, int n, const int dims[],
                                                     const int strides[]) {
  if (n != 5 || !element_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  d->type = type;
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
cudnnStatus_t CUDNNWINAPI cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d,
                                                     cudnnDataType_t type,
                                                     cudnnTensorFormat_t format, int n,
                                                     const int dims[]) {
  if (n != 5 || !element_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
  d->format = format;
  d->type = type;
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
                                                          cudnnDataType_t compute) {
  if (n != 3) return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < 3; ++i) {
    if (pad[i] < 0 || stride[i] < 1 || dilation[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    d->pad[i] = pad[i];
    d->stride[i] = stride[i];
    d->dilation[i] = dilation[i];
  }
  d->mode = mode;
  d->compute = compute;
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
                   [a = value(alpha), b = value(beta), xt = *xd, x, yt = *yd, y] {
                     for_each_index(&xt, [&](const int* i) {
                       const long to = offset_of(&yt, i);
                       const float from = a * load(x, xt.type, offset_of(&xt, i));
                       store(y, yt.type, to, b == 0 ? from : from + b * load(y, yt.type, to));
                     });
                   });
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int room,
    int* count, cudnnConvolutionFwdAlgoPerf_t* perf) {
  if (const cudnnStatus_t refused = refusal(x, w, conv, y); refused != CUDNN_STATUS_SUCCESS)
    return refused;
  return suggested_algorithms(count, perf, room, 16, x->type);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t y,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t x, const int room,
    int* count, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  if (const cudnnStatus_t refused = refusal(x, w, conv, y); refused != CUDNN_STATUS_SUCCESS)
    return refused;
  return suggested_algorithms(count, perf, room, 0, x->type);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t y,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t w, const int room,
    int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  if (const cudnnStatus_t refused = refusal(x, w, conv, y); refused != CUDNN_STATUS_SUCCESS)
    return refused;
  return suggested_algorithms(count, perf, room, 8, x->type);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                                  const cudnnTensorDescriptor_t xd, const void* x,
                                                  const cudnnFilterDescriptor_t wd, const void* w,
                                                  const cudnnConvolutionDescriptor_t conv,
                                                  cudnnConvolutionFwdAlgo_t algo, void*, size_t,
                                                  const void* beta,
                                                  const cudnnTensorDescriptor_t yd, void* y) {
  return convolution_call(handle, "cudnnConvolutionForward", {x, w, y}, alpha, beta, xd, wd, conv,
                          yd, *yd, y, int(algo),
                          [x, w, xt = xd->type, wt = wd->type](long xi, long wi, long yi) {
                            return std::pair{yi, load(x, xt, xi) * load(w, wt, wi)};
                          });
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wd, const void* w,
    const cudnnTensorDescriptor_t yd, const void* dy, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionBwdDataAlgo_t algo, void*, size_t, const void* beta,
    const cudnnTensorDescriptor_t xd, void* dx) {
  return convolution_call(handle, "cudnnConvolutionBackwardData", {w, dy, dx}, alpha, beta, xd, wd,
                          conv, yd, *xd, dx, int(algo),
                          [dy, w, yt = yd->type, wt = wd->type](long xi, long wi, long yi) {
                            return std::pair{xi, load(dy, yt, yi) * load(w, wt, wi)};
                          });
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
    const cudnnTensorDescriptor_t yd, const void* dy, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionBwdFilterAlgo_t algo, void*, size_t, const void* beta,
    const cudnnFilterDescriptor_t wd, void* dw) {
  return convolution_call(handle, "cudnnConvolutionBackwardFilter", {x, dy, dw}, alpha, beta, xd,
                          wd, conv, yd, as_tensor(*wd), dw, int(algo),
                          [x, dy, xt = xd->type, yt = yd->type](long xi, long wi, long yi) {
                            return std::pair{wi, load(x, xt, xi) * load(dy, yt, yi)};
                          });
}

}  // extern "C"
