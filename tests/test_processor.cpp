// A processor's context (device/processor.hpp): owned by its mesh, current on the thread that runs
// it and only there, with its own pool, threads and backend state; the device is chosen apart from
// the transport and refused where the transport cannot carry its memory.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

#include <meshtensor/meshtensor.hpp>

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_processor {
using Catch::Matchers::Contains;

namespace {
struct Counter {
  int value = 0;
};

// An environment variable set (or, with nullptr, removed) for the scope, then put back.
class ScopedVariable {
 public:
  ScopedVariable(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    value ? ::setenv(name_.c_str(), value, 1) : ::unsetenv(name_.c_str());
  }
  ~ScopedVariable() {
    old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str());
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A process started by hand: none of the launchers' variables (this test may run under mpirun).
std::vector<std::unique_ptr<ScopedVariable>> started_by_hand() {
  std::vector<std::unique_ptr<ScopedVariable>> cleared;
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", "PMIX_RANK",
        "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
        "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK"})
    cleared.push_back(std::make_unique<ScopedVariable>(name, nullptr));
  return cleared;
}
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

TEST_CASE("a processor's memory is its thread's current memory; other threads take the process's") {
  CHECK(&current_memory() == &process_memory());
  CHECK(&current_processor().memory() == &process_memory());  // the process's processor's too
  LocalProcessor local;
  CHECK(&current_memory() == &local.processor().memory());
  CHECK(&memory_pool() == &local.processor().pool());
  local.processor().set_label("processor 2 of 5");
  CHECK(current_memory().label() == "processor 2 of 5");
  // A kernel's worker thread computes for no processor: its blocks are the process's.
  MemoryPool* worker_pool = nullptr;
  std::thread([&] { worker_pool = &memory_pool(); }).join();
  CHECK(worker_pool == &process_memory().pool());
  {
    ScratchMemory scratch;  // the processor allocates from a pool of its own meanwhile
    CHECK(&memory_pool() != &local.processor().own_pool());
    CHECK(&memory_pool() == &current_memory().pool());
  }
  CHECK(&memory_pool() == &local.processor().own_pool());
}

TEST_CASE(
    "a buffer the host would fill in a device's memory is refused, naming the way to fill it") {
  MemorySource source = MemoryPool::system_pages();
  source.space = MemorySpace::device;  // host memory standing for a GPU's
  LocalProcessor local(Device::cpu(), source);
  CHECK_THROWS_WITH(Buffer<float>(4, 1.0f), Catch::Contains("buffer_from_host()"));
  const std::vector<float> values{1, 2, 3};
  CHECK_THROWS_AS(Buffer<float>(values.begin(), values.end()), DeviceError);
  CHECK(Buffer<float>(4).size() == 4);  // uninitialised: for kernels to write
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
  // MESHTENSOR_THREADS_PER_PROCESSOR decides for every processor
  if (environment_settings().threads_per_processor > 0) return;
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
  const auto asked = [](const char* device) {
    Settings settings;
    settings.device = device;
    return settings;
  };
  CHECK(chosen_device("threads", Settings{}) == DeviceKind::cpu);
  CHECK(chosen_device("mpi", asked("cpu")) == DeviceKind::cpu);
  CHECK(chosen_device("nccl", Settings{}) == DeviceKind::cuda);
  CHECK_THROWS_WITH(chosen_device("threads", asked("cuda"), "--device"),
                    Contains("--device is \"cuda\"") && Contains("threads transport") &&
                        Contains("nccl with cuda"));
  CHECK_THROWS_WITH(chosen_device("nccl", asked("cpu"), "--device"),
                    Contains("--device is \"cpu\"") && Contains("GPU memory"));
  CHECK_THROWS_WITH(chosen_device("mpi", asked("plan"), "--device"), Contains("without data"));

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

TEST_CASE("under Slurm, an srun step is a launch and its CPUs per task are a rank's threads") {
  const auto cleared = started_by_hand();
  {
    // Inside an allocation (sbatch, salloc) but not in an srun step: one process, not 8 ranks.
    ScopedVariable job("SLURM_JOB_ID", "42"), tasks("SLURM_NTASKS", "8");
    CHECK_FALSE(launcher_world_size());
    CHECK_FALSE(mpi_launcher_variable());
    // In a step of 8 tasks with 3 CPUs each.
    ScopedVariable step("SLURM_STEP_NUM_TASKS", "8"), cpus("SLURM_CPUS_PER_TASK", "3");
    CHECK(launcher_world_size() == 8);
    CHECK(mpi_launcher_variable() == std::string("SLURM_STEP_NUM_TASKS"));
    CHECK(threads_per_process(Settings{}) == 3);
    Settings five;
    five.threads_per_processor = 5;
    CHECK(threads_per_process(five) == 5);  // the user's choice wins
  }
  ScopedVariable local("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  if (cores_available() == int(std::max(1u, std::thread::hardware_concurrency())))
    CHECK(threads_per_process(Settings{}) ==
          threads_per_processor(2, Settings{}));  // unbound: the node's share
}

TEST_CASE(
    "compute threads follow the process's CPU affinity mask (taskset, a launcher's binding)") {
  const auto cleared = started_by_hand();
  cpu_set_t original;
  REQUIRE(sched_getaffinity(0, sizeof original, &original) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const int cores = cores_available(), alone = threads_per_processor(1, Settings{}),
            launched = threads_per_process(Settings{});
  sched_setaffinity(0, sizeof original, &original);
  CHECK(cores == 1);
  CHECK(alone == 1);
  CHECK(launched == 1);
  CHECK(cores_available() == CPU_COUNT(&original));
}

}  // namespace test_processor
