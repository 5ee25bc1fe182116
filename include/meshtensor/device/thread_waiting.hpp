#pragma once
// How idle compute threads wait where other programs want the cores. The compute threads
// (meshtensor's loops and oneDNN's) are OpenMP threads, which spin a while at the end of each
// parallel loop before they sleep: fastest on cores of their own, but on cores another program
// keeps busy the spinning takes that program's time slices and a step slows several times instead
// of twice. GNU OpenMP spins only briefly while it manages more threads than the process has cores
// (GOMP_SPINCOUNT in its manual), and reads its policy only when the program starts; so while the
// machine has more runnable threads than cores, a team of sleeping OpenMP threads makes that so.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "meshtensor/core/settings.hpp"

namespace meshtensor {
namespace detail {

/// Whether cores are shared, from samples of the machine's runnable threads: shared after
/// `busy_samples` samples in a row with more runnable threads than cores, until `free_samples` in
/// a row without (a moment's daemon does not count; a busy program that stays does).
class SharedCoresSignal {
 public:
  static constexpr int busy_samples = 3;
  static constexpr int free_samples = 10;

  bool observe(int runnable, int cores) {
    const bool busy = runnable > cores;
    busy_run_ = busy ? busy_run_ + 1 : 0;
    free_run_ = busy ? 0 : free_run_ + 1;
    if (busy_run_ >= busy_samples) shared_ = true;
    if (free_run_ >= free_samples) shared_ = false;
    return shared_;
  }
  bool shared() const { return shared_; }

 private:
  int busy_run_ = 0, free_run_ = 0;
  bool shared_ = false;
};

/// The machine's runnable threads besides the caller (the kernel's count in /proc/loadavg, which
/// includes the thread reading it), or nullopt where that cannot be read.
inline std::optional<int> runnable_threads_besides_caller() {
  std::ifstream file("/proc/loadavg");
  double load1 = 0, load5 = 0, load15 = 0;
  int runnable = 0;
  char slash = 0;
  if (!(file >> load1 >> load5 >> load15 >> runnable >> slash) || slash != '/') return std::nullopt;
  return std::max(0, runnable - 1);
}

/// The machine's cores (online CPUs): what its runnable threads compete for.
inline int machine_cores() { return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)); }

/// OpenMP threads asleep on a condition variable until released, `size` of them beside the thread
/// that leads them; while they live, GNU OpenMP counts them among the threads it manages.
class SleepingOpenMpTeam {
 public:
  SleepingOpenMpTeam() = default;
  SleepingOpenMpTeam(const SleepingOpenMpTeam&) = delete;
  SleepingOpenMpTeam& operator=(const SleepingOpenMpTeam&) = delete;
  ~SleepingOpenMpTeam() { release(); }

  void start(int size) {
    if (leader_.joinable()) return;
    released_ = false;
    asleep_ = 0;
    members_ = 0;
    leader_ = std::thread([this, size] { sleep_together(size); });
    // OpenMP may give fewer threads than asked (OMP_THREAD_LIMIT, OMP_DYNAMIC): those it gives.
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return members_ > 0 && asleep_ == members_; });
  }
  void release() {
    if (!leader_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    changed_.notify_all();
    leader_.join();
  }
  bool asleep() const { return leader_.joinable(); }

 private:
  void sleep_together([[maybe_unused]] int size) {
#ifdef _OPENMP
#pragma omp parallel num_threads(size + 1)
#endif
    {
      std::unique_lock<std::mutex> lock(mutex_);
#ifdef _OPENMP
      members_ = omp_get_num_threads();
#else
      members_ = 1;
#endif
      ++asleep_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return released_; });
    }
  }

  std::thread leader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool released_ = false;
  int asleep_ = 0, members_ = 0;
};

/// The process's one watcher: processors register how their threads wait; while one waits
/// `brief`, or one waits `adaptive` and the cores are shared, the sleeping team lives.
class ThreadWaitingControl {
 public:
  static constexpr std::chrono::milliseconds sample_period{20};
  // Where a process's threads fill few of its cores (ranks not bound to theirs), the team it
  // would take is too many threads to start on the way.
  static constexpr int max_sleeping_threads = 64;

