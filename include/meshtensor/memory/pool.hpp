#pragma once
// Each processor's memory: one pool that every tensor block and kernel buffer of that processor
// comes from. It does two jobs.
//  - Reuse. A training step allocates the same sizes every step; a block freed by one step serves
//    the next without a fresh mmap and its page faults (thousands per large activation).
//  - Accounting. It knows what this processor holds, now and at its peak — also under the threads
//    transport, where all processors share one process and its RSS says nothing per processor.
// Big blocks (>= 64 KiB) are mmap'd in size classes (64 per power of two) and cached when freed; a
// request no cached block fits splits a bigger one or joins smaller ones (mremap moves their
// pages; only what they lack is new).
// Freed blocks merge with free neighbours in memory, so the halves of a split block serve a whole
// one again. The cache never lets the pool hold more than the peak in use (a miss first gives
// cached blocks back), so reuse costs no memory beyond the peak. Small blocks go to malloc and are
// only counted. Every block starts with a header naming its pool, so a block may be freed on any
// thread.
// A pool may take its blocks from another MemorySource (a GPU's memory, device/memory.hpp). Such
// memory is given back only whole and may be out of the host's reach, so each block's pool and
// size are kept in a registry beside it instead of a header, and a GPU's pool keeps what it takes
// as segments: a block is a part of one, a request no free part fits takes a new segment, free
// parts merge within their segment, and a segment goes back only once wholly free. As in PyTorch's
// caching allocator, requests under a MiB share segments of 2 MiB of their own, so that kernels'
// small buffers never split the segments big blocks reuse.

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"

#if defined(__SANITIZE_THREAD__)
#define MESHTENSOR_DETAIL_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MESHTENSOR_DETAIL_THREAD_SANITIZER 1
#endif
#endif

namespace meshtensor {

/// Where memory is: the host's, a device's (a GPU's: the host reaches it only after the device's
/// queued work, and slowly), or nowhere (a plan's blocks: an address and a size, never touched).
enum class MemorySpace { host, device, none };

/// What a block is for, as the pool counts it: what a forward pass keeps (the default), the
/// model's parameters, what a backward pass makes (gradients of activations and parameters), an
/// optimiser's state, kernels' scratch, and halo messages. A MemoryUseScope (device/processor.hpp)
/// says what the blocks allocated in it are for; MemoryPool::count_as() changes a block's use.
enum class MemoryUse : std::uint8_t {
  activations,
  parameters,
  gradients,
  optimizer,
  workspace,
  halo,
  count
};
constexpr std::size_t memory_uses = static_cast<std::size_t>(MemoryUse::count);
inline const char* memory_use_name(MemoryUse use) {
  static const char* names[] = {"activations", "parameters", "gradients",
                                "optimizer",   "workspace",  "halo"};
  return names[static_cast<std::size_t>(use)];
}

/// Where a pool's memory comes from: `map` a block (nullptr when there is none), `unmap` it.
/// `in_parts`: unmap takes any part of mapped memory and its blocks are host memory (the system's
/// pages), so the pool may split, merge and grow blocks and write a header into each. `space`:
/// where its blocks are, which every block keeps.
struct MemorySource {
  void* (*map)(std::size_t bytes) = nullptr;
  void (*unmap)(void* base, std::size_t bytes) = nullptr;
  bool in_parts = false;
  const char* name = "";
  MemorySpace space = MemorySpace::host;
  // A plan for a run on GPUs: blocks counted as a GPU's pool holds them.
  bool rounds_as_device = false;
};

class MemoryPool;

namespace detail {
// Blocks of sources that are not `in_parts`: their pool and size, by address.
struct OutsideBlock {
  MemoryPool* pool;
  std::size_t size;
  MemoryUse use;
};
struct OutsideBlocks {
  std::mutex mutex;
  std::unordered_map<void*, OutsideBlock> blocks;
  std::atomic<bool> used{false};
};
inline OutsideBlocks& outside_blocks() {
  static auto* registry = new OutsideBlocks();  // never destroyed: blocks may outlive statics
  return *registry;
}
}  // namespace detail

/// Bytes a processor's pool accounts for. `in_use`: blocks handed out and not freed; `held`: that
/// plus the cached free blocks (what the pool takes from the system).
struct MemoryStats {
  std::size_t in_use = 0, peak_in_use = 0;
  std::size_t held = 0, peak_held = 0;
  std::size_t allocations = 0, system_allocations = 0;  // hits = allocations - system ones
  std::size_t fresh_bytes = 0;  // taken from the system (new or grown blocks): page faults to come
  std::array<std::size_t, memory_uses> in_use_by_use{};  // in_use, by what blocks are for
  std::array<std::size_t, memory_uses> at_peak{};        // in_use_by_use when in_use peaked
};

class MemoryPool {
 public:
  static constexpr std::size_t alignment = 64;         // a cache line; AVX-512 loads
  static constexpr std::size_t pooled_from = 1 << 16;  // smaller blocks go to malloc
  /// Whether grown and joined blocks keep their cached pages (and values): not under
  /// ThreadSanitizer, which does not see pages move (remap()).
#if defined(MREMAP_MAYMOVE) && !defined(MESHTENSOR_DETAIL_THREAD_SANITIZER)
  static constexpr bool moves_pages = true;
#else
  static constexpr bool moves_pages = false;
#endif

