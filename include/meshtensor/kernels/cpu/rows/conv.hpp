#pragma once
// Convolutions with few channels, vectorised along the last spatial dim instead of the channels
// (same contract as kernels/cpu/reference/conv.hpp). At 8 channels a vector of channels is half an
// AVX-512 register, and oneDNN's kernels run far from the FMA peak; a vector of 16 positions of
// one channel is full whatever the channel count. Each input plane is turned channel by channel
// once (planar_rows.hpp); a tile of 8 output channels times a few vectors of positions stays in
// registers while the taps and input channels stream past, each weight broadcast.
//   forward:          out[co][o..o+L)  += w[tap][ci][co] * x[ci][o+tap..)
//   input gradient:   the forward pass of the reversed convolution (taps flipped, channels swapped)
//   weight gradient:  w[tap][ci][co]   += sum over o of x[ci][o+tap] * grad_out[co][o], lane-wise
//                     sums over a block of rows, then summed across lanes into double (the
//                     first layer's, 1 -> 8: rows/form/one_channel_weight.hpp)
// Along the last dim the taps must have stride 1 (any dilation and origin); along the first two
// any ordinary taps. `takes` says which shapes these kernels can run, `fits_forward` etc. which
// passes they run in kernels::conv_forward etc. (where they beat oneDNN's).
//
// The kernels are compiled once per instruction set (rows/form/all.hpp, in namespaces rows::avx2,
// rows::avx512, rows::avx512_bf16) whatever flags built the program; each function below runs the
// form for the widest set the CPU has and the kernel policy allows (`instruction_set()`). Without
// AVX2 and FMA none runs: `available()` is false and the other CPU kernels take every shape.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/channel_affine.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/cpu/bf16_lanes.hpp"
#include "meshtensor/kernels/cpu/cache_size.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/instruction_set.hpp"
#include "meshtensor/kernels/cpu/vector_rate.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/memory/array.hpp"

#if MESHTENSOR_CPU_TARGETS
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace meshtensor::kernels::rows {

/// How a plane's rows are turned (rows/form/planar_rows.hpp): each channel's row `before` zeros in,
/// padded with zeros to `width`.
struct RowFormat {
  std::int64_t before = 0;  // zeros before box index 0
  std::int64_t width = 0;   // floats per channel row
};

inline std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

/// The instruction set whose form of the kernels runs on this processor: the widest compiled one
/// that the CPU has and the kernel policy allows (KernelPolicy::cpu_instructions).
inline cpu::InstructionSet instruction_set() {
  return cpu::form_within(cpu::usable_instruction_set(current_processor().settings().kernels));
}

/// Whether any form runs here (AVX2 and FMA at least).
inline bool available() { return instruction_set() != cpu::InstructionSet::baseline; }

/// Whether these kernels run the shapes they fit: yes unless the processor's kernel policy turns
/// them off (KernelPolicy::row_kernels, to compare with the kernels that would run instead).
inline bool enabled() { return current_processor().settings().kernels.row_kernels; }

/// A call of a pass, as far as its memory goes (workspace()): the pass, its element type, and the
/// channels of its input's parts (one part for a whole input).
struct WorkspaceCall {
  plan::ConvClass::Pass pass = plan::ConvClass::forward;
  bool bf16 = false;
  bool whole = true;
  std::vector<std::int64_t> input_parts;
};

/// How the forward pass writes its output: through the cache; around it (streamed stores, which
/// skip reading each line before it is written); or around it where the output is larger than the
/// last-level cache, which it would leave anyway (faster there).
enum class OutputStores { through_cache, around_cache, by_size };

inline bool writes_around_cache(const ConvGeometry& g, OutputStores stores,
                                std::int64_t value_bytes = sizeof(float)) {
  if (stores != OutputStores::by_size) return stores == OutputStores::around_cache;
  return conv_output_size(g) * value_bytes > last_level_cache_bytes();
}

/// How the bfloat16 passes below multiply: AVX512_BF16's dot products (two products a lane an
/// instruction, the operands never widened) or float multiply-adds on values widened as the
/// planes are turned (no float copy of a block either). By default the dot products where they
/// give more products a second (AMD's Zen 4 and 5: twice as many), else float (Intel's AVX-512
/// cores without AMX, whose dot product gives half as many; AVX2; under a fixed kernel policy
/// float); KernelPolicy::bf16_products (MESHTENSOR_BF16_PRODUCTS=dot|float) forces one.
enum class Bf16Products { dot, widened };

/// Whether the CPU has AVX512_BF16's dot products and the kernel policy allows them.
inline bool bf16_dot_products_available() {
  return instruction_set() == cpu::InstructionSet::avx512_bf16;
}

inline Bf16Products bf16_products() {
  const KernelPolicy& policy = current_processor().settings().kernels;
  const bool bf16_dot_products = bf16_dot_products_available();
  switch (policy.bf16_products) {
    case KernelPolicy::Bf16Products::widened:
      return Bf16Products::widened;
    case KernelPolicy::Bf16Products::dot:
      if (!bf16_dot_products)
        throw std::invalid_argument(
            "MESHTENSOR_BF16_PRODUCTS=dot: this CPU has no AVX512_BF16 (or MESHTENSOR_MAX_CPU_ISA "
            "leaves it out); expected auto or float");
      return Bf16Products::dot;
    case KernelPolicy::Bf16Products::chosen:
      break;
  }
  return bf16_dot_products && !policy.fixed() && bf16_dot_products_pay() ? Bf16Products::dot
                                                                         : Bf16Products::widened;
}

/// Orders the calling thread's streamed stores before its later ones (other threads may read them
/// after it).
inline void stream_fence() {
#if MESHTENSOR_CPU_TARGETS
  _mm_sfence();
#endif
}

}  // namespace meshtensor::kernels::rows

