#pragma once
// Which convolution kernels the ops use. On the CPU, chosen at compile time: oneDNN when the
// program links meshtensor::onednn (MESHTENSOR_WITH_ONEDNN), else the register-blocked ones; the
// plain reference loops with MESHTENSOR_REFERENCE_KERNELS (for cross-checks). With the GPU backend
// (MESHTENSOR_WITH_CUDA), a processor that computes on a GPU runs cuDNN's, falling back to the CPU
// kernel for what cuDNN cannot run.

#include <type_traits>

#include "meshtensor/kernels/blocked/conv.hpp"
#include "meshtensor/kernels/reference/conv.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/onednn/conv.hpp"
#endif
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cudnn/conv.hpp"
#include "meshtensor/kernels/host_access.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_REFERENCE_KERNELS)
namespace cpu_conv_impl {
using kernels::conv_backward_input;
using kernels::conv_backward_weight;
using kernels::conv_forward;
}  // namespace cpu_conv_impl
#elif defined(MESHTENSOR_WITH_ONEDNN)
namespace cpu_conv_impl = onednn;
#else
namespace cpu_conv_impl = blocked;
#endif

#if defined(MESHTENSOR_WITH_CUDA)
namespace conv_impl {
template <class T>
void conv_forward(const ConvGeometry& g, const T* input, const T* weight, T* output) {
  if constexpr (std::is_same_v<T, float>)
    if (cudnn::conv_forward(g, input, weight, output)) return;
  wait_for_gpu();
  cpu_conv_impl::conv_forward(g, input, weight, output);
}
template <class T>
void conv_backward_input(const ConvGeometry& g, const T* grad_output, const T* weight,
                         T* grad_input) {
  if constexpr (std::is_same_v<T, float>)
    if (cudnn::conv_backward_input(g, grad_output, weight, grad_input)) return;
  wait_for_gpu();
  cpu_conv_impl::conv_backward_input(g, grad_output, weight, grad_input);
}
template <class T>
void conv_backward_weight(const ConvGeometry& g, const T* input, const T* grad_output,
                          double* grad_weight) {
  if constexpr (std::is_same_v<T, float>)
    if (cudnn::conv_backward_weight(g, input, grad_output, grad_weight)) return;
  wait_for_gpu();
  cpu_conv_impl::conv_backward_weight(g, input, grad_output, grad_weight);
}
}  // namespace conv_impl
#else
namespace conv_impl = cpu_conv_impl;
#endif
}  // namespace meshtensor::kernels