  static ThreadWaitingControl& process() {
    // Never destroyed: processors may outlive static destruction; the watcher stops at exit.
    static ThreadWaitingControl* control = [] {
      auto* c = new ThreadWaitingControl();
      std::atexit([] { process().stop(); });
      return c;
    }();
    return *control;
  }

  /// The process's processors that compute on `threads` (2 or more) threads, waiting so.
  void add(ThreadWaiting waiting, int threads) { change(waiting, threads, +1); }
  void remove(ThreadWaiting waiting, int threads) { change(waiting, threads, -1); }

  /// The processors registered as waiting so (none for `openmp`: left to OpenMP).
  int processors(ThreadWaiting waiting) {
    std::lock_guard<std::mutex> lock(mutex_);
    return waiting == ThreadWaiting::brief      ? brief_
           : waiting == ThreadWaiting::adaptive ? adaptive_
                                                : 0;
  }

  /// Whether the sleeping team lives now, making OpenMP's threads spin briefly.
  bool spinning_briefly() {
    std::lock_guard<std::mutex> lock(mutex_);
    return team_.asleep();
  }

 private:
  void change(ThreadWaiting waiting, int threads, int by) {
#ifdef _OPENMP
    if (waiting == ThreadWaiting::openmp) return;
    std::lock_guard<std::mutex> lock(mutex_);
    (waiting == ThreadWaiting::brief ? brief_ : adaptive_) += by;
    team_threads_ += by * (threads - 1);
    if (adaptive_ > 0 && !watcher_.joinable() && !stopped_)
      watcher_ = std::thread([this] { watch(); });
    apply();
#else
    (void)waiting, (void)threads, (void)by;
#endif
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopped_) {
      changed_.wait_for(lock, sample_period);
      if (stopped_ || adaptive_ == 0) continue;
      lock.unlock();
      const std::optional<int> runnable = runnable_threads_besides_caller();
      lock.lock();
      if (!runnable) return;  // no /proc: OpenMP's own waiting stays
      signal_.observe(*runnable, machine_cores());
      apply();
    }
  }

  // Called with mutex_ held. A team that cannot start leaves OpenMP's waiting as it is.
  void apply() {
    const bool wanted = !stopped_ && (brief_ > 0 || (adaptive_ > 0 && signal_.shared()));
    const int size = sleeping_team_size();
    if (wanted && !team_.asleep() && size <= max_sleeping_threads) {
      try {
        team_.start(size);
      } catch (const std::system_error&) {
      }
    }
    if (!wanted && team_.asleep()) team_.release();
  }

  // Enough that OpenMP manages more threads than the process's cores: the process's first thread,
  // its processors' teams (each processor's other threads) and the sleeping ones.
  int sleeping_team_size() const {
#ifdef _OPENMP
    return std::max(1, omp_get_num_procs() - team_threads_);
#else
    return 1;
#endif
  }

  void stop() {
    if (getpid() != owner_) return;  // a forked child: the threads were its parent's
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
      apply();
    }
    changed_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread watcher_;
  SharedCoresSignal signal_;
  SleepingOpenMpTeam team_;
  int adaptive_ = 0, brief_ = 0, team_threads_ = 0;
  bool stopped_ = false;
  pid_t owner_ = getpid();
};

}  // namespace detail

/// A processor's registration with the process's watcher, for as long as it computes on more
/// than one thread.
class ThreadWaitingLease {
 public:
  ThreadWaitingLease() = default;
  ThreadWaitingLease(ThreadWaiting waiting, int compute_threads) {
    if (compute_threads > 1) {
      waiting_ = waiting;
      threads_ = compute_threads;
      detail::ThreadWaitingControl::process().add(waiting, threads_);
    }
  }
  ThreadWaitingLease(ThreadWaitingLease&& other) noexcept { take(other); }
  ThreadWaitingLease& operator=(ThreadWaitingLease&& other) noexcept {
    if (this != &other) {
      end();
      take(other);
    }
    return *this;
  }
  ~ThreadWaitingLease() { end(); }

 private:
  void take(ThreadWaitingLease& other) {
    waiting_ = other.waiting_;
    threads_ = other.threads_;
    other.waiting_.reset();
  }
  void end() {
    if (waiting_) detail::ThreadWaitingControl::process().remove(*waiting_, threads_);
    waiting_.reset();
  }
  std::optional<ThreadWaiting> waiting_;
  int threads_ = 0;
};

}  // namespace meshtensor
