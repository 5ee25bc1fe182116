#pragma once
// GELU forward and backward on the CPU in vector form: libm's erfcf and expf run one value at a
// time, which made GELU a tenth of a transformer's step. Compiled once per instruction set
// (cpu/form/gelu.hpp) and chosen at run time as the row kernels are; where no form runs
// (no AVX2, or MESHTENSOR_MAX_CPU_ISA=baseline) the element-wise loop computes the formula.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"
#include "meshtensor/kernels/cpu/loops.hpp"
#include "meshtensor/kernels/cpu/vector_math.hpp"
#if MESHTENSOR_CPU_TARGETS
#include <immintrin.h>
#endif

#define MESHTENSOR_TARGET_BODY "meshtensor/kernels/cpu/form/gelu.hpp"
#include "meshtensor/kernels/cpu/for_each_form.hpp"

namespace meshtensor::kernels::cpu::activation {

namespace detail {
inline InstructionSet form() {
  return form_within(usable_instruction_set(current_processor().settings().kernels));
}
inline bool gelu_part([[maybe_unused]] InstructionSet set, [[maybe_unused]] const float* g,
                      [[maybe_unused]] const float* x, [[maybe_unused]] float* out,
                      [[maybe_unused]] std::int64_t n) {
  if (g) {
    MESHTENSOR_ON_TARGET(set, gelu_times_derivative(g, x, out, n));
  } else {
    MESHTENSOR_ON_TARGET(set, gelu(x, out, n));
  }
  return false;
}
// A GELU costs about as much as copying this many floats.
constexpr std::int64_t gelu_work = 16;

// GELU (with g: its gradient) on the compute threads; false where no vector form runs.
inline bool gelu_on_threads(const float* g, const float* x, float* out, std::int64_t n) {
  const InstructionSet set = form();
  if (set == InstructionSet::baseline) return false;
  parallel_for_ranges(
      n, compute_threads(),
      [&](std::int64_t begin, std::int64_t end) {
        gelu_part(set, g ? g + begin : nullptr, x + begin, out + begin, end - begin);
      },
      g ? 2 * gelu_work : gelu_work);
  return true;
}
}  // namespace detail

/// out[i] = gelu(x[i]) for i < n, on the processor's compute threads; false (nothing done) where
/// no vector form runs.
inline bool gelu(const float* x, float* out, std::int64_t n) {
  return detail::gelu_on_threads(nullptr, x, out, n);
}

/// out[i] = g[i] gelu'(x[i]) for i < n: GELU's gradient; false (nothing done) where no vector
/// form runs.
inline bool gelu_times_derivative(const float* g, const float* x, float* out, std::int64_t n) {
  return detail::gelu_on_threads(g, x, out, n);
}

}  // namespace meshtensor::kernels::cpu::activation
