// No include guard: included once per kernel family, after defining MESHTENSOR_TARGET_BODY.
//
// Includes the header MESHTENSOR_TARGET_BODY names once per instruction set of InstructionSet
// (cpu/instruction_set.hpp) that the program compiles a form for (form_compiled), each time with
// every function it defines compiled for that set and with these macros defined:
//   MESHTENSOR_TARGET               the namespace to define them in: avx2, avx512, avx512_bf16
//   MESHTENSOR_TARGET_AVX2          1 in each (AVX2 and FMA)
//   MESHTENSOR_TARGET_AVX512        1 with AVX-512 F, BW, VL and DQ
//   MESHTENSOR_TARGET_AVX512_BF16   1 with AVX512_BF16 too
// (the compiler's own __AVX2__ and the like describe the program's flags, not these functions).
// The body includes nothing itself: what it needs is included before this file.

#if MESHTENSOR_CPU_TARGETS

// A multiply and an add fuse into one rounding here only where the program's own code may fuse
// them too (its flags give FMA): so a normalisation computed by the vector kernels rounds as the
// one the program's loops compute.
#if !defined(__FMA__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#define MESHTENSOR_TARGETS_CONTRACT_OFF 1
#endif

#define MESHTENSOR_TARGET_AVX2 1
#define MESHTENSOR_TARGET_AVX512 0
#define MESHTENSOR_TARGET_AVX512_BF16 0
#if MESHTENSOR_FORM_COMPILED(1)
#define MESHTENSOR_TARGET avx2
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX2_INSTRUCTIONS)
#include MESHTENSOR_TARGET_BODY
MESHTENSOR_FORM_END
#undef MESHTENSOR_TARGET
#endif

#undef MESHTENSOR_TARGET_AVX512
#define MESHTENSOR_TARGET_AVX512 1
#if MESHTENSOR_FORM_COMPILED(2)
#define MESHTENSOR_TARGET avx512
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_INSTRUCTIONS)
#include MESHTENSOR_TARGET_BODY
MESHTENSOR_FORM_END
#undef MESHTENSOR_TARGET
#endif

#undef MESHTENSOR_TARGET_AVX512_BF16
#define MESHTENSOR_TARGET_AVX512_BF16 1
#if MESHTENSOR_FORM_COMPILED(3)
#define MESHTENSOR_TARGET avx512_bf16
MESHTENSOR_FORM_BEGIN(MESHTENSOR_AVX512_BF16_INSTRUCTIONS)
#include MESHTENSOR_TARGET_BODY
MESHTENSOR_FORM_END
#undef MESHTENSOR_TARGET
#endif

#undef MESHTENSOR_TARGET_AVX2
#undef MESHTENSOR_TARGET_AVX512
#undef MESHTENSOR_TARGET_AVX512_BF16

#if defined(MESHTENSOR_TARGETS_CONTRACT_OFF)
#pragma GCC pop_options
#undef MESHTENSOR_TARGETS_CONTRACT_OFF
#endif
#endif  // MESHTENSOR_CPU_TARGETS
#undef MESHTENSOR_TARGET_BODY
