#pragma once
// The normalisation family: the passes of batch, instance and group norm over a block. The block
// is row-major; each element belongs to one statistic, its key, whose index steps by
// key_strides[d] along dim d (0 along a reduced dim). Per-key constants are in double, one per
// key, rounded to T where they are used. The CPU (kernels/cpu/norm.hpp) and the GPU
// (kernels/cuda/norm.hpp) compute the same formulas (kernels/common/norm_formulas.hpp); a plan
// counts the operations per element.

#include <cstdint>
#include <vector>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/channel_affine.hpp"
#include "meshtensor/kernels/common/norm_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/norm.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/norm.hpp"
#endif

namespace meshtensor::kernels {

/// The count, mean and sum of squared deviations of each of `keys` keys' elements.
template <class T>
std::vector<shared::PartialMoments> norm_moments(const Sizes& sizes, const Strides& key_strides,
                                                 std::int64_t keys, const T* x) {
  std::vector<shared::PartialMoments> out(static_cast<std::size_t>(keys));
  dispatch([&] { plan::count(plan::Family::norm, 3.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(gpu::norm_moments(sizes, key_strides, keys, x, &out)),
           [&] { out = cpu::norm_moments(sizes, key_strides, keys, x); });
  return out;
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element.
template <class T>
void norm_affine(const Sizes& sizes, const Strides& key_strides, const T* x,
                 const std::vector<double>& scale, const std::vector<double>& shift, T floor,
                 T* out) {
  dispatch([&] { plan::count(plan::Family::norm, 3.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(gpu::norm_affine(sizes, key_strides, x, scale, shift, floor, out)),
           [&] { cpu::norm_affine(sizes, key_strides, x, scale, shift, floor, out); });
}

/// `positions` channels-last positions of x (f.channels() each) through the per-channel map `f`
/// into out: the values batch norm writes, for a kernel that cannot compute them as it reads.
template <class T>
void norm_affine(const ChannelAffine& f, std::int64_t positions, const T* x, T* out) {
  norm_affine(Sizes{positions, f.channels()}, Strides{0, 1}, x, f.scale, f.shift, T(f.floor), out);
}

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`;
/// interleaved, two per key.
template <class T>
std::vector<double> norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, const T* g,
                                       const T* v, const std::vector<double>& scale,
                                       const std::vector<double>& shift, const ReluMask<T>& mask) {
  std::vector<double> sums(2 * scale.size());
  dispatch([&] { plan::count(plan::Family::norm, 6.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(
               gpu::norm_gradient_sums(sizes, key_strides, g, v, scale, shift, mask, &sums)),
           [&] { sums = cpu::norm_gradient_sums(sizes, key_strides, g, v, scale, shift, mask); });
  return sums;
}

/// dx = affine_input_gradient(p[key], g', q[key], v, r[key]), g' being g masked by `mask`.
template <class T>
void norm_input_gradient(const Sizes& sizes, const Strides& key_strides, const T* g, const T* v,
                         const ReluMask<T>& mask, const std::vector<double>& p,
                         const std::vector<double>& q, const std::vector<double>& r, T* dx) {
  dispatch([&] { plan::count(plan::Family::norm, 7.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(gpu::norm_input_gradient(sizes, key_strides, g, v, mask, p, q, r, dx)),
           [&] { cpu::norm_input_gradient(sizes, key_strides, g, v, mask, p, q, r, dx); });
}

}  // namespace meshtensor::kernels
