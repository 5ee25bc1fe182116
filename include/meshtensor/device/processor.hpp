#pragma once
// A processor's context: the device it computes on, its memory pool, its share of the cores, and
// what the kernel backends keep per processor (a GPU's stream and library handles, oneDNN's engine
// and primitives). The Mesh owns one per processor and makes it the current processor of the
// thread that runs it: kernels, allocators and backends find their processor there, in one slot.

#include <algorithm>
#include <atomic>
#if defined(__linux__)
#include <sched.h>
#endif
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "meshtensor/core/environment.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/settings.hpp"
#include "meshtensor/device/device.hpp"
#include "meshtensor/device/thread_waiting.hpp"
#include "meshtensor/memory/block_limit.hpp"
#include "meshtensor/memory/pool.hpp"
#include "meshtensor/memory/processor_memory.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda_runtime.hpp"
#endif

namespace meshtensor {

/// The cores this process may run on: those of its CPU affinity mask (taskset, a launcher's
/// binding, a batch system's cgroup), else the machine's.
inline int cores_available() {
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) return std::max(1, CPU_COUNT(&mask));
#endif
  return machine;
}

/// Threads per processor when `sharing` processors share this process's cores, unless
/// `settings` say how many.
inline int threads_per_processor(int sharing, const Settings& settings = environment_settings()) {
  if (settings.threads_per_processor > 0) return settings.threads_per_processor;
  return std::max(1, cores_available() / std::max(1, sharing));
}

/// Threads for a processor that is one process of a launcher's job, unless `settings` say how
/// many: Slurm's CPUs per task in an srun step; else the cores its affinity mask gives it where
/// the launcher bound it to some; else the node's cores divided among the ranks the launcher
/// placed on it.
inline int threads_per_process(const Settings& settings = environment_settings()) {
  if (settings.threads_per_processor > 0) return settings.threads_per_processor;
  if (const auto per_task = slurm_cpus_per_task()) return *per_task;
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cores_available() < machine) return threads_per_processor(1, settings);
  return threads_per_processor(launcher_ranks_on_node().value_or(1), settings);
}

namespace detail {
// Each type kept as processor state gets a slot number, the same in every processor.
inline std::size_t new_state_slot() {
  static std::atomic<std::size_t> next{0};
  return next++;
}
template <class T>
std::size_t state_slot() {
  static const std::size_t slot = new_state_slot();
  return slot;
}

// Where a device kind's blocks live.
inline MemorySource memory_of(const Device& device) {
  switch (device.kind) {
    case DeviceKind::cuda:
#if defined(MESHTENSOR_WITH_CUDA)
      return cuda::device_memory();
#else
      throw DeviceError("device " + device.to_string() +
                        " needs the GPU backend, but this program was built without it; link "
                        "meshtensor::cuda (found when CUDA, cuDNN and NCCL are installed)");
#endif
    case DeviceKind::plan:
      return MemoryPool::address_space_only();
    case DeviceKind::cpu:
      break;
  }
  return MemoryPool::system_pages();
}
}  // namespace detail

/**
 * One processor's context. Made by the Mesh (or by LocalProcessor, outside any mesh); kernels
 * reach it through current_processor().
 *
 * ```cpp
 * Processor& p = current_processor();
 * p.device().is_cuda();           // computes on a GPU
 * p.state<MyHandles>();           // made on first use, destroyed with the processor
 * ```
 */
class Processor {
 public:
  Processor(Device device, int compute_threads, const MemorySource& memory,
            Settings settings = environment_settings())
      : device_(device),
        settings_(std::move(settings)),
        compute_threads_(std::max(1, compute_threads)),
        waiting_(waiting_lease()),
        own_memory_(std::make_unique<ProcessorMemory>(
            memory, meshtensor::block_limit(settings_.max_block_bytes))),
        memory_(*own_memory_) {}
  Processor(Device device, int compute_threads, Settings settings = environment_settings())
      : Processor(device, compute_threads, detail::memory_of(device), std::move(settings)) {}
  /// The process's processor, for threads outside any processor: its memory is the process's.
  explicit Processor(ProcessorMemory& memory, int compute_threads)
      : device_(Device::cpu()),
        settings_(environment_settings()),
        compute_threads_(std::max(1, compute_threads)),
        process_(true),
        memory_(memory) {}
  ~Processor() {
    states_.clear();  // handles and caches first: some hold blocks of the pool
  }
  Processor(const Processor&) = delete;
  Processor& operator=(const Processor&) = delete;

  const Device& device() const { return device_; }

  /// The settings of its run (core/settings.hpp): its kernel policy, timeouts, checks, limits.
  const Settings& settings() const { return settings_; }
  /// Its memory: its pool, the pool it allocates from now, its block limit, its label.
  ProcessorMemory& memory() { return memory_; }
  /// The most bytes one of its blocks may take.
  const BlockLimit& block_limit() const { return memory_.block_limit(); }

