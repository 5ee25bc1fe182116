#pragma once
// Which x86 instructions meshtensor's hand-written CPU kernels use, chosen at run time: those
// kernels are compiled once per instruction set below (cpu/for_each_form.hpp) whatever flags built
// the program, and each call runs the widest form the CPU has and the kernel policy allows. So one
// binary runs its fastest kernels on every x86-64 CPU and none that would stop it (SIGILL).

#include <algorithm>
#include <string>

#include "meshtensor/core/settings.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MESHTENSOR_CPU_TARGETS 1
#else
#define MESHTENSOR_CPU_TARGETS 0
#endif

// The set the program's own flags give (0 baseline, 1 avx2, 2 avx512, 3 avx512_bf16). Forms for
// narrower sets are not compiled: the rest of the program could not run where they would. With
// MESHTENSOR_NATIVE_CPU_ONLY (a program built for the building machine, -march=native: this
// tree's), only the build's own form is.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512BF16__)
#define MESHTENSOR_BUILD_CPU_LEVEL 3
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__)
#define MESHTENSOR_BUILD_CPU_LEVEL 2
#elif defined(__AVX2__) && defined(__FMA__)
#define MESHTENSOR_BUILD_CPU_LEVEL 1
#else
#define MESHTENSOR_BUILD_CPU_LEVEL 0
#endif
#if defined(MESHTENSOR_NATIVE_CPU_ONLY) && MESHTENSOR_NATIVE_CPU_ONLY
#define MESHTENSOR_FORM_COMPILED(level) \
  (MESHTENSOR_CPU_TARGETS && (level) == MESHTENSOR_BUILD_CPU_LEVEL)
#else
#define MESHTENSOR_FORM_COMPILED(level) \
  (MESHTENSOR_CPU_TARGETS && (level) >= MESHTENSOR_BUILD_CPU_LEVEL)
#endif

// The instructions each form is compiled with, and the pragmas that compile every function
// defined between MESHTENSOR_FORM_BEGIN(instructions) and MESHTENSOR_FORM_END with them.
#define MESHTENSOR_AVX2_INSTRUCTIONS "avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"
#define MESHTENSOR_AVX512_INSTRUCTIONS \
  "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"
#define MESHTENSOR_AVX512_BF16_INSTRUCTIONS \
  "avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"
// Whether the loops written for AVX-512 alone are compiled: where either AVX-512 form is (with
// clang, whose pragma does not reach the lambdas they use, where the program's flags have it).
#if defined(__clang__)
#define MESHTENSOR_AVX512_COMPILED (MESHTENSOR_BUILD_CPU_LEVEL >= 2)
#else
#define MESHTENSOR_AVX512_COMPILED (MESHTENSOR_FORM_COMPILED(2) || MESHTENSOR_FORM_COMPILED(3))
#endif
#define MESHTENSOR_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define MESHTENSOR_FORM_BEGIN(instructions) \
  MESHTENSOR_PRAGMA(                        \
      clang attribute push(__attribute__((target(instructions))), apply_to = function))
#define MESHTENSOR_FORM_END MESHTENSOR_PRAGMA(clang attribute pop)
#else
#define MESHTENSOR_FORM_BEGIN(instructions) \
  MESHTENSOR_PRAGMA(GCC push_options) MESHTENSOR_PRAGMA(GCC target(instructions))
#define MESHTENSOR_FORM_END MESHTENSOR_PRAGMA(GCC pop_options)
#endif

namespace meshtensor::kernels::cpu {

/// Each takes the ones before it: AVX2 with FMA; AVX-512 F, BW, VL and DQ; AVX512_BF16 too.
enum class InstructionSet { baseline, avx2, avx512, avx512_bf16 };

inline std::string name_of(InstructionSet set) {
  switch (set) {
    case InstructionSet::avx2:
      return "avx2";
    case InstructionSet::avx512:
      return "avx512";
    case InstructionSet::avx512_bf16:
      return "avx512_bf16";
    case InstructionSet::baseline:
      break;
  }
  return "baseline";
}

/// The widest set the CPU (and its operating system, which must save the registers) has; read
/// once.
inline InstructionSet cpu_instruction_set() {
#if MESHTENSOR_CPU_TARGETS
  static const InstructionSet best = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
      return InstructionSet::baseline;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
      return InstructionSet::avx2;
    return __builtin_cpu_supports("avx512bf16") ? InstructionSet::avx512_bf16
                                                : InstructionSet::avx512;
  }();
  return best;
#else
  return InstructionSet::baseline;
#endif
}

