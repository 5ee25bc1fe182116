// Compute threads on cores other programs want (device/thread_waiting.hpp): OpenMP's idle threads
// spin only briefly while the sleeping team lives, which the process keeps while its processors
// wait `brief`, or wait `adaptive` and the machine has more runnable threads than cores.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include <pthread.h>

#include <meshtensor/device/processor.hpp>

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_thread_waiting {

namespace {

double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// The CPU time an OpenMP worker spends after its share of a parallel loop: the loop's end and its
// wait for the next loop, spinning then asleep. Measured on a thread of its own, whose OpenMP
// threads are its own.
double idle_worker_seconds() {
  double seconds = -1;
  std::thread([&] {
    clockid_t worker_clock{};
    double at_end = 0;
#pragma omp parallel num_threads(2)
    {
#ifdef _OPENMP
      if (omp_get_thread_num() == 1) {
        pthread_getcpuclockid(pthread_self(), &worker_clock);
        at_end = cpu_seconds(worker_clock);
      }
#endif
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    seconds = cpu_seconds(worker_clock) - at_end;
  }).join();
  return seconds;
}

}  // namespace

TEST_CASE("whether cores are shared is decided by runs of samples, not by one") {
  detail::SharedCoresSignal signal;
  const int cores = 4;
  for (int i = 0; i < 50; ++i)
    CHECK_FALSE(signal.observe(i % 2 ? 2 : 9, cores));  // moments of a daemon
  CHECK_FALSE(signal.observe(5, cores));
  CHECK_FALSE(signal.observe(5, cores));
  CHECK(signal.observe(5, cores));  // three in a row: another program stays busy
  for (int i = 1; i < detail::SharedCoresSignal::free_samples; ++i) CHECK(signal.observe(4, cores));
  CHECK_FALSE(signal.observe(4, cores));  // ten in a row without: free again

  const std::optional<int> runnable = detail::runnable_threads_besides_caller();
  REQUIRE(runnable);  // Linux's /proc/loadavg
  CHECK(*runnable >= 0);
  CHECK(detail::machine_cores() >= 1);
}

TEST_CASE("while the sleeping team lives, OpenMP's idle threads spin briefly") {
#if !defined(_OPENMP) || defined(__clang__)
  WARN("skipped: the sleeping team shortens GNU OpenMP's spinning only");
#else
  const auto skipped = [](const char* why) { WARN("skipped: " << why); };
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT"))
    return skipped("OMP_WAIT_POLICY or GOMP_SPINCOUNT sets OpenMP's spinning here");
  auto& control = detail::ThreadWaitingControl::process();
  if (control.spinning_briefly()) return skipped("the process's team is asleep: cores are shared");
  double spinning = 0;
  for (int i = 0; i < 3; ++i) spinning = std::max(spinning, idle_worker_seconds());
  if (spinning < 1e-3) return skipped("OpenMP's spinning is too short to see on this CPU");

  detail::SleepingOpenMpTeam team;
  team.start(omp_get_num_procs());  // more OpenMP threads than cores, whatever else runs
  double brief = 1;
  for (int i = 0; i < 3; ++i) brief = std::min(brief, idle_worker_seconds());
  team.release();
  INFO("idle worker's CPU time: " << spinning << " s spinning as OpenMP does, " << brief
                                  << " s beside the sleeping team");
  CHECK(brief < spinning / 4);
#endif
}

TEST_CASE("a processor registers how its threads wait while it computes on several") {
  auto& control = detail::ThreadWaitingControl::process();
  Settings brief;
  brief.thread_waiting = ThreadWaiting::brief;
  const int before = control.processors(ThreadWaiting::brief);
  {
    Processor processor(Device::cpu(), 2, brief);
    CHECK(control.processors(ThreadWaiting::brief) == before + 1);
#if defined(_OPENMP) && !defined(__clang__)
    CHECK(control.spinning_briefly());
#endif
    processor.set_compute_threads(1);  // one thread never waits for another
    CHECK(control.processors(ThreadWaiting::brief) == before);
    processor.set_compute_threads(3);
    CHECK(control.processors(ThreadWaiting::brief) == before + 1);
  }
  CHECK(control.processors(ThreadWaiting::brief) == before);

  Processor planning(Device::plan(), 4, brief);  // a plan's processors compute nothing
  CHECK(control.processors(ThreadWaiting::brief) == before);
  Settings openmp;
  openmp.thread_waiting = ThreadWaiting::openmp;
  Processor left_to_openmp(Device::cpu(), 4, openmp);
  CHECK(control.processors(ThreadWaiting::brief) == before);
  CHECK(control.processors(ThreadWaiting::openmp) == 0);
}

}  // namespace test_thread_waiting
