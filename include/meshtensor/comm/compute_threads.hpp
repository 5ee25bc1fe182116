#pragma once
// How many threads each processor's kernels may use, so that processors x threads fill the cores
// without oversubscribing them: the cores of the machine divided among the processors that share it
// (the threads of an in-process run, or the ranks an MPI launcher placed on this node), unless
// MESHTENSOR_THREADS_PER_PROCESSOR says otherwise.

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace meshtensor {

namespace detail {
inline int& compute_threads_slot() {
  thread_local int threads = 0;  // 0: not decided for this thread yet
  return threads;
}
}  // namespace detail

/// Threads per processor when `sharing` processors share this machine's cores.
inline int threads_per_processor(int sharing) {
  if (const char* forced = std::getenv("MESHTENSOR_THREADS_PER_PROCESSOR")) {
    const int n = std::atoi(forced);
    if (n > 0) return n;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, sharing));
}

/// Sets the calling processor's kernel threads (run() does this for every processor).
inline void set_compute_threads(int threads) {
  detail::compute_threads_slot() = std::max(1, threads);
}

/// The calling processor's kernel threads.
inline int compute_threads() {
  int& threads = detail::compute_threads_slot();
  if (threads == 0) {
    int sharing = 1;  // ranks of an MPI launcher on this node
    for (const char* name :
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
      if (const char* value = std::getenv(name)) {
        sharing = std::max(1, std::atoi(value));
        break;
      }
    threads = threads_per_processor(sharing);
  }
  return threads;
}

}  // namespace meshtensor
