#pragma once
// The resampling family: each output position along one dim of a block is the weighted sum of up
// to two positions of the source box (nearest and linear upsampling, padding, cropping), and the
// adjoint. The CPU runs the reference loops, a GPU its kernels (kernels/cuda/resample.hpp); a plan
// counts a multiply-add per tap. Also up-sampling by windows that tile the output, position by
// listed position (a transposed convolution with kernel = stride, on pieces of a block).

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/resample_taps.hpp"
#include "meshtensor/kernels/common/tile_up_sampling.hpp"
#include "meshtensor/kernels/cpu/reference/resample.hpp"
#include "meshtensor/kernels/cpu/tile_up_sampling.hpp"
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

/// out at each listed position = its input channels through its tap's weights, rounded to T, and
/// `bias` (null: none) added; `bias` is float (double for double blocks).
template <class T, class B>
void up_sample_tiles(const TileUpSampling& u, const T* input, const T* weight, const B* bias,
                     T* out) {
  dispatch(
      [&] { plan::count(plan::Family::resample, 2.0 * double(u.positions() * u.c_in * u.c_out)); },
      MESHTENSOR_ON_GPU(gpu::up_sample_tiles(u, input, weight, bias, out)),
      [&] { cpu::up_sample_tiles(u, input, weight, bias, out); });
}

}  // namespace meshtensor::kernels
