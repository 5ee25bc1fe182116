#pragma once
// What a plan assumes where a real run decides at run time. A plan holds for each convolution the
// workspace its CPU kernel states: the row kernels' planes per compute thread and weight copies,
// oneDNN's operand copies in the formats it prefers and its scratchpad, in the formats of the
// fixed rule where a run times them (kernels/conv_candidates.hpp); meshtensor's blocked and
// reference CPU kernels need none. bfloat16 passes on the float kernels widen slabs of about
// 1 MiB, not stated yet. Einsum's products state theirs (packed copies, float products, oneDNN's
// matmul scratchpad: kernels/sum_candidates.hpp). The report says which of these holds for the
// program that planned.

#include <string>

#include "meshtensor/core/settings.hpp"

namespace meshtensor::kernels::plan {

/// The kernels a real run under `policy` would use (on GPUs where `for_gpus`), and what of theirs
/// the plan's peaks leave out, in one sentence.
inline std::string assumed_kernels(const KernelPolicy& policy, bool for_gpus = false) {
  if (for_gpus)
    return "cuDNN and meshtensor's GPU kernels, with their own buffers (filters in cuDNN's order, "
           "padded boxes, float copies of bfloat16 operands); cuDNN's workspace, which the "
           "algorithm chosen at run time sets, the peaks leave out";
#if defined(MESHTENSOR_REFERENCE_KERNELS)
  return "reference CPU kernels, which take no workspace: the peaks are a real run's";
#elif defined(MESHTENSOR_WITH_ONEDNN)
  using F = KernelPolicy::Formats;
  const F formats = policy.formats();
  const std::string chosen = formats == F::chosen          ? "timed at each shape's first use"
                             : formats == F::channels_last ? "channels-last"
                             : formats == F::blocked       ? "blocked"
                                                           : "by channels (the fixed rule)";
  const std::string timed = formats == F::chosen
                                ? " (the peaks hold the copies and scratchpad of the formats by "
                                  "channels, not those of other formats, nor the timing's copies)"
                                : "";
  return "oneDNN convolutions with their operands' copies in the formats they use and their "
         "scratchpad; a real run's formats are " +
         chosen + timed +
         "; bfloat16 passes on float kernels add slabs of about 1 MiB, which the peaks leave "
         "out; meshtensor's row kernels (few channels) with the planes they take";
#else
  (void)policy;
  return "meshtensor's blocked and row CPU kernels, the row kernels (few channels) with the "
         "planes they take; bfloat16 passes on float kernels add slabs of about 1 MiB, which the "
         "peaks leave out";
#endif
}

}  // namespace meshtensor::kernels::plan
