#pragma once
// The resampling family: each output position along one dim of a block is the weighted sum of up
// to two positions of the source box (nearest and linear upsampling, padding, cropping), and the
// adjoint. The CPU runs the reference loops, a GPU its kernels (kernels/cuda/resample.hpp); a plan
// counts a multiply-add per tap.

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/resample_taps.hpp"
#include "meshtensor/kernels/cpu/reference/resample.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/resample.hpp"
#endif

namespace meshtensor::kernels {

namespace detail {
inline double resample_flops(const ResampleTaps& taps) {
  return 4.0 * double(taps.outer) * double(taps.outputs()) * double(taps.inner);
}
}  // namespace detail

/// out = each output's taps into `box`, weighted and added.
template <class T>
void resample(const ResampleTaps& taps, const T* box, T* out) {
  dispatch([&] { plan::count(plan::Family::resample, detail::resample_flops(taps)); },
           MESHTENSOR_ON_GPU(gpu::resample(taps, box, out)),
           [&] { reference::resample(taps, box, out); });
}

/// grad_box = the adjoint of resample applied to g.
template <class T>
void resample_adjoint(const ResampleTaps& taps, const T* g, T* grad_box) {
  dispatch([&] { plan::count(plan::Family::resample, detail::resample_flops(taps)); },
           MESHTENSOR_ON_GPU(gpu::resample_adjoint(taps, g, grad_box)),
           [&] { reference::resample_adjoint(taps, g, grad_box); });
}

}  // namespace meshtensor::kernels
