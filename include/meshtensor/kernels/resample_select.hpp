#pragma once
// Where resampling one dim runs: on the GPU when the processor computes on one and its blocks are
// there (kernels/gpu/resample.hpp, with the GPU backend); otherwise the reference loops
// (kernels/reference/resample.hpp) on the CPU.

#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/reference/resample.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/resample.hpp"
#endif

namespace meshtensor::kernels::resample_impl {

/// out = each output's taps into `box`, weighted and added.
template <class T>
void resample(const ResampleTaps& taps, const T* box, T* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  if (gpu::resample(taps, box, out)) return;
#endif
  wait_for_gpu();
  kernels::resample(taps, box, out);
}

/// grad_box = the adjoint of resample applied to g.
template <class T>
void resample_adjoint(const ResampleTaps& taps, const T* g, T* grad_box) {
#if defined(MESHTENSOR_WITH_CUDA)
  if (gpu::resample_adjoint(taps, g, grad_box)) return;
#endif
  wait_for_gpu();
  kernels::resample_adjoint(taps, g, grad_box);
}

}  // namespace meshtensor::kernels::resample_impl
