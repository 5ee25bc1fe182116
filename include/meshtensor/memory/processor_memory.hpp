#pragma once
// Where the calling thread's blocks come from. Each processor has a ProcessorMemory (its pool, the
// pool it allocates from now, the most bytes one block may take, and the label errors name it
// by), and the thread that runs a processor makes it the thread's current memory. Threads outside
// any processor (the main thread before run(), kernel worker threads) share the process's.

#include <cstddef>
#include <string>
#include <utility>

#include "meshtensor/core/environment.hpp"
#include "meshtensor/memory/block_limit.hpp"
#include "meshtensor/memory/pool.hpp"

namespace meshtensor {

/// One processor's memory: a pool of its own, given back to the system when it goes.
class ProcessorMemory {
 public:
  ProcessorMemory(const MemorySource& source, BlockLimit limit)
      : own_(MemoryPool::create(source)), active_(own_), limit_(std::move(limit)) {}
  ~ProcessorMemory() { own_->release(); }
  ProcessorMemory(const ProcessorMemory&) = delete;
  ProcessorMemory& operator=(const ProcessorMemory&) = delete;

  /// The pool blocks come from now: its own, or a ScratchMemory's or AllocatingFrom's while one
  /// lives.
  MemoryPool& pool() { return *active_; }
  /// Its own pool, whose statistics are the processor's memory.
  MemoryPool& own_pool() { return *own_; }

  /// The most bytes one of its blocks may take.
  const BlockLimit& block_limit() const { return limit_; }

  /// How errors name the processor ("processor 3 of 8"); empty outside a mesh.
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }

 private:
  friend class ScratchMemory;
  friend class AllocatingFrom;

  MemoryPool* own_;
  MemoryPool* active_;
  BlockLimit limit_;
  std::string label_;
};

namespace detail {
inline ProcessorMemory*& current_memory_slot() {
  thread_local ProcessorMemory* memory = nullptr;
  return memory;
}
}  // namespace detail

/// The memory of threads outside any processor: never destroyed, as blocks may outlive static
/// destruction order.
inline ProcessorMemory& process_memory() {
  static auto* memory = new ProcessorMemory(MemoryPool::system_pages(),
                                            block_limit(environment_settings().max_block_bytes));
  return *memory;
}

/// The memory the calling thread's blocks come from.
inline ProcessorMemory& current_memory() {
  ProcessorMemory* memory = detail::current_memory_slot();
  return memory ? *memory : process_memory();
}

/// Makes `memory` the calling thread's for the scope's lifetime.
class MemoryScope {
 public:
  explicit MemoryScope(ProcessorMemory& memory) : previous_(detail::current_memory_slot()) {
    detail::current_memory_slot() = &memory;
  }
  ~MemoryScope() { detail::current_memory_slot() = previous_; }
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  ProcessorMemory* previous_;
};

/// The pool the calling thread allocates from (a kernel worker thread's: the process's).
inline MemoryPool& memory_pool() { return current_memory().pool(); }

/// What the calling processor holds: its pool's statistics.
inline MemoryStats memory_stats() { return current_memory().own_pool().stats(); }

/// For its lifetime, the blocks the calling processor allocates count as for `use` (its pool's
/// statistics: MemoryStats::in_use_by_use and at_peak).
class MemoryUseScope {
 public:
  explicit MemoryUseScope(MemoryUse use) : pool_(memory_pool()), previous_(pool_.use()) {
    pool_.set_use(use);
  }
  ~MemoryUseScope() { pool_.set_use(previous_); }
  MemoryUseScope(const MemoryUseScope&) = delete;
  MemoryUseScope& operator=(const MemoryUseScope&) = delete;

 private:
  MemoryPool& pool_;
  MemoryUse previous_;
};

/// Memory for a short job beside the processor's work (timing kernel formats at a shape's first
/// use): for its lifetime the processor allocates from a pool of its own, given back to the
/// system when it ends. Were the job's buffers taken from the processor's pool, that pool would
/// keep caching freed blocks up to the job's peak for the rest of the run. The processor's peaks
/// count the job while it lasts.
class ScratchMemory {
 public:
  ScratchMemory()
      : memory_(current_memory()),
        previous_(memory_.active_),
        pool_(MemoryPool::create(previous_->source())) {
    memory_.active_ = pool_;
  }
  ~ScratchMemory() {
    memory_.active_ = previous_;
    previous_->count_scratch(pool_->stats().peak_held);
    pool_->release();
  }
  ScratchMemory(const ScratchMemory&) = delete;
  ScratchMemory& operator=(const ScratchMemory&) = delete;

 private:
  ProcessorMemory& memory_;
  MemoryPool* previous_;
  MemoryPool* pool_;
};

/// For its lifetime the calling processor allocates from `pool` (a captured step's own, whose
/// blocks the graph reuses at every launch), then again from the pool it used before.
class AllocatingFrom {
 public:
  explicit AllocatingFrom(MemoryPool& pool)
      : memory_(current_memory()), previous_(memory_.active_) {
    memory_.active_ = &pool;
  }
  ~AllocatingFrom() { memory_.active_ = previous_; }
  AllocatingFrom(const AllocatingFrom&) = delete;
  AllocatingFrom& operator=(const AllocatingFrom&) = delete;

 private:
  ProcessorMemory& memory_;
  MemoryPool* previous_;
};

}  // namespace meshtensor
