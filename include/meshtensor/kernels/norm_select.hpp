#pragma once
// Where the normalisations' passes over a block run: on the GPU when the processor computes on one
// and its blocks are there (kernels/gpu/norm.hpp, with the GPU backend). Each function returns
// false when it did not run; ops/norm.hpp then runs its CPU loops, on the same formulas
// (kernels/norm_formulas.hpp).
//
// The block is row-major; each element belongs to one statistic, its key, whose index steps by
// key_strides[d] along dim d (0 along a reduced dim). Per-key constants are in double, one per
// key, rounded to T where they are used, as the CPU loops round them.

#include <cstdint>
#include <vector>

#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/norm_formulas.hpp"
#include "meshtensor/kernels/reference/strided.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/norm.hpp"
#endif

namespace meshtensor::kernels {

/// The count, mean and sum of squared deviations of each of `keys` keys' elements.
template <class T>
bool norm_moments_on_gpu([[maybe_unused]] const Sizes& sizes,
                         [[maybe_unused]] const Strides& key_strides,
                         [[maybe_unused]] std::int64_t keys, [[maybe_unused]] const T* x,
                         [[maybe_unused]] std::vector<shared::PartialMoments>* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::norm_moments(sizes, key_strides, keys, x, out));
#else
  return false;
#endif
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element.
template <class T>
bool norm_affine_on_gpu([[maybe_unused]] const Sizes& sizes,
                        [[maybe_unused]] const Strides& key_strides, [[maybe_unused]] const T* x,
                        [[maybe_unused]] const std::vector<double>& scale,
                        [[maybe_unused]] const std::vector<double>& shift, [[maybe_unused]] T floor,
                        [[maybe_unused]] T* out) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::norm_affine(sizes, key_strides, x, scale, shift, floor, out));
#else
  return false;
#endif
}

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`;
/// interleaved, two per key.
template <class T>
bool norm_gradient_sums_on_gpu([[maybe_unused]] const Sizes& sizes,
                               [[maybe_unused]] const Strides& key_strides,
                               [[maybe_unused]] const T* g, [[maybe_unused]] const T* v,
                               [[maybe_unused]] const std::vector<double>& scale,
                               [[maybe_unused]] const std::vector<double>& shift,
                               [[maybe_unused]] const ReluMask<T>& mask,
                               [[maybe_unused]] std::vector<double>* sums) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::norm_gradient_sums(sizes, key_strides, g, v, scale, shift, mask, sums));
#else
  return false;
#endif
}

/// dx = affine_input_gradient(p[key], g', q[key], v, r[key]), g' being g masked by `mask`.
template <class T>
bool norm_input_gradient_on_gpu([[maybe_unused]] const Sizes& sizes,
                                [[maybe_unused]] const Strides& key_strides,
                                [[maybe_unused]] const T* g, [[maybe_unused]] const T* v,
                                [[maybe_unused]] const ReluMask<T>& mask,
                                [[maybe_unused]] const std::vector<double>& p,
                                [[maybe_unused]] const std::vector<double>& q,
                                [[maybe_unused]] const std::vector<double>& r,
                                [[maybe_unused]] T* dx) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::norm_input_gradient(sizes, key_strides, g, v, mask, p, q, r, dx));
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
