// No include guard: included once per family of kernels, after defining MESHTENSOR_TARGET_BODY.
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
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")
#endif
#include MESHTENSOR_TARGET_BODY
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef MESHTENSOR_TARGET
#endif

#undef MESHTENSOR_TARGET_AVX512
#define MESHTENSOR_TARGET_AVX512 1
#if MESHTENSOR_FORM_COMPILED(2)
#define MESHTENSOR_TARGET avx512
#if defined(__clang__)
#pragma clang attribute push(                                                                \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt," \
                          "popcnt"))),                                                       \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")
#endif
#include MESHTENSOR_TARGET_BODY
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#undef MESHTENSOR_TARGET
#endif

#undef MESHTENSOR_TARGET_AVX512_BF16
#define MESHTENSOR_TARGET_AVX512_BF16 1
#if MESHTENSOR_FORM_COMPILED(3)
#define MESHTENSOR_TARGET avx512_bf16
#if defined(__clang__)
#pragma clang attribute push(                                                                \
    __attribute__((target("avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi," \
                          "bmi2,lzcnt,popcnt"))),                                            \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target( \
    "avx512bf16,avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt")
#endif
#include MESHTENSOR_TARGET_BODY
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
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
