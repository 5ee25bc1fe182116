#pragma once
// What a run may change without changing its results' meaning: how kernels are chosen and the
// processors' other settings. A program passes one Settings to run() (by default the one the
// environment gives, core/environment.hpp); each processor holds its own, so two meshes in one
// process can run with different settings. docs/LIBRARY.md's table lists every field.

#include <cstdint>
#include <string>

namespace meshtensor {

/// How kernels are chosen where several could run a call.
struct KernelPolicy {
  /// timed: where candidates compete (oneDNN's formats, bfloat16 kernels, an input gradient as a
  /// forward pass, cuDNN's algorithms), each shape and pass is timed at its first call and the
  /// faster runs. fixed: a rule decides, the same at every run, so results repeat bit for bit from
  /// run to run.
  enum class Choice { timed, fixed };
  /// oneDNN's operand formats: chosen (by `choice`), channels-last, blocked, or by channels
  /// (channels-last up to 16 channels, blocked above: the fixed rule).
  enum class Formats { chosen, channels_last, blocked, by_channels };
  /// Which kernels run a bfloat16 convolution: chosen (fixed rule: oneDNN's where the CPU has
  /// AMX), oneDNN's bf16 kernels (native), or meshtensor's on bfloat16 or widened rows.
  enum class Bf16Conv { chosen, native, widened };
  /// How meshtensor's bfloat16 row kernels multiply: chosen (where AVX512_BF16's dot products give
  /// more products a second; fixed rule: float), dot products, or float multiply-adds.
  enum class Bf16Products { chosen, dot, widened };
  /// An input gradient run as a forward convolution on flipped weights: chosen (fixed rule:
  /// never), always where oneDNN runs it, or never.
  enum class AsForward { chosen, always, never };
  /// What float convolutions on a GPU may compute with: fp32 multiply-adds, or also TF32 tensor
  /// cores, whose operands keep 10 bits of mantissa (results differ beyond float rounding).
  enum class Math { fp32, tf32 };
  /// The widest x86 instructions meshtensor's own CPU kernels may use: the CPU's best (chosen), or
  /// at most AVX-512 with bfloat16 dot products, AVX-512, AVX2 with FMA, or none of these (the
  /// kernels that need them leave their shapes to oneDNN's and the reference kernels).
  enum class CpuInstructions { chosen, avx512_bf16, avx512, avx2, baseline };

  Choice choice = Choice::timed;
  Formats onednn_formats = Formats::chosen;
  Bf16Conv bf16_conv = Bf16Conv::chosen;
  Bf16Products bf16_products = Bf16Products::chosen;
  AsForward input_gradient_as_forward = AsForward::chosen;
  bool row_kernels = true;     // meshtensor's row kernels run the shapes they fit (few channels)
  std::int64_t row_bands = 0;  // output rows per band of the row kernels: 0 by the cache, -1 whole
  bool mapped_inputs = true;   // normalised inputs read through their affine map, not copied
  Math math = Math::fp32;
  CpuInstructions cpu_instructions = CpuInstructions::chosen;
  /// A convolution kernel (a name in kernels/conv_candidates.hpp's list) that runs every call it
  /// supports, the others chosen as usual; empty: chosen.
  std::string conv_kernel;
  /// The same for pooling (kernels/pool_candidates.hpp).
  std::string pool_kernel;
  /// The same for einsum's sums of products of two operands (kernels/sum_candidates.hpp).
  std::string sum_kernel;

  bool fixed() const { return choice == Choice::fixed; }
  /// The formats oneDNN's convolutions take: those forced, else timed (chosen), or the channel rule
  /// under the fixed choice.
  Formats formats() const {
    return onednn_formats == Formats::chosen && fixed() ? Formats::by_channels : onednn_formats;
  }
};

/// How compute threads with nothing to do wait for the next parallel loop. adaptive: as OpenMP
/// spins while the machine's cores are free, but briefly, then asleep, while other programs keep
/// them busy (device/thread_waiting.hpp); openmp: as OpenMP's own settings say (its defaults,
/// OMP_WAIT_POLICY, GOMP_SPINCOUNT); brief: briefly always.
enum class ThreadWaiting { adaptive, openmp, brief };

/// A run's settings: the kernel policy and each processor's other settings.
struct Settings {
  KernelPolicy kernels;
  /// The transport (threads, mpi, nccl) and device (cpu, cuda); empty: the launcher's and the
  /// transport's.
  std::string transport, device;
  int threads_per_processor = 0;  // 0: the cores this processor's share of the process has
  bool halo_overlap = true;       // convolutions compute the rows that need no halo meanwhile
  double timeout_seconds = 600;   // the longest wait for other processors; 0: no limit
  bool check_collectives = true;  // every collective's op and sizes compared among its members
  double max_block_bytes = 0;     // the largest block a processor may allocate; 0: the machine's
  ThreadWaiting thread_waiting = ThreadWaiting::adaptive;
};

}  // namespace meshtensor
