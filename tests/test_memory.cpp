// The per-processor memory pool: reuse without new system memory (whole, split or grown blocks),
// free neighbours merged, exact accounting, a cache that never holds more than the peak in use,
// blocks freed on other threads, one pool per processor under the threads transport, and pools on
// another source (a GPU's memory), whose blocks stay whole.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "support/environment.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_memory {

TEST_CASE("a freed block serves the next allocation of its size without new system memory") {
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  void* a = pool.allocate(1'000'000);
  const MemoryStats after_first = pool.stats();
  CHECK(after_first.in_use >= 1'000'000);
  CHECK(after_first.system_allocations == 1);
  MemoryPool::deallocate(a);
  CHECK(pool.stats().in_use == 0);
  void* b = pool.allocate(990'000);  // the cached block's front; its small tail stays cached
  CHECK(pool.stats().system_allocations == 1);
  CHECK(pool.stats().in_use < after_first.in_use);
  CHECK(pool.stats().held == after_first.held);
  MemoryPool::deallocate(b);
  CHECK(reinterpret_cast<std::uintptr_t>(b) % MemoryPool::alignment == 0);
}

TEST_CASE("a block from the cache holds what was asked, as a plan counts it") {
  // A cached block somewhat bigger than a request gives its front; the tail stays cached (the
  // pool's in-use bytes are the plan's, whatever the cache held before).
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  void* whole = pool.allocate(4'000'000);
  const MemoryStats first = pool.stats();
  MemoryPool::deallocate(whole);
  void* front = pool.allocate(3'600'000);
  const MemoryStats second = pool.stats();
  CHECK(second.in_use < 3'700'000);
  CHECK(second.held == first.held);
  void* tail = pool.allocate(300'000);  // from the cached tail: no new memory
  CHECK(pool.stats().fresh_bytes == first.fresh_bytes);
  CHECK(pool.stats().in_use < 4'000'000);
  MemoryPool::deallocate(front);
  MemoryPool::deallocate(tail);
  CHECK(pool.stats().in_use == 0);
}

TEST_CASE("a request no cached block fits splits a bigger one or grows a smaller one") {
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  void* big = pool.allocate(4'000'000);
  std::memset(big, 1, 4'000'000);
  MemoryPool::deallocate(big);
  const MemoryStats cached = pool.stats();
  CHECK(cached.in_use == 0);

  // Far smaller: the front of the cached block, its tail stays cached; nothing new is mapped.
  auto* front = static_cast<unsigned char*>(pool.allocate(1'000'000));
  CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
  CHECK(pool.stats().held == cached.held);
  CHECK(front[999'999] == 1);             // the cached block's page, not a fresh zero page
  void* rest = pool.allocate(2'500'000);  // served from the tail
  CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
  MemoryPool::deallocate(front);
  MemoryPool::deallocate(rest);

  // Bigger than any cached block: one grows, and only the growth is new memory.
  const MemoryStats before_growth = pool.stats();
  auto* grown = static_cast<unsigned char*>(pool.allocate(6'000'000));
  const MemoryStats after_growth = pool.stats();
  CHECK(after_growth.fresh_bytes - before_growth.fresh_bytes < 6'000'000);
  CHECK(after_growth.held <= after_growth.peak_in_use);
  std::memset(grown, 2, 6'000'000);
  CHECK(grown[5'999'999] == 2);
  MemoryPool::deallocate(grown);
}

TEST_CASE("a request bigger than every cached block joins them, their pages moved, not new") {
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  auto* a = static_cast<unsigned char*>(pool.allocate(3'000'000));
  void* between = pool.allocate(100'000);  // keeps a and c apart in memory: they cannot merge
  auto* c = static_cast<unsigned char*>(pool.allocate(3'000'000));
  std::memset(a, 1, 3'000'000);
  std::memset(c, 3, 3'000'000);
  MemoryPool::deallocate(a);
  MemoryPool::deallocate(c);
  const MemoryStats cached = pool.stats();

  auto* joined = static_cast<unsigned char*>(pool.allocate(5'000'000));
  CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
  CHECK(pool.stats().held == cached.held);
  CHECK(pool.stats().system_allocations == cached.system_allocations);
  // Pages of both blocks, their values kept (moved pages; fresh ones would read zero).
  if (MemoryPool::moves_pages) {
    std::set<int> seen;
    for (std::size_t i = 0; i < 5'000'000; i += 4096) seen.insert(joined[i]);
    CHECK(seen.count(1) == 1);
    CHECK(seen.count(3) == 1);
  }
  std::memset(joined, 2, 5'000'000);
  MemoryPool::deallocate(joined);
  MemoryPool::deallocate(between);
  // What the first block did not need stays cached and serves without new memory.
  void* rest = pool.allocate(900'000);
  CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
  MemoryPool::deallocate(rest);
}

TEST_CASE("the halves of a split block, freed, serve the whole block again") {
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  MemoryPool::deallocate(pool.allocate(8'000'000));
  const MemoryStats cached = pool.stats();
  // Split in two (front, then the tail), freed in either order: one free block again.
  for (const bool front_first : {true, false}) {
    void* front = pool.allocate(3'000'000);
    void* back = pool.allocate(4'000'000);
    CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
    MemoryPool::deallocate(front_first ? front : back);
    MemoryPool::deallocate(front_first ? back : front);
    void* whole = pool.allocate(7'900'000);
    CHECK(pool.stats().fresh_bytes == cached.fresh_bytes);
    CHECK(pool.stats().held == cached.held);
    MemoryPool::deallocate(whole);
  }
}

TEST_CASE("the pool never holds more than the peak in use") {
  LocalProcessor scope;
  MemoryPool& pool = memory_pool();
  for (std::size_t round = 0; round < 20; ++round) {
    // Sizes that never repeat: every allocation misses the cache.
    void* p = pool.allocate((round + 1) * 300'000);
    void* q = pool.allocate(5'000'000 - round * 100'000);
    MemoryPool::deallocate(p);
    MemoryPool::deallocate(q);
    const MemoryStats s = pool.stats();
    CHECK(s.held <= s.peak_in_use);
    CHECK(s.peak_held <= s.peak_in_use);
  }
  pool.trim();
  CHECK(pool.stats().held == 0);
}

TEST_CASE("a block may be freed on another thread, after its pool's owner is gone") {
  Array<float> survivor;
  {
    LocalProcessor scope;
    survivor = Array<float>::from_shape({256, 256});
    on_host(survivor).fill(1.0f);
    MemoryPool& pool = memory_pool();
    std::thread other([block = Array<float>::from_shape({512, 512})]() mutable { block = {}; });
    other.join();
    CHECK(pool.stats().in_use >= 256 * 256 * sizeof(float));
    CHECK(pool.stats().in_use < 512 * 512 * sizeof(float));
  }
  CHECK(on_host(survivor)(255, 255) == 1.0f);  // still valid; its pool goes when it does
}

TEST_CASE("each processor of the threads transport counts only its own blocks") {
  const auto in_use = on_mesh("p:2", [](Mesh& m) {
    const auto before = memory_stats().in_use;
    auto t = full<float>(m, "x:1000, y:1000", "x:p", 1.0f);  // 500 x 1000 floats each
    m.world().barrier();
    return static_cast<double>(memory_stats().in_use - before);
  });
  for (double bytes : in_use) {
    CHECK(bytes >= 500 * 1000 * sizeof(float));
    CHECK(bytes < 1.2 * 500 * 1000 * sizeof(float));
  }
}

namespace {
// A source like a GPU's: blocks come and go only whole. It records what is mapped, so the test
// can see that every unmap names a whole block.
struct WholeBlocks {
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<void*, std::size_t>& mapped() {
    static std::map<void*, std::size_t> blocks;
    return blocks;
  }
  static int& bad_unmaps() {
    static int count = 0;
    return count;
  }
  static void* map(std::size_t bytes) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    std::lock_guard<std::mutex> lock(mutex());
    mapped()[p] = bytes;
    return p;
  }
  static void unmap(void* base, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex());
      auto found = mapped().find(base);
      if (found == mapped().end() || found->second != bytes) {
        ++bad_unmaps();
        return;
      }
      mapped().erase(found);
    }
    std::free(base);
  }
  static MemorySource source() {
    MemorySource s;
    s.map = &map;
    s.unmap = &unmap;
    s.in_parts = false;
    s.name = "whole blocks";
    return s;
  }
};
}  // namespace

TEST_CASE("a pool on a source of whole blocks reuses them whole and gives them back whole") {
  {
    LocalProcessor scope(Device::cpu(), WholeBlocks::source());
    MemoryPool& pool = memory_pool();
    CHECK(std::string(pool.source().name) == "whole blocks");

    void* big = pool.allocate(4'000'000);
    void* small = pool.allocate(1'000'000);
    CHECK(pool.stats().system_allocations == 2);
    MemoryPool::deallocate(big);
    MemoryPool::deallocate(small);
    // A request between the two: not a split of the big block (it could not be given back in
    // parts) nor a growth of the small one, but the big block whole when it fits within a quarter.
    void* again = pool.allocate(3'900'000);
    CHECK(again == big);
    CHECK(pool.stats().system_allocations == 2);
    void* again_small = pool.allocate(990'000);
    CHECK(again_small == small);
    CHECK(pool.stats().system_allocations == 2);
    MemoryPool::deallocate(again);
    MemoryPool::deallocate(again_small);
    void* between = pool.allocate(2'000'000);  // fits neither within a quarter: a new block
    CHECK(pool.stats().system_allocations == 3);
    MemoryPool::deallocate(between);

    // Tiny blocks come from the source too (no malloc: it may not be the GPU's), without a header:
    // the pointer is the source's block.
    void* tiny = pool.allocate(16);
    {
      std::lock_guard<std::mutex> lock(WholeBlocks::mutex());
      CHECK(WholeBlocks::mapped().count(tiny) == 1);
    }
    MemoryPool::deallocate(tiny);

    // Arrays on such a pool work as on any other, and may be freed on another thread.
    auto array = Array<float>::from_shape({300, 300});
    on_host(array).fill(2.0f);
    CHECK(on_host(array)(299, 299) == 2.0f);
    std::thread other([block = std::move(array)]() mutable { block = {}; });
    other.join();
    CHECK(pool.stats().in_use == 0);
    const MemoryStats s = pool.stats();
    CHECK(s.held <= s.peak_in_use);
  }
  std::lock_guard<std::mutex> lock(WholeBlocks::mutex());
  CHECK(WholeBlocks::bad_unmaps() == 0);
  CHECK(WholeBlocks::mapped().empty());  // the pool's release gave every block back
}

TEST_CASE(
    "a GPU's pool serves requests from parts of its segments and gives back only whole ones") {
  void* outliving = nullptr;
  {
    MemorySource source = WholeBlocks::source();
    source.space = MemorySpace::device;  // no host access: allocate and free only
    LocalProcessor scope(Device::cpu(), source);
    MemoryPool& pool = memory_pool();
    void* segment = pool.allocate(4'000'000);
    const std::size_t segment_bytes = pool.stats().held;
    MemoryPool::deallocate(segment);

    // Smaller requests take parts of the free segment: no new memory, nothing held beyond it.
    void* front = pool.allocate(1'500'000);
    void* back = pool.allocate(2'000'000);
    CHECK(front == segment);
    CHECK(static_cast<char*>(back) > static_cast<char*>(front));
    CHECK(pool.stats().system_allocations == 1);
    CHECK(pool.stats().held == segment_bytes);

    // Requests under a MiB share small segments of their own, never a part of a big one.
    void* small = pool.allocate(100'000);
    void* beside = pool.allocate(200'000);
    CHECK(pool.stats().system_allocations == 2);
    CHECK(pool.stats().held == segment_bytes + (std::size_t{2} << 20));
    CHECK(static_cast<char*>(beside) > static_cast<char*>(small));
    CHECK(static_cast<char*>(beside) < static_cast<char*>(small) + (std::size_t{2} << 20));
    MemoryPool::deallocate(small);
    MemoryPool::deallocate(beside);

    // A segment goes back only whole: not while a part of it is in use.
    MemoryPool::deallocate(front);
    pool.trim();
    CHECK(pool.stats().held == segment_bytes);
    // Its freed parts merge again into the whole segment.
    MemoryPool::deallocate(back);
    void* whole = pool.allocate(4'000'000);
    CHECK(whole == segment);
    CHECK(pool.stats().system_allocations == 2);

    // Free parts of two segments never join (the source gives each back alone), even where their
    // memory happens to be adjacent: a request bigger than each takes a new segment.
    void* other = pool.allocate(4'000'000);
    CHECK(pool.stats().system_allocations == 3);
    MemoryPool::deallocate(whole);
    MemoryPool::deallocate(other);
    outliving = pool.allocate(6'000'000);
    CHECK(pool.stats().system_allocations == 4);
  }
  // A block outliving its pool's owner takes its segment back with it when freed.
  MemoryPool::deallocate(outliving);
  std::lock_guard<std::mutex> lock(WholeBlocks::mutex());
  CHECK(WholeBlocks::bad_unmaps() == 0);
  CHECK(WholeBlocks::mapped().empty());
}

TEST_CASE("host pools keep working while a pool on another source is alive") {
  LocalProcessor device_like(Device::cpu(), WholeBlocks::source());
  void* outside = memory_pool().allocate(100'000);
  {
    LocalProcessor host;
    auto array = Array<double>::from_shape({1000});
    on_host(array).fill(1.0);
    CHECK(on_host(array)(999) == 1.0);
    CHECK(std::string(memory_pool().source().name) == "host memory");
  }
  MemoryPool::deallocate(outside);
  CHECK(memory_pool().stats().in_use == 0);
}

TEST_CASE("a pool counts what its blocks are for, and what it held by use at its peak") {
  for (const auto& source : {MemoryPool::system_pages(), MemoryPool::address_space_only()}) {
    INFO(source.name);
    LocalProcessor scope(Device::cpu(), source);
    MemoryPool& pool = memory_pool();
    auto use_of = [&](MemoryUse use) { return pool.stats().in_use_by_use[std::size_t(use)]; };
    void* kept = pool.allocate(200'000);  // activations by default
    void* weights = pool.allocate(100);   // small: not pooled on the host
    MemoryPool::count_as(weights, MemoryUse::parameters);
    void* message = nullptr;
    {
      const MemoryUseScope halo(MemoryUse::halo);
      message = pool.allocate(300'000);
      CHECK(pool.use() == MemoryUse::halo);
    }
    CHECK(pool.use() == MemoryUse::activations);
    const MemoryStats peak = pool.stats();
    CHECK(use_of(MemoryUse::parameters) >= 100);
    CHECK(use_of(MemoryUse::halo) >= 300'000);
    CHECK(use_of(MemoryUse::activations) + use_of(MemoryUse::parameters) +
              use_of(MemoryUse::halo) ==
          peak.in_use);
    MemoryPool::deallocate(message);
    CHECK(use_of(MemoryUse::halo) == 0);
    const MemoryStats after = pool.stats();
    CHECK(after.at_peak == peak.in_use_by_use);  // the peak was before the message was freed
    MemoryPool::deallocate(weights);
    MemoryPool::deallocate(kept);
    CHECK(pool.stats().in_use_by_use == std::array<std::size_t, memory_uses>{});
  }
}

TEST_CASE("plans whose blocks together outgrow the addresses kept for plans get their own") {
  // Five 256 GiB blocks alive at once on one processor: more than the 1 TiB range plans take
  // their addresses from, so the last ones are mapped apart; every block keeps an address of its
  // own, and a second plan starts the range again.
  const Shape huge{Dim("x", std::int64_t{1} << 36)};
  for (int plan_run = 0; plan_run < 2; ++plan_run) {
    const PlanReport report = plan("p:1", Layout(), [&](Mesh& mesh) {
      std::vector<Tensor<float>> alive;
      std::set<const float*> addresses;
      for (int i = 0; i < 5; ++i) {
        alive.push_back(full<float>(mesh, huge, Layout(), 0.0f));
        addresses.insert(alive.back().array().data());
      }
      CHECK(addresses.size() == 5);
    });
    CHECK(report.processors[0].memory.peak_in_use >= 5 * (std::size_t{1} << 38));
  }
}

TEST_CASE("a block over MESHTENSOR_MAX_BLOCK_BYTES is refused by name before it is allocated") {
  const Setting limit("MESHTENSOR_MAX_BLOCK_BYTES", "1MiB");
  // 1024 x 512 floats on each of two processors: 2 MiB each; the same split of y:256 fits.
  struct Outcome {
    std::size_t fitting_size;  // the block of the split that fits
    std::string message;       // the refusal of the one that does not
  };
  // Checked after the run: Catch2's assertions are not thread-safe (a race under ThreadSanitizer).
  const auto outcomes = on_mesh("p:2", [](Mesh& m) {
    Outcome outcome{zeros<float>(m, "x:2048, y:256", "x:p").local().size(), "no error"};
    try {
      (void)zeros<float>(m, "x:2048, y:512", "x:p");
    } catch (const ShapeError& e) {
      outcome.message = e.what();
    }
    return outcome;
  });
  REQUIRE_FALSE(outcomes.empty());
  for (const auto& outcome : outcomes) {
    CHECK(outcome.fitting_size == 1024 * 256);
    const std::string& message = outcome.message;
    INFO(message);
    CHECK_THAT(message, Catch::Contains("[x=2048, y=512]") && Catch::Contains("float32") &&
                            Catch::Contains("processor") && Catch::Contains("of 2") &&
                            Catch::Contains("2097152 bytes (2.0 MiB)") &&
                            Catch::Contains("MESHTENSOR_MAX_BLOCK_BYTES (1.0 MiB)"));
  }
}

TEST_CASE("sizes past 64 bits or any machine's memory are errors, not wrapped sizes or hangs") {
  LocalProcessor scope;
  // 2^62 x 8 elements wrap to 0 in 64 bits, which allocated nothing.
  CHECK_THROWS_AS(Array<float>::from_shape({std::size_t{1} << 62, 8}), ShapeError);
  // 2^61 floats: 8 EiB, more than this machine has.
  CHECK_THROWS_WITH(Array<float>::from_shape({std::size_t{1} << 61}),
                    Catch::Contains("this machine's memory"));
  // The pool's size classes once looked for a power of two above 2^63 forever.
  CHECK_THROWS_AS(memory_pool().allocate(std::size_t{1} << 63), ShapeError);
  CHECK(memory_pool().stats().in_use == 0);
}

}  // namespace test_memory