#define MESHTENSOR_TARGET_BODY "meshtensor/kernels/cpu/rows/form/all.hpp"
#include "meshtensor/kernels/cpu/for_each_form.hpp"

namespace meshtensor::kernels::rows {

namespace detail {
[[noreturn]] inline void no_form() {
  throw std::logic_error("internal: a row kernel called where no form of them runs (no AVX2)");
}
}  // namespace detail

// Each function below: the same function of the form `instruction_set()` names
// (rows/form/passes.hpp and the files rows/form/all.hpp lists say what each does).

inline bool takes([[maybe_unused]] const ConvGeometry& g, [[maybe_unused]] std::int64_t few = 8) {
  MESHTENSOR_ON_TARGET(instruction_set(), takes(g, few));
  return false;
}
inline bool fits_forward([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_forward(g));
  return false;
}
inline bool fits_backward_input([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_backward_input(g));
  return false;
}
inline bool fits_backward_weight([[maybe_unused]] const ConvGeometry& g,
                                 [[maybe_unused]] std::int64_t few = 8) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_backward_weight(g, few));
  return false;
}
inline bool fits_forward_bf16(const ConvGeometry& g) { return fits_forward(g); }
inline bool fits_backward_input_bf16(const ConvGeometry& g) { return fits_backward_input(g); }
inline bool fits_backward_weight_bf16([[maybe_unused]] const ConvGeometry& g,
                                      [[maybe_unused]] Bf16Products products = bf16_products()) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_backward_weight_bf16(g, products));
  return false;
}
inline bool fits_one_channel_forward([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_one_channel_forward(g));
  return false;
}
inline bool fits_one_channel_forward_bf16([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_one_channel_forward_bf16(g));
  return false;
}
inline bool fits_one_channel_weight([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_one_channel_weight(g));
  return false;
}
inline bool fits_channel_lanes_weight([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), fits_channel_lanes_weight(g));
  return false;
}
inline bool runs_channel_lanes_weight([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), runs_channel_lanes_weight(g));
  return false;
}
inline bool forward_reads_planes([[maybe_unused]] const ConvGeometry& g) {
  MESHTENSOR_ON_TARGET(instruction_set(), forward_reads_planes(g));
  return false;
}
template <class T>
bool takes_output_parts([[maybe_unused]] const ChannelParts<T>& parts) {
  MESHTENSOR_ON_TARGET(instruction_set(), takes_output_parts(parts));
  return false;
}

