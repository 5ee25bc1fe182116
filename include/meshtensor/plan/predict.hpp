#pragma once
// A plan's step in seconds: each processor's kernel work priced by its kernels' throughput
// (plan/throughput.hpp), slowed where more compute threads share a node's cores than it has, plus
// its messages and collectives priced by the link between processors (plan/network.hpp); the
// step takes as long as its slowest processor. Communication is counted in full, as if no
// computation hid it: the prediction errs high by the part of the halo exchanges that overlap.

#include <algorithm>

#include "meshtensor/plan/network.hpp"
#include "meshtensor/plan/report.hpp"
#include "meshtensor/plan/throughput.hpp"

namespace meshtensor {

/// What a plan's processors would run on.
struct MachineModel {
  Throughput kernels;  // per processor, with kernels.threads compute threads
  Link network;
  int cores_per_node = 0;  // 0: each processor has its threads' cores to itself
  int processors_per_node = 1;

  /// How many compute threads share each core: 1 unless a node runs more threads than it has.
  double sharing() const {
    if (cores_per_node <= 0) return 1;
    return std::max(1.0, double(processors_per_node) * kernels.threads / cores_per_node);
  }
};

struct StepPrediction {
  double seconds = 0;          // the slowest processor's compute and communication
  double compute_s = 0;        // its kernels (shared cores included)
  double communication_s = 0;  // its messages and collectives
  int processor = 0;           // which one that is
};

/// One processor's seconds of messages and collectives on `link`.
inline double communication_seconds(const ProcessorPlan& p, const Link& link) {
  double s = 0;
  for (const auto& [tag, sent] : p.counted.sent_by_tag)
    s += link.seconds(sent.rounds, sent.wire_bytes);
  for (const auto& c : p.counted.collectives) s += link.seconds(c.rounds, c.wire_bytes);
  return s;
}

/// The step a plan predicts on `machine`.
inline StepPrediction predict_step(const PlanReport& report, const MachineModel& machine) {
  StepPrediction slowest;
  for (const ProcessorPlan& p : report.processors) {
    StepPrediction here;
    here.compute_s = machine.kernels.seconds(p.work) * machine.sharing();
    here.communication_s = communication_seconds(p, machine.network);
    here.seconds = here.compute_s + here.communication_s;
    here.processor = p.processor;
    if (here.seconds > slowest.seconds) slowest = here;
  }
  return slowest;
}

}  // namespace meshtensor
