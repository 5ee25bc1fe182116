#pragma once
// What a plan (plan/plan.hpp) found: per processor, the FLOPs of each kernel family (the kinds of
// op: convolution, pooling, normalisation, ...), the peak of its memory pool by use, and its
// communication by kind (halo exchanges and relayouts by their messages, reductions and gathers by
// their collectives); and over the mesh, as a table and one JSON line.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/counting.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/kernels/plan/assumptions.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/memory/pool.hpp"

namespace meshtensor {

/// One processor's part of a plan.
struct ProcessorPlan {
  int processor = 0;
  int planned_as = 0;  // the processor whose plan this is: itself, or one like it (plan.hpp)
  MeshCoord coord;
  kernels::plan::Counts work;  // FLOPs and calls per kernel family
  MemoryStats memory;  // its pool: peak_in_use is the most it held at once, at_peak what for
  Communicator::Traffic traffic;          // as Mesh::traffic() counts on a real transport
  CountedTraffic counted;                 // the same by message tag and collective kind
  std::vector<std::string> layout_notes;  // what the layout rule settled (ops/align.hpp)

  double flops() const {
    double total = 0;
    for (double f : work.flops) total += f;
    return total;
  }
  double flops(kernels::plan::Family f) const { return work.flops[static_cast<std::size_t>(f)]; }
  /// Point-to-point messages and bytes sent with `tag` (comm/tags.hpp: halo, relayout).
  CountedTraffic::Count sent(int tag) const {
    const auto found = counted.sent_by_tag.find(tag);
    return found == counted.sent_by_tag.end() ? CountedTraffic::Count{} : found->second;
  }
  CountedTraffic::Count collective(CountedTraffic::Collective kind) const {
    return counted.collectives[kind];
  }
  /// Takes away the counts of `before` (FLOPs, calls, traffic; not memory).
  ProcessorPlan& operator-=(const ProcessorPlan& before) {
    for (std::size_t f = 0; f < work.flops.size(); ++f) {
      work.flops[f] -= before.work.flops[f];
      work.calls[f] -= before.work.calls[f];
    }
    work.copied_elements -= before.work.copied_elements;
    for (std::size_t c = 0; c < work.conv_flops.size(); ++c)
      work.conv_flops[c] -= before.work.conv_flops[c];
    traffic -= before.traffic;
    counted -= before.counted;
    return *this;
  }
};

/// A plan of a whole mesh: one ProcessorPlan per processor, by rank.
struct PlanReport {
  std::string mesh, layout;
  std::vector<ProcessorPlan> processors;
  int planned = 0;      // processors run; the others are like one of them
  double seconds = 0;   // how long planning took
  std::string assumed;  // what a real run may add to the peaks (kernels::plan::assumed_kernels)

  /// The processor with the most of `measure` (ties: the lowest rank).
  template <class Measure>
  const ProcessorPlan& busiest(Measure&& measure) const {
    return *std::max_element(
        processors.begin(), processors.end(),
        [&](const ProcessorPlan& a, const ProcessorPlan& b) { return measure(a) < measure(b); });
  }
  template <class Measure>
  double total(Measure&& measure) const {
    double sum = 0;
    for (const auto& p : processors) sum += double(measure(p));
    return sum;
  }

  /// A table: one row per measure, with its total over the mesh, its mean and its maximum per
  /// processor (and which processor that is).
  std::string table() const {
    std::string out = format_line("", "total", "mean/proc", "max/proc", "at proc");
    for (const auto& row : rows()) {
      const auto& top = busiest(row.measure);
      const double sum = total(row.measure);
      out += format_line(row.name, number(sum, row.unit), number(sum / processors.size(), row.unit),
                         number(row.measure(top), row.unit), std::to_string(top.processor));
    }
    for (const auto& note : layout_notes()) out += "layout rule: " + note + "\n";
    return out + "assumed: " + assumed + "\n";
  }

  /// What the layout rule settled on any processor (each line once, in the order first met): ops
  /// whose operands split two dims over one mesh axis.
  std::vector<std::string> layout_notes() const {
    std::vector<std::string> notes;
    for (const auto& p : processors)
      for (const auto& note : p.layout_notes)
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
    return notes;
  }

  /// One JSON object on one line: the mesh, layout and planning time, and per measure its total,
  /// mean and maximum over the processors.
  std::string json() const {
    std::string out = "{\"mesh\":\"" + mesh + "\",\"layout\":\"" + layout +
                      "\",\"processors\":" + std::to_string(processors.size()) +
                      ",\"planned\":" + std::to_string(planned) +
                      ",\"plan_seconds\":" + plain(seconds) + ",\"assumed\":\"" + assumed + "\"";
    out += ",\"layout_notes\":[";
    for (const auto& note : layout_notes()) {
      if (out.back() != '[') out += ",";
      out += "\"" + escaped(note) + "\"";
    }
    out += "]";
    for (const auto& row : rows()) {
      const double sum = total(row.measure);
      out += ",\"" + row.key + "\":{\"total\":" + plain(sum) +
             ",\"mean\":" + plain(sum / processors.size()) +
             ",\"max\":" + plain(row.measure(busiest(row.measure))) + "}";
    }
    return out + "}";
  }