inline void conv_forward([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const ChannelParts<const float>& input,
                         [[maybe_unused]] const float* weight,
                         [[maybe_unused]] const ChannelParts<float>& output,
                         [[maybe_unused]] OutputStores stores = OutputStores::by_size) {
  MESHTENSOR_ON_TARGET(instruction_set(), conv_forward(g, input, weight, output, stores));
  detail::no_form();
}
inline void conv_forward([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const float* input, [[maybe_unused]] const float* weight,
                         [[maybe_unused]] float* output,
                         [[maybe_unused]] OutputStores stores = OutputStores::by_size) {
  MESHTENSOR_ON_TARGET(instruction_set(), conv_forward(g, input, weight, output, stores));
  detail::no_form();
}
inline void conv_forward([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const ChannelParts<const bfloat16>& input,
                         [[maybe_unused]] const bfloat16* weight,
                         [[maybe_unused]] const ChannelParts<bfloat16>& output,
                         [[maybe_unused]] OutputStores stores = OutputStores::by_size,
                         [[maybe_unused]] Bf16Products products = bf16_products()) {
  MESHTENSOR_ON_TARGET(instruction_set(), conv_forward(g, input, weight, output, stores, products));
  detail::no_form();
}
inline void conv_forward([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const bfloat16* input,
                         [[maybe_unused]] const bfloat16* weight, [[maybe_unused]] bfloat16* output,
                         [[maybe_unused]] OutputStores stores = OutputStores::by_size,
                         [[maybe_unused]] Bf16Products products = bf16_products()) {
  MESHTENSOR_ON_TARGET(instruction_set(), conv_forward(g, input, weight, output, stores, products));
  detail::no_form();
}
template <class T>
void conv_forward_one_channel([[maybe_unused]] const ConvGeometry& g,
                              [[maybe_unused]] const T* input, [[maybe_unused]] const T* weight,
                              [[maybe_unused]] T* output, [[maybe_unused]] bool around_cache) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       conv_forward_one_channel(g, input, weight, output, around_cache));
  detail::no_form();
}

template <class T, class GradInput>
void conv_backward_input([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const T* grad_output, [[maybe_unused]] const T* weight,
                         [[maybe_unused]] GradInput grad_input,
                         [[maybe_unused]] OutputStores stores = OutputStores::by_size) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       conv_backward_input(g, grad_output, weight, grad_input, stores));
  detail::no_form();
}
template <class GradInput>
void conv_backward_input([[maybe_unused]] const ConvGeometry& g,
                         [[maybe_unused]] const bfloat16* grad_output,
                         [[maybe_unused]] const bfloat16* weight,
                         [[maybe_unused]] GradInput grad_input,
                         [[maybe_unused]] OutputStores stores,
                         [[maybe_unused]] Bf16Products products) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       conv_backward_input(g, grad_output, weight, grad_input, stores, products));
  detail::no_form();
}

template <class Input, class T>
void conv_backward_weight([[maybe_unused]] const ConvGeometry& g,
                          [[maybe_unused]] const Input& input,
                          [[maybe_unused]] const T* grad_output,
                          [[maybe_unused]] double* grad_weight) {
  MESHTENSOR_ON_TARGET(instruction_set(), conv_backward_weight(g, input, grad_output, grad_weight));
  detail::no_form();
}
template <class Input>
void conv_backward_weight([[maybe_unused]] const ConvGeometry& g,
                          [[maybe_unused]] const Input& input,
                          [[maybe_unused]] const bfloat16* grad_output,
                          [[maybe_unused]] double* grad_weight,
                          [[maybe_unused]] Bf16Products products) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       conv_backward_weight(g, input, grad_output, grad_weight, products));
  detail::no_form();
}
inline void conv_backward_weight_one_channel([[maybe_unused]] const ConvGeometry& g,
                                             [[maybe_unused]] const float* input,
                                             [[maybe_unused]] const float* grad_output,
                                             [[maybe_unused]] double* grad_weight) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       conv_backward_weight_one_channel(g, input, grad_output, grad_weight));
  detail::no_form();
}

/// The blocks (bytes each) that `call` of `g` holds at once from the calling processor's memory
/// (rows/form/workspace.hpp), for a call these kernels run.
inline std::vector<std::size_t> workspace([[maybe_unused]] const ConvGeometry& g,
                                          [[maybe_unused]] const WorkspaceCall& call) {
  MESHTENSOR_ON_TARGET(instruction_set(), workspace(g, call));
  return {};
}

/// The plane [n1][n2][c] at `in` turned channel by channel (rows/form/planar_rows.hpp).
template <class From, class To>
void to_planar([[maybe_unused]] const From* in, [[maybe_unused]] std::int64_t n1,
               [[maybe_unused]] std::int64_t n2, [[maybe_unused]] std::int64_t c,
               [[maybe_unused]] const RowFormat& format, [[maybe_unused]] To* out,
               [[maybe_unused]] std::int64_t row_stride = 0,
               [[maybe_unused]] const ChannelAffine* affine = nullptr) {
  MESHTENSOR_ON_TARGET(instruction_set(),
                       to_planar(in, n1, n2, c, format, out, row_stride, affine));
  detail::no_form();
}

/// Runs only in the AVX512_BF16 form (its dot products).
inline void channel_lanes_backward_weight(const ConvGeometry& g,
                                          const ChannelParts<const bfloat16>& input,
                                          const bfloat16* grad_output, double* grad_weight,
                                          std::int64_t band) {
#if MESHTENSOR_FORM_COMPILED(3)
  if (instruction_set() == cpu::InstructionSet::avx512_bf16)
    return avx512_bf16::channel_lanes_backward_weight(g, input, grad_output, grad_weight, band);
#endif
  (void)g, (void)input, (void)grad_output, (void)grad_weight, (void)band;
  throw std::logic_error("internal: the channel-lanes weight gradient needs AVX512_BF16");
}

}  // namespace meshtensor::kernels::rows
