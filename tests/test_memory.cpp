// The per-processor memory pool: reuse without new system memory (whole, split or grown blocks),
// free neighbours merged, exact accounting, a cache that never holds more than the peak in use,
// blocks freed on other threads, and one pool per processor under the threads transport.
#include <catch2/catch.hpp>

#include <cstring>
#include <thread>

#include <meshtensor/meshtensor.hpp>

#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

TEST_CASE("a freed block serves the next allocation of its size without new system memory") {
  ProcessorMemory scope;
  MemoryPool& pool = memory_pool();
  void* a = pool.allocate(1'000'000);
  const MemoryStats after_first = pool.stats();
  CHECK(after_first.in_use >= 1'000'000);
  CHECK(after_first.system_allocations == 1);
  MemoryPool::deallocate(a);
  CHECK(pool.stats().in_use == 0);
  void* b = pool.allocate(990'000);  // within a quarter of the cached block's size
  CHECK(pool.stats().system_allocations == 1);
  CHECK(pool.stats().held == after_first.held);
  MemoryPool::deallocate(b);
  CHECK(reinterpret_cast<std::uintptr_t>(b) % MemoryPool::alignment == 0);
}

TEST_CASE("a request no cached block fits splits a bigger one or grows a smaller one") {
  ProcessorMemory scope;
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

TEST_CASE("the halves of a split block, freed, serve the whole block again") {
  ProcessorMemory scope;
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
  ProcessorMemory scope;
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
    ProcessorMemory scope;
    survivor = Array<float>::from_shape({256, 256});
    survivor.fill(1.0f);
    MemoryPool& pool = memory_pool();
    std::thread other([block = Array<float>::from_shape({512, 512})]() mutable { block = {}; });
    other.join();
    CHECK(pool.stats().in_use >= 256 * 256 * sizeof(float));
    CHECK(pool.stats().in_use < 512 * 512 * sizeof(float));
  }
  CHECK(survivor(255, 255) == 1.0f);  // still valid; its pool goes when it does
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