 private:
  static std::string escaped(const std::string& text) {
    std::string out;
    for (char c : text) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return out;
  }
  struct Row {
    std::string name, key, unit;
    double (*measure)(const ProcessorPlan&);
  };
  template <kernels::plan::Family family>
  static double flops_of(const ProcessorPlan& p) {
    return p.flops(family);
  }
  template <CountedTraffic::Collective kind>
  static double calls_of(const ProcessorPlan& p) {
    return double(p.collective(kind).calls);
  }
  template <CountedTraffic::Collective kind>
  static double bytes_of(const ProcessorPlan& p) {
    return double(p.collective(kind).bytes);
  }
  template <MemoryUse use>
  static double at_peak(const ProcessorPlan& p) {
    return double(p.memory.at_peak[static_cast<std::size_t>(use)]);
  }
  static std::vector<Row> rows() {
    using F = kernels::plan::Family;
    using C = CountedTraffic;
    return {
        {"FLOPs", "flops", "", [](const ProcessorPlan& p) { return p.flops(); }},
        {"  convolution", "conv_flops", "", flops_of<F::conv>},
        {"  pooling", "pool_flops", "", flops_of<F::pool>},
        {"  normalisation", "norm_flops", "", flops_of<F::norm>},
        {"  resampling", "resample_flops", "", flops_of<F::resample>},
        {"  element-wise", "elementwise_flops", "", flops_of<F::elementwise>},
        {"  sums", "sum_flops", "", flops_of<F::sum>},
        {"  optimiser", "optimizer_flops", "", flops_of<F::optimizer>},
        {"peak memory", "peak_memory_bytes", "B",
         [](const ProcessorPlan& p) { return double(p.memory.peak_in_use); }},
        {"  activations", "peak_activations_bytes", "B", at_peak<MemoryUse::activations>},
        {"  parameters", "peak_parameters_bytes", "B", at_peak<MemoryUse::parameters>},
        {"  gradients", "peak_gradients_bytes", "B", at_peak<MemoryUse::gradients>},
        {"  optimizer state", "peak_optimizer_bytes", "B", at_peak<MemoryUse::optimizer>},
        {"  workspace", "peak_workspace_bytes", "B", at_peak<MemoryUse::workspace>},
        {"  halo buffers", "peak_halo_bytes", "B", at_peak<MemoryUse::halo>},
        {"peak held with cache", "peak_held_bytes", "B",
         [](const ProcessorPlan& p) { return double(p.memory.peak_held); }},
        {"halo messages", "halo_messages", "",
         [](const ProcessorPlan& p) {
           return double(p.sent(tags::halo).calls + p.sent(tags::halo_beside).calls);
         }},
        {"halo bytes", "halo_bytes", "B",
         [](const ProcessorPlan& p) {
           return double(p.sent(tags::halo).bytes + p.sent(tags::halo_beside).bytes);
         }},
        {"relayout messages", "relayout_messages", "",
         [](const ProcessorPlan& p) { return double(p.sent(tags::relayout).calls); }},
        {"relayout bytes", "relayout_bytes", "B",
         [](const ProcessorPlan& p) { return double(p.sent(tags::relayout).bytes); }},
        {"all-reduces", "all_reduces", "", calls_of<C::all_reduce>},
        {"all-reduce bytes", "all_reduce_bytes", "B", bytes_of<C::all_reduce>},
        {"reduce-scatters", "reduce_scatters", "", calls_of<C::reduce_scatter>},
        {"reduce-scatter bytes", "reduce_scatter_bytes", "B", bytes_of<C::reduce_scatter>},
        {"other collectives", "other_collectives", "",
         [](const ProcessorPlan& p) {
           return double(p.traffic.collectives) - calls_of<C::all_reduce>(p) -
                  calls_of<C::reduce_scatter>(p);
         }},
        {"other collective bytes", "other_collective_bytes", "B",
         [](const ProcessorPlan& p) {
           return double(p.traffic.collective_bytes) - bytes_of<C::all_reduce>(p) -
                  bytes_of<C::reduce_scatter>(p);
         }},
    };
  }
  static std::string format_line(const std::string& a, const std::string& b, const std::string& c,
                                 const std::string& d, const std::string& e) {
    char line[160];
    std::snprintf(line, sizeof line, "%-24s %14s %14s %14s %8s\n", a.c_str(), b.c_str(), c.c_str(),
                  d.c_str(), e.c_str());
    return line;
  }
  // 1.23 G, 45.6 MiB: three significant digits, binary prefixes for bytes.
  static std::string number(double v, const std::string& unit) {
    const bool bytes = unit == "B";
    const double step = bytes ? 1024 : 1000;
    const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
    int k = 0;
    while (v >= step && k < 5) v /= step, ++k;
    char text[32];
    std::snprintf(text, sizeof text, k ? "%.3g %s%s" : "%.0f %s%s", v,
                  k ? (std::string(prefixes[k]) + (bytes ? "i" : "")).c_str() : "", unit.c_str());
    std::string s = text;
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  }
  static std::string plain(double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return text;
  }
};

}  // namespace meshtensor
