#pragma once
// mt::plan: runs a model's SPMD function on every processor of a mesh of any size without data, and
// reports what each processor would compute, hold and send. Each processor computes on the plan
// device (blocks with shapes but no memory, kernels that count their FLOPs, device/processor.hpp)
// over the counting transport (comm/counting.hpp), which records every message and never waits,
// so the processors run one after another, a few at a time, in one process.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshtensor/comm/counting.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/kernels/timing.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/plan/report.hpp"

namespace meshtensor {

namespace detail {
// What a processor of a plan has done so far: its kernels' counts and its communicators' records.
inline ProcessorPlan counted_so_far(Mesh& mesh) {
  ProcessorPlan p;
  p.processor = p.planned_as = mesh.processor();
  p.coord = mesh.coord();
  p.work = mesh.context<kernels::plan::Counts>();
  p.traffic = mesh.traffic();
  p.counted = static_cast<const CountingCommunicator&>(mesh.world()).counted();
  for (AxisSet set = 0; set < mesh.num_groups(); ++set)
    p.counted += static_cast<const CountingCommunicator&>(mesh.group(set)).counted();
  return p;
}

// Where count_from_here() put a processor's start.
struct CountStart {
  bool set = false;
  ProcessorPlan at;
};

// The compute threads of each processor of the run a plan of `processors` stands for (kernels
// hold workspace per thread): this process's where it is one rank of a launcher's job (its
// ranks share a node's cores alike), else a share of this machine's cores, as the threads
// transport gives them.
inline int planned_compute_threads(int processors, const Settings& settings) {
  return launcher_ranks_on_node() ? threads_per_process(settings)
                                  : threads_per_processor(processors, settings);
}

// What processor `rank`'s run of `fn` would do, from its count_from_here() if it called one.
template <class F>
ProcessorPlan plan_processor(const MeshShape& shape, int rank, F& fn, const Settings& settings) {
  // From `settings`, not the thread's processor: plan_processors' worker threads have none.
  const bool for_gpus = plans_stand_for_devices(settings);
  Mesh mesh(shape, std::make_unique<CountingCommunicator>(rank, shape.num_processors(), for_gpus),
            {}, settings);
  mesh.processor_context().set_compute_threads(
      planned_compute_threads(shape.num_processors(), settings));
  fn(mesh);
  ProcessorPlan p = counted_so_far(mesh);
  p.memory = mesh.processor_context().own_pool().stats();
  p.layout_notes = layout_notes(mesh);
  if (const auto& start = mesh.context<CountStart>(); start.set) p -= start.at;
  return p;
}

// Plans the processors `ranks` on `workers` threads into `report`; rethrows the first failure.
template <class F>
void plan_processors(const MeshShape& shape, const std::vector<int>& ranks, F& fn, int workers,
                     PlanReport& report) {
  const Settings settings = current_processor().settings();  // the worker threads have none
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    for (std::size_t i; (i = next++) < ranks.size();) {
      const int rank = ranks[i];
      try {
        report.processors[std::size_t(rank)] = plan_processor(shape, rank, fn, settings);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure)
          failure = std::make_exception_ptr(Error("plan: processor " + std::to_string(rank) +
                                                  " of mesh " + shape.to_string() +
                                                  " failed: " + e.what()));
        next = ranks.size();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < std::min<int>(workers, int(ranks.size())); ++w) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Along an axis of n processors, the coordinate whose plan stands for coordinate c: c itself on a
// short axis and for the first three and the last three, else the middle. A processor's work
// depends on its coordinate only through its blocks' sizes (the first n % size blocks are one
// larger) and which neighbours its halos reach, so from the third to the third-last all do the
// same where those three agree (interiors_agree).
constexpr int short_axis = 7;
inline int stand_in(int c, int n) { return n <= short_axis || c < 3 || c >= n - 3 ? c : n / 2; }

// The processor whose plan stands for `rank`'s.
inline int stand_in(const MeshShape& shape, int rank) {
  MeshCoord coord = shape.coord_of(rank);
  for (std::size_t a = 0; a < shape.rank(); ++a) coord[a] = stand_in(coord[a], shape[a].size);
  return shape.processor_of(coord);
}

inline bool same_work(const ProcessorPlan& a, const ProcessorPlan& b) {
  return a.work.flops == b.work.flops && a.work.calls == b.work.calls &&
         a.memory.peak_in_use == b.memory.peak_in_use && a.traffic == b.traffic;
}

// Whether, on every long axis, the third, middle and third-last coordinates planned the same.
inline bool interiors_agree(const MeshShape& shape, const PlanReport& report,
                            const std::vector<int>& planned) {
  for (int rank : planned) {
    const MeshCoord coord = shape.coord_of(rank);
    for (std::size_t a = 0; a < shape.rank(); ++a) {
      const int n = shape[a].size;
      if (n <= short_axis || coord[a] != 2) continue;
      for (int other : {n / 2, n - 3}) {
        MeshCoord at = coord;
        at[a] = other;
        if (!same_work(report.processors[std::size_t(rank)],
                       report.processors[std::size_t(shape.processor_of(at))]))
          return false;
      }
    }
  }
  return true;
}
}  // namespace detail

/// In a plan, counts FLOPs and traffic from here on (memory peaks still count from the start): a
/// function that makes its model and runs a first step calls it before the step it reports. In a
/// run with kernel timing on (a calibration, plan/calibrate.hpp) it starts the timing afresh;
/// otherwise it does nothing in a run on a real transport.
inline void count_from_here(Mesh& mesh) {
  if (mesh.transport() != "plan") {
    if (kernels::kernel_times().on) {
      kernels::plan::counts() = {};
      kernels::kernel_times().restart();
    }
    return;
  }
  auto& start = mesh.context<detail::CountStart>();
  start.at = detail::counted_so_far(mesh);
  start.set = true;
}

/// How a plan runs: `workers` processors at a time (0: one per core); `every_processor`: run each
/// processor, not one per class of like processors.
struct PlanOptions {
  int workers = 0;
  bool every_processor = false;
};

/**
 * Runs `fn(Mesh&)` — the function `run` would run — for the processors of `shape` on the plan
 * device over the counting transport, and returns what each would do: FLOPs per kernel family,
 * its pool's peak, and its messages and collectives. `layout` is the one the function places its
 * tensors by, for the report. Along a mesh axis of more than 7 processors only the first three,
 * the middle and the last three coordinates run, the middle standing for all between, unless the
 * three inner ones disagree (then every processor runs). The function may not read values: a
 * plan's blocks have none (Tensor::item() and on_host() refuse them).
 *
 * ```cpp
 * const PlanReport report = mt::plan("x:16; y:16; z:16", layout, [&](mt::Mesh& mesh) {
 *   train_step(mesh, ...);
 * });
 * std::printf("%s", report.table().c_str());
 * ```
 */
template <class F>
PlanReport plan(const MeshShape& shape, const Layout& layout, F&& fn, PlanOptions options = {}) {
  const auto begin = std::chrono::steady_clock::now();
  const int n = shape.num_processors();
  const int workers = options.workers > 0 ? options.workers
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  PlanReport report;
  report.mesh = shape.to_string();
  report.layout = layout.to_string();
  report.processors.resize(std::size_t(n));
  std::vector<int> planned, all;
  for (int rank = 0; rank < n; ++rank) {
    all.push_back(rank);
    if (detail::stand_in(shape, rank) == rank) planned.push_back(rank);
  }
  const bool by_class = !options.every_processor && planned.size() < all.size();
  if (by_class) detail::plan_processors(shape, planned, fn, workers, report);
  if (by_class && detail::interiors_agree(shape, report, planned)) {
    report.planned = int(planned.size());
    for (int rank : all) {
      const int like = detail::stand_in(shape, rank);
      if (like == rank) continue;
      ProcessorPlan& p = report.processors[std::size_t(rank)];
      p = report.processors[std::size_t(like)];
      p.processor = rank;
      p.coord = shape.coord_of(rank);
    }
  } else {
    detail::plan_processors(shape, all, fn, workers, report);  // or the inner ones differ
    report.planned = n;
  }
  report.assumed = kernels::plan::assumed_kernels(current_processor().settings().kernels,
                                                  plans_stand_for_devices());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return report;
}

}  // namespace meshtensor
