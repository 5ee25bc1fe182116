#pragma once
// Where the optimisers' updates run: on the GPU when the processor computes on one and its blocks
// are there (kernels/gpu/optimizer.hpp, with the GPU backend), else on the CPU. Each function
// returns false when it did not run; the optimiser then runs the same formula in its CPU loop.

#include <cstdint>

#include "meshtensor/kernels/host_access.hpp"
#include "meshtensor/kernels/optimizer_formulas.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/gpu/optimizer.hpp"
#endif

namespace meshtensor::kernels {

template <class T>
bool sgd_on_gpu([[maybe_unused]] const shared::SgdStep& h, [[maybe_unused]] T* parameter,
                [[maybe_unused]] T* velocity, [[maybe_unused]] const T* gradient,
                [[maybe_unused]] std::int64_t n) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::sgd(h, parameter, velocity, gradient, n));
#else
  return false;
#endif
}

template <class T>
bool adam_on_gpu([[maybe_unused]] const shared::AdamStep& h, [[maybe_unused]] T* parameter,
                 [[maybe_unused]] T* first, [[maybe_unused]] T* second,
                 [[maybe_unused]] const T* gradient, [[maybe_unused]] std::int64_t n) {
#if defined(MESHTENSOR_WITH_CUDA)
  return ran_or_waited(gpu::adam(h, parameter, first, second, gradient, n));
#else
  return false;
#endif
}

}  // namespace meshtensor::kernels
