#pragma once
// Choosing a layout per stage of a model (core/layout_schedule.hpp) with plans: every candidate
// schedule is planned (plan/plan.hpp), its peak memory read and its step predicted
// (plan/predict.hpp), and the fastest that fits a memory budget per processor wins. A candidate
// starts from a first-stage layout and moves each mesh axis, from some stage down, to another dim
// (channels, batch) or to none: where the deep stages of a U-Net are too small to split in space.
// All candidates are weighed where they are few; else each axis's move is chosen in turn, the
// others held, until nothing improves.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshtensor/core/byte_size.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/layout_schedule.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/plan/plan.hpp"
#include "meshtensor/plan/predict.hpp"

namespace meshtensor {

/// One schedule a choice weighed.
struct ScheduleOption {
  LayoutSchedule layouts;
  double peak_bytes = 0;  // the most one processor holds at once
  StepPrediction step;
  std::string failure;  // why it cannot run; empty when it can
};

/// How to choose.
struct ChoiceOptions {
  double budget_bytes = 0;    // per processor
  int stages = 1;             // the model's
  std::vector<Layout> bases;  // first-stage layouts to start from (each axis's dim above the moves)
  std::vector<std::string> moves{"channels", "batch", ""};  // "": the axis replicates
  std::function<MachineModel(const MeshShape&)> machine;    // the machine a mesh would run on
  std::size_t weigh_all_up_to = 300;  // candidates; more are searched an axis at a time
  int grow_limit = 8;                 // doublings of the mesh tried when nothing fits
};

/// What a choice found.
struct LayoutChoice {
  MeshShape mesh;
  double budget_bytes = 0;
  std::vector<ScheduleOption> fitting;  // fastest first
  std::vector<ScheduleOption> too_big;  // least memory first
  std::vector<ScheduleOption> failed;
  /// Where nothing fits: the smallest larger mesh on which something does, and that option.
  std::optional<std::pair<MeshShape, ScheduleOption>> fits_on;
  int larger_meshes_tried = 0;

  /// The fastest option within the budget; where none is, an error naming the least memory any
  /// option needs and the smallest mesh tried on which one fits.
  const ScheduleOption& best() const;
};

namespace detail {

// One axis's move: from stage `at` on (stages: never) it splits `to` instead of its base dim.
struct AxisMove {
  int at = 0;
  std::string to;
};

inline std::vector<AxisMove> axis_moves(const std::string& base_dim, const ChoiceOptions& o) {
  std::vector<AxisMove> moves{{o.stages, base_dim}};
  for (int at = 1; at < o.stages; ++at)
    for (const auto& to : o.moves)
      if (to != base_dim) moves.push_back({at, to});
  return moves;
}

// The dim `axis` splits in `base` ("" where none).
inline std::string base_dim_of(const Layout& base, const std::string& axis) {
  for (const auto& rule : base.rules())
    if (rule.mesh_axis == axis) return rule.dim;
  return "";
}

// The schedule of `base` with `moves` (one per mesh axis); none where two axes split one dim.
inline std::optional<LayoutSchedule> schedule_of(const MeshShape& mesh, const Layout& base,
                                                 const std::vector<AxisMove>& moves, int stages) {
  std::vector<Layout> levels;
  for (int stage = 0; stage < stages; ++stage) {
    std::vector<LayoutRule> rules;
    for (std::size_t a = 0; a < mesh.rank(); ++a) {
      const std::string dim = stage >= moves[a].at ? moves[a].to : base_dim_of(base, mesh[a].name);
      if (dim.empty()) continue;
      for (const auto& r : rules)
        if (r.dim == dim) return std::nullopt;
      rules.push_back({dim, mesh[a].name});
    }
    levels.emplace_back(rules);
  }
  while (levels.size() > 1 && levels[levels.size() - 2] == levels.back()) levels.pop_back();
  return LayoutSchedule(levels);
}

// Better: fitting before not, then faster (fitting) or smaller (not).
inline bool better(const ScheduleOption& a, const ScheduleOption& b, double budget) {
  if (!a.failure.empty() || !b.failure.empty()) return a.failure.empty() && !b.failure.empty();
  const bool fa = a.peak_bytes <= budget, fb = b.peak_bytes <= budget;
  if (fa != fb) return fa;
  if (fa && a.step.seconds != b.step.seconds) return a.step.seconds < b.step.seconds;
  return a.peak_bytes < b.peak_bytes;
}

// Plans and prices candidate schedules on one mesh, each once.
template <class F>
class ScheduleWeigher {
 public:
  ScheduleWeigher(const MeshShape& mesh, const ChoiceOptions& o, F& step)
      : mesh_(mesh), machine_(o.machine(mesh)), step_(step) {}

