// A processor's context (device/processor.hpp): owned by its mesh, current on the thread that runs
// it and only there, with its own pool, threads and backend state; the device is chosen apart from
// the transport and refused where the transport cannot carry its memory.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

using namespace meshtensor;
using Catch::Matchers::Contains;

namespace {
struct Counter {
  int value = 0;
};
}  // namespace

TEST_CASE("each processor of a run has its own context, current while its mesh lives") {
  Processor& outside = current_processor();
  std::mutex mutex;
  std::set<Processor*> seen;
  std::set<MemoryPool*> pools;
  std::vector<int> counts;
  threads::run("p:3", [&](Mesh& mesh) {
    Processor& here = current_processor();
    const bool is_mesh_context = &here == &mesh.processor_context();
    here.state<Counter>().value += mesh.processor() + 1;
    const int count = mesh.context<Counter>().value;  // the same state, reached through the mesh
    std::lock_guard<std::mutex> lock(mutex);
    CHECK(is_mesh_context);
    CHECK(here.device() == Device::cpu());
    seen.insert(&here);
    pools.insert(&memory_pool());
    counts.push_back(count);
  });
  CHECK(seen.size() == 3);
  CHECK(pools.size() == 3);
  CHECK(std::set<int>(counts.begin(), counts.end()) == std::set<int>{1, 2, 3});
  CHECK(&current_processor() == &outside);  // the caller's thread was never a processor's
}

TEST_CASE("a local processor is current for its lifetime and restores the previous one") {
  Processor& before = current_processor();
  {
    LocalProcessor local;
    CHECK(&current_processor() == &local.processor());
    {
      LocalProcessor inner;
      CHECK(&current_processor() == &inner.processor());
      CHECK(&memory_pool() == &inner.processor().pool());
    }
    CHECK(&current_processor() == &local.processor());
  }
  CHECK(&current_processor() == &before);
}

TEST_CASE("state is made once per processor, on first use, and may use other state") {
  struct Inner {
    int made = 1;
  };
  struct Outer {
    int inner_made = current_processor().state<Inner>().made;  // state made inside state
  };
  LocalProcessor local;
  CHECK(local.processor().state<Outer>().inner_made == 1);
  local.processor().state<Inner>().made = 5;
  CHECK(local.processor().state<Inner>().made == 5);
  LocalProcessor other;
  CHECK(other.processor().state<Inner>().made == 1);
}

TEST_CASE("compute threads are the processor's share of the cores") {
  const char* forced = std::getenv("MESHTENSOR_THREADS_PER_PROCESSOR");
  if (forced) return;  // the variable decides for every processor
  std::vector<int> threads(2);
  threads::run("p:2", [&](Mesh& mesh) { threads[mesh.processor()] = compute_threads(); });
  CHECK(threads[0] == threads_per_processor(2));
  CHECK(threads[1] == threads_per_processor(2));
}

TEST_CASE("devices are named and parsed") {
  CHECK(Device::cpu().to_string() == "cpu");
  CHECK(Device::cuda(1).to_string() == "cuda:1");
  CHECK(Device::plan().to_string() == "plan");
  CHECK(parse_device_kind("cuda", "--device") == DeviceKind::cuda);
  CHECK_THROWS_WITH(parse_device_kind("gpu", "--device"),
                    Contains("--device is \"gpu\"") && Contains("\"cpu\", \"cuda\" and \"plan\""));
}

TEST_CASE("a device the transport cannot carry is refused with the valid pairs") {
  CHECK(chosen_device("threads") == DeviceKind::cpu);
  CHECK(chosen_device("mpi", "cpu") == DeviceKind::cpu);
  CHECK(chosen_device("nccl") == DeviceKind::cuda);
  CHECK_THROWS_WITH(chosen_device("threads", "cuda", "--device"),
                    Contains("--device is \"cuda\"") && Contains("threads transport") &&
                        Contains("nccl with cuda"));
  CHECK_THROWS_WITH(chosen_device("nccl", "cpu", "--device"),
                    Contains("--device is \"cpu\"") && Contains("GPU memory"));
  CHECK_THROWS_WITH(chosen_device("mpi", "plan", "--device"), Contains("without data"));

  std::vector<std::string> refusals;
  std::mutex mutex;
  threads::spawn(2, [&](std::unique_ptr<Communicator> world) {
    try {
      Mesh mesh("p:2", std::move(world), Device::cuda(0));
    } catch (const MeshError& e) {
      std::lock_guard<std::mutex> lock(mutex);
      refusals.push_back(e.what());
    }
  });
  REQUIRE(refusals.size() == 2);
  CHECK_THAT(refusals[0], Contains("threads transport carries messages from cpu memory") &&
                              Contains("cannot compute on device cuda:0"));
}