/// The widest set the kernels may use under `policy`: the CPU's, capped by
/// KernelPolicy::cpu_instructions (MESHTENSOR_MAX_CPU_ISA).
inline InstructionSet usable_instruction_set(const KernelPolicy& policy) {
  using Cap = KernelPolicy::CpuInstructions;
  InstructionSet cap = InstructionSet::avx512_bf16;
  switch (policy.cpu_instructions) {
    case Cap::chosen:
    case Cap::avx512_bf16:
      break;
    case Cap::avx512:
      cap = InstructionSet::avx512;
      break;
    case Cap::avx2:
      cap = InstructionSet::avx2;
      break;
    case Cap::baseline:
      cap = InstructionSet::baseline;
      break;
  }
  return std::min(cpu_instruction_set(), cap);
}

/// Whether kernels compiled per instruction set have a form for `set` in this program.
constexpr bool form_compiled(InstructionSet set) {
  switch (set) {
    case InstructionSet::avx2:
      return MESHTENSOR_FORM_COMPILED(1);
    case InstructionSet::avx512:
      return MESHTENSOR_FORM_COMPILED(2);
    case InstructionSet::avx512_bf16:
      return MESHTENSOR_FORM_COMPILED(3);
    case InstructionSet::baseline:
      break;
  }
  return false;
}

/// The form to run where `usable` is the widest set allowed: the widest compiled form within it.
inline InstructionSet form_within(InstructionSet usable) {
  for (InstructionSet set :
       {InstructionSet::avx512_bf16, InstructionSet::avx512, InstructionSet::avx2})
    if (set <= usable && form_compiled(set)) return set;
  return InstructionSet::baseline;
}

/// Whether the loops written for AVX-512 alone (pooling, the normalisations' gradient sums, the
/// loss's tiles, conversions; compiled where MESHTENSOR_AVX512_COMPILED) run on this CPU.
inline bool avx512_loops_run() {
  return MESHTENSOR_AVX512_COMPILED && cpu_instruction_set() >= InstructionSet::avx512;
}

}  // namespace meshtensor::kernels::cpu

/// In a function of a kernel family compiled per instruction set (cpu/for_each_form.hpp), as one
/// statement: returns `call` (a name in the family's namespace and its arguments) made in the
/// namespace of form_within(set); where no form is compiled within `set`, goes on to the
/// statements after it.
#if MESHTENSOR_FORM_COMPILED(3)
#define MESHTENSOR_CASE_AVX512_BF16(call)                       \
  case ::meshtensor::kernels::cpu::InstructionSet::avx512_bf16: \
    return avx512_bf16::call;
#else
#define MESHTENSOR_CASE_AVX512_BF16(call)
#endif
#if MESHTENSOR_FORM_COMPILED(2)
#define MESHTENSOR_CASE_AVX512(call)                       \
  case ::meshtensor::kernels::cpu::InstructionSet::avx512: \
    return avx512::call;
#else
#define MESHTENSOR_CASE_AVX512(call)
#endif
#if MESHTENSOR_FORM_COMPILED(1)
#define MESHTENSOR_CASE_AVX2(call)                       \
  case ::meshtensor::kernels::cpu::InstructionSet::avx2: \
    return avx2::call;
#else
#define MESHTENSOR_CASE_AVX2(call)
#endif
#define MESHTENSOR_ON_TARGET(set, call)                   \
  switch (::meshtensor::kernels::cpu::form_within(set)) { \
    MESHTENSOR_CASE_AVX512_BF16(call)                     \
    MESHTENSOR_CASE_AVX512(call)                          \
    MESHTENSOR_CASE_AVX2(call)                            \
    default:                                              \
      break;                                              \
  }