  const ScheduleOption& weigh(const LayoutSchedule& layouts) {
    const std::string key = layouts.to_string();
    if (auto found = weighed_.find(key); found != weighed_.end()) return found->second;
    ScheduleOption option;
    option.layouts = layouts;
    try {
      const PlanReport report = plan(mesh_, layouts.at(0), [&](Mesh& m) { step_(m, layouts); });
      for (const auto& p : report.processors)
        option.peak_bytes = std::max(option.peak_bytes, double(p.memory.peak_in_use));
      option.step = predict_step(report, machine_);
    } catch (const std::exception& e) {
      option.failure = e.what();
    }
    return weighed_.emplace(key, option).first->second;
  }
  const std::map<std::string, ScheduleOption>& weighed() const { return weighed_; }

 private:
  MeshShape mesh_;
  MachineModel machine_;
  F& step_;
  std::map<std::string, ScheduleOption> weighed_;
};

// Every combination of one move per axis, in `choices` (its size per axis) order.
inline bool next_combination(std::vector<std::size_t>& at, const std::vector<std::size_t>& sizes) {
  for (std::size_t a = 0; a < at.size(); ++a) {
    if (++at[a] < sizes[a]) return true;
    at[a] = 0;
  }
  return false;
}

// Weighs the candidates from `base`: all of them where they are few, else one axis at a time.
template <class F>
void weigh_from(const Layout& base, const ChoiceOptions& o, ScheduleWeigher<F>& weigher,
                const MeshShape& mesh) {
  std::vector<std::vector<AxisMove>> moves;
  std::vector<std::size_t> sizes;
  std::size_t total = 1;
  for (std::size_t a = 0; a < mesh.rank(); ++a) {
    moves.push_back(axis_moves(base_dim_of(base, mesh[a].name), o));
    sizes.push_back(moves.back().size());
    total *= sizes.back();
  }
  auto schedule = [&](const std::vector<std::size_t>& at) {
    std::vector<AxisMove> chosen;
    for (std::size_t a = 0; a < at.size(); ++a) chosen.push_back(moves[a][at[a]]);
    return schedule_of(mesh, base, chosen, o.stages);
  };
  std::vector<std::size_t> at(mesh.rank(), 0);
  if (total <= o.weigh_all_up_to) {
    do {
      if (auto s = schedule(at)) weigher.weigh(*s);
    } while (next_combination(at, sizes));
    return;
  }
  const ScheduleOption* best = &weigher.weigh(*schedule(at));
  for (bool improved = true; improved;) {
    improved = false;
    for (std::size_t a = 0; a < at.size(); ++a)
      for (std::size_t m = 0; m < sizes[a]; ++m) {
        auto trial = at;
        trial[a] = m;
        const auto s = schedule(trial);
        if (!s) continue;
        const ScheduleOption& option = weigher.weigh(*s);
        if (better(option, *best, o.budget_bytes)) best = &option, at = trial, improved = true;
      }
  }
}

// The options weighed on `mesh`, sorted into a choice.
template <class F>
LayoutChoice choice_on(const MeshShape& mesh, const ChoiceOptions& o, F& step) {
  ScheduleWeigher<F> weigher(mesh, o, step);
  for (const Layout& base : o.bases) weigh_from(base, o, weigher, mesh);
  LayoutChoice choice;
  choice.mesh = mesh;
  choice.budget_bytes = o.budget_bytes;
  for (const auto& [key, option] : weigher.weighed())
    (!option.failure.empty()               ? choice.failed
     : option.peak_bytes <= o.budget_bytes ? choice.fitting
                                           : choice.too_big)
        .push_back(option);
  auto by = [&](const ScheduleOption& a, const ScheduleOption& b) {
    return better(a, b, o.budget_bytes);
  };
  std::sort(choice.fitting.begin(), choice.fitting.end(), by);
  std::sort(choice.too_big.begin(), choice.too_big.end(), by);
  return choice;
}

// `mesh` with axis `a` twice as long.
inline MeshShape doubled(const MeshShape& mesh, std::size_t a) {
  std::vector<MeshAxis> axes;
  for (std::size_t i = 0; i < mesh.rank(); ++i)
    axes.push_back({mesh[i].name, mesh[i].size * (i == a ? 2 : 1)});
  return MeshShape(axes);
}

}  // namespace detail

/**
 * Chooses a layout for each of a model's stages on `mesh`: the schedule with the least predicted
 * step time among those whose planned peak memory per processor fits `o.budget_bytes`.
 * `step(Mesh&, const LayoutSchedule&)` runs the model's step (as plan() runs it: on blocks without
 * data) placing its tensors by the schedule. Where nothing fits, the mesh's axes are doubled in
 * turn to find the smallest on which something would.
 *
 * ```cpp
 * ChoiceOptions o;
 * o.budget_bytes = parse_bytes("2GiB");
 * o.stages = depth + 1;
 * o.bases = {Layout("x:p")};
 * o.machine = [&](const MeshShape& m) { return this_machine(m.num_processors()); };
 * const LayoutSchedule chosen = choose_layouts(MeshShape("p:64"), o, step).best().layouts;
 * ```
 */
template <class F>
LayoutChoice choose_layouts(const MeshShape& mesh, const ChoiceOptions& o, F&& step) {
  if (o.bases.empty())
    throw Error("choose_layouts: give at least one first-stage layout to start from");
  if (!o.machine) throw Error("choose_layouts: give the machine model (ChoiceOptions::machine)");
  LayoutChoice choice = detail::choice_on(mesh, o, step);
  if (!choice.fitting.empty()) return choice;
  MeshShape larger = mesh;
  for (int grow = 0; grow < o.grow_limit && mesh.rank() > 0; ++grow) {
    larger = detail::doubled(larger, std::size_t(grow) % mesh.rank());
    choice.larger_meshes_tried = grow + 1;
    LayoutChoice there = detail::choice_on(larger, o, step);
    if (!there.fitting.empty()) {
      choice.fits_on = {{larger, there.fitting.front()}};
      break;
    }
  }
  return choice;
}

inline const ScheduleOption& LayoutChoice::best() const {
  if (!fitting.empty()) return fitting.front();
  if (too_big.empty())
    throw Error("no layout schedule can run on mesh " + mesh.to_string() +
                (failed.empty() ? std::string() : ": " + failed.front().failure));
  const ScheduleOption& least = too_big.front();
  std::string message = "no layout schedule fits " + format_bytes(budget_bytes) +
                        " per processor on mesh " + mesh.to_string() + ": the least any needs is " +
                        format_bytes(least.peak_bytes) + " (\"" + least.layouts.to_string() +
                        "\"), so a budget of " + format_bytes(least.peak_bytes) +
                        " or more would do";
  if (fits_on)
    message += ", or " + std::to_string(fits_on->first.num_processors()) + " processors (mesh " +
               fits_on->first.to_string() + ", \"" + fits_on->second.layouts.to_string() +
               "\": " + format_bytes(fits_on->second.peak_bytes) + ")";
  else
    message += "; nor does any of the " + std::to_string(larger_meshes_tried) +
               " larger meshes tried, up to " +
               std::to_string(mesh.num_processors() << larger_meshes_tried) + " processors";
  throw Error(message);
}

}  // namespace meshtensor