  /// How errors name this processor ("processor 3 of 8"); empty outside a mesh.
  const std::string& label() const { return memory_.label(); }
  void set_label(std::string label) { memory_.set_label(std::move(label)); }

  /// Threads this processor's kernels may use.
  int compute_threads() const { return compute_threads_; }
  void set_compute_threads(int threads) {
    compute_threads_ = std::max(1, threads);
    waiting_ = waiting_lease();
  }

  /// Whether the processor's device work is being captured into a graph (device/step_graph.hpp):
  /// the step's host code will not run at the graph's launches, so host-side checks between
  /// processors (collective checks) are left out while it is.
  bool capturing() const { return capturing_; }
  void set_capturing(bool capturing) { capturing_ = capturing; }

  /// The pool the processor allocates from now: its own, or a ScratchMemory's while one lives.
  MemoryPool& pool() { return memory_.pool(); }
  /// Its own pool, whose statistics are the processor's memory.
  MemoryPool& own_pool() { return memory_.own_pool(); }

  /// The processor's T, default-constructed on first use and destroyed with the processor.
  template <class T>
  T& state() {
    const std::size_t slot = detail::state_slot<T>();
    {
      std::lock_guard<std::mutex> lock(states_mutex_);
      if (slot < states_.size() && states_[slot]) return *static_cast<T*>(states_[slot].get());
    }
    // Made outside the lock: a T may itself use other state (a library handle, the stream).
    auto made = std::make_shared<T>();
    std::lock_guard<std::mutex> lock(states_mutex_);
    if (states_.size() <= slot) states_.resize(slot + 1);
    if (!states_[slot]) states_[slot] = std::move(made);
    return *static_cast<T*>(states_[slot].get());
  }

 private:
  // A plan's processors compute nothing, and the process's computes outside any run (setting up,
  // loading): their threads' waiting is left to OpenMP.
  ThreadWaitingLease waiting_lease() const {
    if (device_.is_plan() || process_) return {};
    return ThreadWaitingLease(settings_.thread_waiting, compute_threads_);
  }

  Device device_;
  Settings settings_;
  int compute_threads_;
  bool process_ = false;        // the process's processor, for threads outside any processor
  ThreadWaitingLease waiting_;  // its threads' waiting, registered while they are several
  bool capturing_ = false;
  std::unique_ptr<ProcessorMemory> own_memory_;  // none for the process's processor
  ProcessorMemory& memory_;
  std::mutex states_mutex_;
  std::vector<std::shared_ptr<void>> states_;
};

namespace detail {
inline Processor*& current_processor_slot() {
  thread_local Processor* processor = nullptr;
  return processor;
}
// Threads outside any processor (the main thread before run(), kernel worker threads) share one,
// never destroyed: blocks may outlive static destruction order.
inline Processor& process_processor() {
  static Processor* processor = new Processor(process_memory(), threads_per_process());
  return *processor;
}
// Makes a processor's device the calling thread's (a GPU's: CUDA's current device).
inline void enter_device([[maybe_unused]] const Device& device) {
#if defined(MESHTENSOR_WITH_CUDA)
  if (device.is_cuda()) cuda::check(cudaSetDevice(device.gpu), "cudaSetDevice");
#endif
}
}  // namespace detail

/// The processor the calling thread computes for.
inline Processor& current_processor() {
  Processor* p = detail::current_processor_slot();
  return p ? *p : detail::process_processor();
}

/// Makes `processor` the calling thread's current processor for the scope's lifetime.
class ProcessorScope {
 public:
  explicit ProcessorScope(Processor& processor)
      : previous_(detail::current_processor_slot()), memory_(processor.memory()) {
    detail::enter_device(processor.device());
    detail::current_processor_slot() = &processor;
  }
  ~ProcessorScope() { detail::current_processor_slot() = previous_; }
  ProcessorScope(const ProcessorScope&) = delete;
  ProcessorScope& operator=(const ProcessorScope&) = delete;

 private:
  Processor* previous_;
  MemoryScope memory_;
};

/// A processor of the calling thread's own, outside any mesh, for the object's lifetime (kernel
/// tests, tools): computing on `device`, its blocks from `memory` (by default the device's).
class LocalProcessor {
 public:
  explicit LocalProcessor(Device device = Device::cpu(), Settings settings = environment_settings())
      : processor_(device, threads_per_process(settings), std::move(settings)),
        scope_(processor_) {}
  explicit LocalProcessor(Settings settings) : LocalProcessor(Device::cpu(), std::move(settings)) {}
  LocalProcessor(Device device, const MemorySource& memory,
                 Settings settings = environment_settings())
      : processor_(device, threads_per_process(settings), memory, std::move(settings)),
        scope_(processor_) {}
  Processor& processor() { return processor_; }

 private:
  Processor processor_;
  ProcessorScope scope_;
};

/// The calling processor's kernel threads.
inline int compute_threads() { return current_processor().compute_threads(); }

}  // namespace meshtensor
