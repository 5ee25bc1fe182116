#pragma once
// The optimiser family: one SGD or Adam update of a parameter block from its gradient, with the
// optimiser's state beside it, by the same formulas on every backend
// (kernels/common/optimizer_formulas.hpp), on the processor's compute threads. The step's values
// (learning rate, Adam's step count and bias corrections) lie in the processor's memory too, so
// that a step captured as a graph reads and counts them at every launch. A plan counts the
// operations per element.

#include <cmath>
#include <cstdint>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/optimizer_formulas.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/optimizer.hpp"
#endif

namespace meshtensor::kernels {

// Operations per element of an update, as a plan counts them; the CPU also pays threads by them
// (Adam's square root and divisions in double: one thread ran a U-Net's small parameters alone).
inline constexpr std::int64_t sgd_work = 4, adam_work = 12;

/// Whether a step guarded by `guard` (a scalar in the processor's memory; null: none) is skipped:
/// where it is not finite (a bad loss or gradient). A GPU decides it there, unread by the host.
template <class T>
bool guard_skips(const T* guard) {
  return guard && !std::isfinite(double(*guard));
}

/// parameter, velocity <- SGD with momentum and weight decay, for n elements, unless `guard`
/// skips the step. `h` lies in the processor's memory, where the kernels read it.
template <class T>
void sgd(const shared::SgdStep* h, T* parameter, T* velocity, const T* gradient, std::int64_t n,
         const T* guard = nullptr) {
  dispatch([&] { plan::count(plan::Family::optimizer, double(sgd_work) * double(n)); },
           MESHTENSOR_ON_GPU(gpu::sgd(h, parameter, velocity, gradient, n, guard)),
           [&] {
             if (guard_skips(guard)) return;
             parallel_for_ranges(
                 n, compute_threads(),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t i = begin; i < end; ++i)
                     shared::sgd_update(*h, parameter[i], velocity[i], gradient[i]);
                 },
                 sgd_work);
           });
}

/// Counts one more Adam step in `h` (its bias corrections), unless `guard` skips the step.
template <class T>
void adam_advance(shared::AdamStep* h, const T* guard = nullptr) {
  dispatch([] { plan::count(plan::Family::optimizer, 4.0); },
           MESHTENSOR_ON_GPU(gpu::adam_advance(h, guard)),
           [&] {
             if (!guard_skips(guard)) shared::adam_advance(*h);
           });
}

/// parameter, first, second <- Adam (AdamW when h->decoupled), for n elements, unless `guard`
/// skips the step. `h` lies in the processor's memory, where the kernels read it.
template <class T>
void adam(const shared::AdamStep* h, T* parameter, T* first, T* second, const T* gradient,
          std::int64_t n, const T* guard = nullptr) {
  dispatch([&] { plan::count(plan::Family::optimizer, double(adam_work) * double(n)); },
           MESHTENSOR_ON_GPU(gpu::adam(h, parameter, first, second, gradient, n, guard)),
           [&] {
             if (guard_skips(guard)) return;
             parallel_for_ranges(
                 n, compute_threads(),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t i = begin; i < end; ++i)
                     shared::adam_update(*h, parameter[i], first[i], second[i], gradient[i]);
                 },
                 adam_work);
           });
}

}  // namespace meshtensor::kernels
