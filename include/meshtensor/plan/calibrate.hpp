#pragma once
// Calibration: this machine's kernel throughput (plan/throughput.hpp), measured by running a
// model's own step on one processor with kernel timing on (kernels/timing.hpp) — the FLOPs and
// copies a plan counts for each family and convolution class beside the seconds they took — and
// cached in a file per thread count, so that it runs once per machine.

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/run.hpp"
#include "meshtensor/kernels/timing.hpp"
#include "meshtensor/plan/plan.hpp"
#include "meshtensor/plan/settings_files.hpp"
#include "meshtensor/plan/throughput.hpp"

namespace meshtensor {

namespace detail {
// The throughput of one timed run: rates from the counts and seconds of its measured part.
inline Throughput throughput_of(const kernels::plan::Counts& work,
                                const kernels::KernelTimes& times, double wall_seconds,
                                int threads) {
  using Family = kernels::plan::Family;
  Throughput t;
  t.machine = cpu_model();
  t.threads = threads;
  double calls = 0;
  for (std::size_t f = 0; f < Throughput::families; ++f) {
    calls += double(work.calls[f]);
    const double done = Family(f) == Family::copy ? work.copied_elements : work.flops[f];
    if (times.seconds[f] > 0 && done > 0) t.per_second[f] = done / times.seconds[f];
  }
  for (std::size_t c = 0; c < t.conv_per_second.size(); ++c)
    if (times.conv_seconds[c] > 0 && work.conv_flops[c] > 0)
      t.conv_per_second[c] = work.conv_flops[c] / times.conv_seconds[c];
  t.seconds_per_call = calls > 0 ? std::max(0.0, wall_seconds - times.total) / calls : 0;
  return t;
}
}  // namespace detail

/**
 * Measures this machine's kernels with `threads` compute threads: runs `fn(Mesh&)` — a model's
 * setup and steps, calling count_from_here() where the part to measure begins — `runs` times on
 * one processor (the threads transport), timing every kernel call, and keeps the fastest run.
 */
template <class F>
Throughput calibrate(F&& fn, int threads, int runs = 2) {
  Throughput best;
  double best_wall = 0;
  for (int run = 0; run < runs; ++run) {
    threads::run(MeshShape{{"p", 1}}, [&](Mesh& mesh) {
      mesh.processor_context().set_compute_threads(threads);
      kernels::kernel_times().on = true;
      fn(mesh);
      const double wall = kernels::kernel_times().wall_seconds();
      if (run == 0 || wall < best_wall) {
        best_wall = wall;
        best =
            detail::throughput_of(kernels::plan::counts(), kernels::kernel_times(), wall, threads);
      }
    });
  }
  return best;
}

/// Where calibrations are cached: MESHTENSOR_CACHE_DIR, else $XDG_CACHE_HOME/meshtensor, else
/// ~/.cache/meshtensor; one file per thread count.
inline std::filesystem::path throughput_cache_file(int threads) {
  return settings_directory("MESHTENSOR_CACHE_DIR", "XDG_CACHE_HOME", ".cache") /
         ("throughput-" + std::to_string(threads) + "-threads.txt");
}

/// The cached throughput of this machine's CPU with `threads` threads, if a calibration left one.
inline std::optional<Throughput> cached_throughput(int threads) {
  const auto path = throughput_cache_file(threads);
  if (!std::filesystem::exists(path)) return std::nullopt;
  Throughput t = Throughput::from_file(path, "the cached kernel throughput");
  if (t.machine != cpu_model() || t.threads != threads) return std::nullopt;  // another machine's
  return t;
}

/// Writes `t` as the cached throughput of its thread count.
inline void cache_throughput(const Throughput& t) {
  write_text_file(throughput_cache_file(t.threads), t.to_text());
}

/// The cached throughput with `threads` threads, or a new calibration by `fn` (calibrate()),
/// cached; `again`: calibrate even where a cached one exists.
template <class F>
Throughput throughput(int threads, F&& fn, bool again = false) {
  if (!again)
    if (auto cached = cached_throughput(threads)) return *cached;
  Throughput t = calibrate(fn, threads);
  cache_throughput(t);
  return t;
}

}  // namespace meshtensor
