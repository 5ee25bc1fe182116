#pragma once
// When the host may touch a processor's memory. A processor that computes on a GPU queues its
// kernels, library calls and copies on its compute stream and returns without waiting for them, so
// the host prepares the next call while the GPU runs this one. Before the host itself reads or
// writes memory that queued work may use — a CPU loop over a block in GPU memory (an op without a
// GPU kernel), a value it reads — it waits for that work. On a processor that computes on the CPU,
// and without the GPU backend, there is nothing to wait for and the calls below cost a branch.

#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda.hpp"
#endif

namespace meshtensor::kernels {

/// Waits until the calling processor's GPU has run all the work queued on it.
inline void wait_for_gpu() {
#if defined(MESHTENSOR_WITH_CUDA)
  cuda::finish_queued_work();
#endif
}

/// `ran` (whether a call ran on the GPU), after waiting for the GPU when it did not: the caller's
/// CPU loop comes next, on memory the GPU's queued work may still be using.
inline bool ran_or_waited(bool ran) {
  if (!ran) wait_for_gpu();
  return ran;
}

}  // namespace meshtensor::kernels