  /// The system's pages: mmap'd, unmapped in any parts.
  static MemorySource system_pages() {
    MemorySource source;
    source.map = &map;
    source.unmap = &unmap;
    source.in_parts = true;
    source.name = "host memory";
    return source;
  }

  /// Addresses without memory behind them: a plan's blocks, which have a size and an address
  /// but are never read or written (a touch faults). Blocks stay whole, as outside memory does.
  /// `as_device`: the plan stands for a run on GPUs, whose pools hold blocks whole (no header).
  static MemorySource address_space_only(bool as_device = false) {
    MemorySource source;
    source.map = &reserve;
    source.unmap = &unreserve;
    source.in_parts = false;
    source.name = "address space (a plan)";
    source.space = MemorySpace::none;
    source.rounds_as_device = as_device;
    return source;
  }

  /// A new pool, owned by the caller until release().
  static MemoryPool* create(const MemorySource& source = system_pages()) {
    return new MemoryPool(source);
  }

  const MemorySource& source() const { return source_; }

  /// The owner is done with the pool: cached blocks go back now; the pool itself goes once its
  /// last block is freed.
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = false;  // blocks freed from now on go straight back to the system
    }
    trim();
    drop_reference();
  }

  /// The most one request may ask: far beyond any machine (a plan may count blocks bigger than
  /// its own), yet leaving room for a block's header and size class in 64 bits.
  static constexpr std::size_t max_request = std::size_t{1} << 60;

  void* allocate(std::size_t bytes) {
    if (bytes > max_request)
      throw ShapeError("a block of " + std::to_string(bytes) +
                       " bytes was asked of the memory pool, more than any machine's addresses "
                       "hold (" +
                       std::to_string(max_request) + ")");
    const bool outside = !source_.in_parts;
    // A plan counts each block as the pool it stands for would hold it: the host's (header, size
    // class or malloc) or a GPU's.
    const bool as_host =
        !outside || (source_.space == MemorySpace::none && !source_.rounds_as_device);
    const std::size_t total = as_host ? bytes + alignment : std::max<std::size_t>(bytes, 1);
    const bool pooled = outside || total >= pooled_from;
    const std::size_t size = !as_host || total >= pooled_from ? size_class(total) : total;
    std::size_t granted = size;  // a cached block may be somewhat bigger than asked
    std::size_t mapped = size;   // what a fresh block takes from the source
    const MemoryUse use = this->use();
    void* base = nullptr;
    Resize resize;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.allocations;
      if (pooled) base = take_cached(size, granted, resize);
      stats_.in_use += granted;
      stats_.in_use_by_use[std::size_t(use)] += granted;
      if (stats_.in_use > stats_.peak_in_use) {
        stats_.peak_in_use = stats_.in_use;
        stats_.at_peak = stats_.in_use_by_use;
      }
      high_water_ = std::max(high_water_, stats_.in_use);
      if ((!base || resize.from) && granted > resize.from) {
        // Memory from the system: a new block, or cached ones joined and grown (only ever grown:
        // a bigger cached block is split instead). Pooled, other cached blocks go back until the
        // pool stays within the peak in use; a GPU's pool keeps them (cudaFree would wait for the
        // GPU, every step) and gives them back when the card is full.
        if (!base && in_segments()) mapped = segment_bytes(granted);
        stats_.held += mapped - resize.from;
        stats_.fresh_bytes += mapped - resize.from;
        if (pooled && !keeps_cache()) trim_to(high_water_);
        stats_.peak_held = std::max(stats_.peak_held, stats_.held);
        ++stats_.system_allocations;
      }
    }
    const bool fresh = !base && !resize.from;
    if (resize.from)
      base = join(resize.pieces, granted);
    else if (!base)
      base = pooled ? source_.map(mapped) : std::aligned_alloc(alignment, round_up(total));
    if (!base && pooled && !resize.from) {
      trim();  // the cached blocks give way (a GPU's memory holds nothing else of ours)
      base = source_.map(mapped);
      if (!base && mapped > granted) {  // a card too full for a small segment: the block alone
        base = source_.map(granted);
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.held -= mapped - granted;
        stats_.fresh_bytes -= mapped - granted;
        mapped = granted;
      }
    }
    if (!base) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.in_use -= granted;
      stats_.in_use_by_use[std::size_t(use)] -= granted;
      stats_.held -= mapped;
      throw OutOfMemoryError(std::string(source_.name) + " has no room for a block of " +
                             std::to_string(granted) + " bytes (this processor has " +
                             std::to_string(stats_.in_use) + " bytes in use, " +
                             std::to_string(stats_.held) + " held)");
    }
    if (fresh && in_segments()) {
      std::lock_guard<std::mutex> lock(mutex_);
      char* const segment = static_cast<char*>(base);
      segments_.emplace(segment, Segment{mapped, granted < small_request});
      if (mapped > granted) cache(segment + granted, mapped - granted);
    }
    references_.fetch_add(1, std::memory_order_relaxed);
    if (outside) {
      auto& registry = detail::outside_blocks();
      std::lock_guard<std::mutex> lock(registry.mutex);
      registry.blocks[base] = {this, granted, use};
      registry.used.store(true, std::memory_order_release);
      return base;
    }
    auto* header = static_cast<Header*>(base);
    header->pool = this;
    header->size = granted;
    header->use = use;
    return static_cast<char*>(base) + alignment;
  }

  /// Frees a block from allocate(), on any thread.
  static void deallocate(void* data) noexcept {
    if (!data) return;
    void* base = nullptr;
    MemoryPool* pool = nullptr;
    std::size_t size = 0;
    MemoryUse use = MemoryUse::activations;
    bool pooled = true;
    auto& registry = detail::outside_blocks();
    if (registry.used.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(registry.mutex);
      if (auto found = registry.blocks.find(data); found != registry.blocks.end()) {
        base = data;
        pool = found->second.pool;
        size = found->second.size;
        use = found->second.use;
        registry.blocks.erase(found);
      }
    }
    if (!base) {
      base = static_cast<char*>(data) - alignment;
      auto* header = static_cast<Header*>(base);
      pool = header->pool;
      size = header->size;
      use = header->use;
      pooled = size >= pooled_from;  // malloc'd blocks are all smaller
    }
    bool segment_may_go = false;  // a closed pool's segment goes back once wholly free
    {
      std::lock_guard<std::mutex> lock(pool->mutex_);
      pool->stats_.in_use -= size;
      pool->stats_.in_use_by_use[std::size_t(use)] -= size;
      if (pooled && (pool->open_ || pool->in_segments())) {
        pool->cache(static_cast<char*>(base), size);
        base = nullptr;
        segment_may_go = !pool->open_;
      } else {
        pool->stats_.held -= size;
      }
    }
    if (segment_may_go) pool->trim();
    if (base) {
      if (pooled)
        pool->source_.unmap(base, size);
      else
        std::free(base);
    }
    pool->drop_reference();
  }

  MemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  /// What the blocks allocated from now on are for (MemoryUseScope sets it).
  MemoryUse use() const { return MemoryUse(use_.load(std::memory_order_relaxed)); }
  void set_use(MemoryUse use) { use_.store(std::uint8_t(use), std::memory_order_relaxed); }

  /// Counts the block at `data` (from allocate(), of any pool) as for `use` from now on: a
  /// parameter made by an initialiser, say.
  static void count_as(const void* data, MemoryUse use) {
    if (!data) return;
    MemoryPool* pool = nullptr;
    std::size_t size = 0;
    MemoryUse* was = nullptr;
    auto& registry = detail::outside_blocks();
    std::unique_lock<std::mutex> registry_lock(registry.mutex, std::defer_lock);
    if (registry.used.load(std::memory_order_acquire)) {
      registry_lock.lock();
      if (auto found = registry.blocks.find(const_cast<void*>(data));
          found != registry.blocks.end()) {
        pool = found->second.pool;
        size = found->second.size;
        was = &found->second.use;
      }
    }
    if (!was) {
      auto* header =
          reinterpret_cast<Header*>(static_cast<char*>(const_cast<void*>(data)) - alignment);
      pool = header->pool;
      size = header->size;
      was = &header->use;
    }
    std::lock_guard<std::mutex> lock(pool->mutex_);
    pool->stats_.in_use_by_use[std::size_t(*was)] -= size;
    pool->stats_.in_use_by_use[std::size_t(use)] += size;
    *was = use;
  }

  /// Starts a new peak from what is in use now (e.g. to measure one training step).
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_in_use = stats_.in_use;
    stats_.at_peak = stats_.in_use_by_use;
    stats_.peak_held = stats_.held;
  }

  /// Counts `bytes` of a scratch pool's (ScratchMemory's) peak as held and in use on top of what
  /// this pool holds now: the processor's peak includes it, its cache does not keep it.
  void count_scratch(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.in_use + bytes > stats_.peak_in_use) {
      stats_.at_peak = stats_.in_use_by_use;
      stats_.at_peak[std::size_t(MemoryUse::workspace)] += bytes;
    }
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use + bytes);
    stats_.peak_held = std::max(stats_.peak_held, stats_.held + bytes);
  }

  /// Gives every cached block back to the system.
  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.begin(); it != free_.end();) {
      const auto [base, size] = *it;
      if (!whole_segment(base, size)) {
        ++it;
        continue;
      }
      sizes_of(base).erase({size, base});
      it = free_.erase(it);
      give_back(base, size);
    }
  }

 private:
  struct Header {
    MemoryPool* pool;
    std::size_t size;
    MemoryUse use;
  };
  static_assert(sizeof(Header) <= alignment);

  // A GPU's memory as cudaMalloc gave it; requests under small_request share small segments.
  struct Segment {
    std::size_t bytes;
    bool small;  // shared by requests under small_request
  };
  static constexpr std::size_t small_request = std::size_t{1} << 20;
  static constexpr std::size_t small_segment = std::size_t{2} << 20;

  explicit MemoryPool(const MemorySource& source) : source_(source) {}

  void drop_reference() {
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Cached blocks joined into the one asked for: their faulted-in pages are kept (mremap moves
  // them), only what they lack is new memory.
  struct Resize {
    std::vector<std::pair<char*, std::size_t>> pieces;  // the blocks (or their fronts), in order
    std::size_t from = 0;                               // their bytes; 0: no resize
  };

  // Under the lock: a cached block for a request of `size` bytes, or nullptr for a fresh map.
  // Where the source gives memory back in parts, the smallest cached block that fits is split
  // (its tail stays cached, and merges back when the front is freed), so a block holds exactly
  // what was asked, or the biggest smaller one grown; never a new block mapped while cached pages
  // could serve: page faults, and the kernel zeroing each page, cost a U-Net step a fifth of its
  // time when every miss maps afresh. A source whose blocks stay whole serves the smallest block
  // that fits while wasting at most a quarter (`granted` is its size).
  void* take_cached(std::size_t size, std::size_t& granted, Resize& resize) {
    if (in_segments()) return take_part(size, granted);
    if (by_size_.empty()) return nullptr;
    auto fit = by_size_.lower_bound({size, nullptr});
    if (!source_.in_parts) {
      if (fit == by_size_.end()) return nullptr;
      const auto [found, block] = *fit;
      // Whole blocks within a quarter; a plan of a host run counts exact sizes, as split blocks.
      const bool exact = source_.space == MemorySpace::none;
      if (found > size + (exact ? 0 : size / 4)) return nullptr;
      uncache(block, found);
      granted = found;
      return block;
    }
    if (fit != by_size_.end()) {
      const auto [found, block] = *fit;
      uncache(block, found);
      // Pages of one mapping can be unmapped and remapped separately: the tail is a block too,
      // cached however small (it merges back when the front is freed; unmapped, its pages would
      // fault in again).
      if (found > size) cache(block + size, found - size);
      return block;
    }
    // No cached block is big enough: the biggest ones are joined, front to back, the last one's
    // front only where it has more than the rest needs. Steps free and ask the same sizes in a
    // different order, so one block rarely fits; growing it with fresh pages while others go back
    // costs pages the kernel zeroes at every step.
    while (resize.from < size && !by_size_.empty()) {
      const auto [biggest, block] = *by_size_.rbegin();
      uncache(block, biggest);
      const std::size_t take = std::min(biggest, size - resize.from);
      if (take < biggest) cache(block + take, biggest - take);
      resize.pieces.emplace_back(block, take);
      resize.from += take;
    }
    return resize.pieces.front().first;
  }

  // Under the lock: a free block joins the cache, merged with the free blocks just before and
  // just after it in memory (they may come from other mappings: munmap takes any mapped range),
  // when the source gives memory back in parts.
  void cache(char* base, std::size_t size) {
    if (!source_.in_parts && !in_segments()) {
      free_.emplace(base, size);
      by_size_.emplace(size, base);
      return;
    }
    auto next = free_.lower_bound(base);
    if (next != free_.end() && base + size == next->first && joinable(base, next->first)) {
      sizes_of(next->first).erase({next->second, next->first});
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == base && joinable(before->first, base)) {
        sizes_of(before->first).erase({before->second, before->first});
        base = before->first;
        size += before->second;
        free_.erase(before);
      }
    }
    free_.emplace(base, size);
    sizes_of(base).emplace(size, base);
  }

  void uncache(char* base, std::size_t size) {
    free_.erase(base);
    sizes_of(base).erase({size, base});
  }

  // Under the lock: unmaps cached blocks, smallest first (the big ones serve more requests, split
  // or whole), until the pool holds at most `limit`.
  void trim_to(std::size_t limit) {
    while (stats_.held > limit && !by_size_.empty()) {
      const auto [size, base] = *by_size_.begin();
      uncache(base, size);
      give_back(base, size);
    }
  }

  // Under the lock: memory back to the source (a whole segment, where the pool keeps segments).
  void give_back(char* base, std::size_t size) {
    segments_.erase(base);
    source_.unmap(base, size);
    stats_.held -= size;
  }

  // Whether blocks are parts of segments taken whole from the source: a GPU's, or a plan's that
  // stands for one.
  bool in_segments() const { return !source_.in_parts && keeps_cache(); }

  // Under the lock: the smallest free part of a segment of the request's class (small or big)
  // that fits `size`, split where the rest is worth keeping free; nullptr for a new segment.
  void* take_part(std::size_t size, std::size_t& granted) {
    const bool small = size < small_request;
    auto& sizes = small ? small_sizes_ : by_size_;
    const auto fit = sizes.lower_bound({size, nullptr});
    if (fit == sizes.end()) return nullptr;
    const auto [found, part] = *fit;
    uncache(part, found);
    if (found - size < (small ? std::size_t{4096} : pooled_from))
      granted = found;
    else
      cache(part + size, found - size);  // the rest stays free in its segment
    return part;
  }
  // What a new segment for a block of `granted` bytes takes from the source.
  static std::size_t segment_bytes(std::size_t granted) {
    return granted < small_request ? small_segment : granted;
  }

  // Whether free parts at `a` and `b` may merge: always in host pages, within one segment else.
  bool joinable(const char* a, const char* b) const {
    return !in_segments() || segment_of(a) == segment_of(b);
  }
  std::map<char*, Segment>::const_iterator segment_of(const char* at) const {
    const auto it = segments_.upper_bound(const_cast<char*>(at));
    return it == segments_.begin() ? segments_.end() : std::prev(it);
  }
  // The free parts, by size, of the class of the segment `at` lies in.
  std::set<std::pair<std::size_t, char*>>& sizes_of(const char* at) {
    if (!in_segments()) return by_size_;
    const auto segment = segment_of(at);
    return segment != segments_.end() && segment->second.small ? small_sizes_ : by_size_;
  }
  // Whether a free part is what the source gave (so it may go back).
  bool whole_segment(char* base, std::size_t size) const {
    if (!in_segments()) return true;
    const auto it = segments_.find(base);
    return it != segments_.end() && it->second.bytes == size;
  }

  // Whether cached blocks stay until the source runs out: a GPU's, or a plan standing for one.
  bool keeps_cache() const {
    return source_.space == MemorySpace::device || source_.rounds_as_device;
  }

  static std::size_t round_up(std::size_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  }
  // 64 classes per power of two: at most 1.6% rounding. (With few classes, a power-of-two tensor
  // takes a whole class more than it needs, since the block's header tips it into the next.)
  static std::size_t size_class(std::size_t bytes) {
    const std::size_t power =
        bytes ? std::size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)))
              : 1;
    const std::size_t step = std::max<std::size_t>(power / 64, 4096);
    return (bytes + step - 1) / step * step;
  }
  static void* map(std::size_t size) {
    constexpr std::size_t huge_page = std::size_t{2} << 20;
    const bool huge = size >= 2 * huge_page;  // fewer faults and TLB misses
    // A big block starts on a huge page: mapped anywhere, a 4 MiB bfloat16 activation held one
    // huge page or none, and faulted in 4 KiB pages.
    const std::size_t mapped = huge ? size + huge_page : size;
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (!huge) return p;
    char* const start = static_cast<char*>(p);
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    char* const block = start + ((huge_page - at % huge_page) % huge_page);
    // The spare huge page, split between the two ends (the tail always keeps a page of it or more).
    if (block > start) munmap(start, static_cast<std::size_t>(block - start));
    munmap(block + size, static_cast<std::size_t>(start + mapped - (block + size)));
#ifdef MADV_HUGEPAGE
    madvise(block, size, MADV_HUGEPAGE);
#endif
    return block;
  }
  static void unmap(void* base, std::size_t size) { munmap(base, size); }
  // A plan's addresses come one after another out of one inaccessible reservation, taken once per
  // process: a mapping per block would cost plans of thousands of processors most of their time
  // in the kernel, their worker threads queueing for the process's memory map. The range starts
  // again from its beginning whenever no block of it is alive (between plans); a plan that needs
  // more than the range at once gets mappings of its own for the rest.
  static constexpr std::size_t plan_range = std::size_t{1} << 40;
  struct PlanRange {
    char* base = nullptr;
    std::mutex mutex;
    std::size_t next = 0, alive = 0;
  };
  static PlanRange& plan_addresses() {
    static PlanRange* const range = [] {
      auto* r = new PlanRange();  // never destroyed: blocks may outlive statics
      void* p =
          mmap(nullptr, plan_range, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      r->base = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
      return r;
    }();
    return *range;
  }
  static void* reserve(std::size_t size) {
    PlanRange& range = plan_addresses();
    const std::size_t rounded = round_up(std::max<std::size_t>(size, 1));
    if (range.base) {
      std::lock_guard<std::mutex> lock(range.mutex);
      if (range.alive == 0) range.next = 0;
      if (range.next + rounded <= plan_range) {
        const std::size_t offset = range.next;
        range.next += rounded;
        ++range.alive;
        return range.base + offset;
      }
    }
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  static void unreserve(void* block, std::size_t size) {
    PlanRange& range = plan_addresses();
    const char* at = static_cast<char*>(block);
    if (range.base && at >= range.base && at < range.base + plan_range) {
      std::lock_guard<std::mutex> lock(range.mutex);
      --range.alive;
      return;
    }
    munmap(block, size);
  }

  // `base` (a mapped block of `from` bytes) resized to `to` bytes, keeping its pages.
  static void* remap(void* base, std::size_t from, std::size_t to) {
    // ThreadSanitizer (GCC 12's) does not see mremap: pages it moves keep the history of the
    // addresses they land on, so another processor's earlier block there reads as a race. Under
    // it the block is mapped afresh (it is a cached block: its contents need not be kept).
    if constexpr (moves_pages) {
      void* p = mremap(base, from, to, MREMAP_MAYMOVE);
      if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
        if (to > from && to >= (std::size_t{4} << 20)) madvise(p, to, MADV_HUGEPAGE);
#endif
        return p;
      }
    }
    unmap(base, from);
    return map(to);
  }

  // One block of `size` bytes from cached pieces (page-aligned, summing to at most `size`): the
  // first grown to the whole, the others' pages moved after it. A piece that cannot be moved is
  // given back; the grown block's fresh pages stand in for it.
  static void* join(const std::vector<std::pair<char*, std::size_t>>& pieces, std::size_t size) {
    char* base = static_cast<char*>(remap(pieces.front().first, pieces.front().second, size));
    std::size_t at = pieces.front().second;
    for (std::size_t i = 1; i < pieces.size(); ++i) {
      const auto [piece, bytes] = pieces[i];
      if (!base || !move_pages(piece, bytes, base + at)) unmap(piece, bytes);
      at += bytes;
    }
    return base;
  }

  // Moves the pages at `from` to `to` (inside a mapping of this pool), replacing what was there.
  static bool move_pages(char* from, std::size_t bytes, char* to) {
    if constexpr (moves_pages)
      return mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED;
    (void)from, (void)bytes, (void)to;
    return false;
  }

  MemorySource source_;
  mutable std::mutex mutex_;
  MemoryStats stats_;
  std::map<char*, std::size_t> free_;                    // cached blocks by address: their sizes
  std::map<char*, Segment> segments_;                    // in_segments(): what the source gave
  std::set<std::pair<std::size_t, char*>> by_size_;      // the cached blocks by size
  std::set<std::pair<std::size_t, char*>> small_sizes_;  // in_segments(): small segments' parts
  std::size_t high_water_ = 0;  // the peak in use since the pool began: reset_peak() keeps it
  bool open_ = true;
  std::atomic<std::uint8_t> use_{0};  // MemoryUse of new blocks
  std::atomic<long> references_{1};   // the owner, plus one per live block
};

}  // namespace meshtensor
