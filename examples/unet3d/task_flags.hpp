#pragma once
// The task of a training run from its flags and its data: a dataset.json names the classes and
// modalities; --classes, --modalities, --window and --class-weights set or check them. Every
// mismatch is an error naming the flag and what would be valid.

#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "dataset.hpp"
#include "phantom.hpp"
#include "task.hpp"

namespace unet3d {

/// What the flags say of the task; empty: not given.
struct TaskFlags {
  std::vector<std::string> classes, modalities;
  std::vector<double> window, class_weights;
};

inline std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ",") + n;
  return text;
}

// The class names: --classes, checked against a dataset.json's labels or the phantoms' three.
inline std::vector<std::string> resolve_classes(const TaskFlags& f, const std::string& data,
                                                const std::vector<std::string>& described) {
  const std::vector<std::string> phantom_classes = Task{}.classes;
  if (!f.classes.empty() && f.classes.size() < 2)
    throw mt::Error("--classes " + joined(f.classes) +
                    ": name the background (label 0) and at least one more class");
  if (data.empty() && !f.classes.empty() && f.classes.size() != phantom_classes.size())
    throw mt::Error("--classes " + joined(f.classes) + ": the phantoms have 3 classes (" +
                    joined(phantom_classes) + "); other tasks need --data");
  if (!described.empty() && !f.classes.empty() && f.classes.size() != described.size())
    throw mt::Error("--classes " + joined(f.classes) + " names " +
                    std::to_string(f.classes.size()) + " classes but the dataset.json of --data " +
                    data + " has " + std::to_string(described.size()) + " (" + joined(described) +
                    ")");
  if (!f.classes.empty()) return f.classes;
  return described.empty() ? phantom_classes : described;
}

/// The task the flags and the data describe. `data` is --data (empty: phantoms).
inline Task resolve_task(const TaskFlags& f, const std::string& data) {
  std::vector<std::string> described_classes, described_modalities;
  if (!data.empty())
    if (const auto description = decathlon::find(data)) {
      const auto d = decathlon::read(*description);
      described_classes = d.classes;
      described_modalities = d.modalities;
    }
  Task task;
  task.classes = resolve_classes(f, data, described_classes);
  std::vector<std::string> modalities = f.modalities;
  if (data.empty() && !modalities.empty() && modalities != std::vector<std::string>{"CT"})
    throw mt::Error("--modalities " + joined(modalities) +
                    ": the phantoms are CT, one channel; other modalities need --data");
  if (!described_modalities.empty() && !modalities.empty() &&
      modalities.size() != described_modalities.size())
    throw mt::Error(
        "--modalities " + joined(modalities) + " names " + std::to_string(modalities.size()) +
        " channels but the dataset.json of --data " + data + " has " +
        std::to_string(described_modalities.size()) + " (" + joined(described_modalities) + ")");
  if (modalities.empty()) modalities = described_modalities;
  if (modalities.empty()) modalities = {"CT"};
  task.channels.clear();
  for (const auto& m : modalities) task.channels.push_back(Channel{m});
  if (!f.window.empty()) {
    if (!(f.window[0] < f.window[1]))
      throw mt::Error("--window " + std::to_string(f.window[0]) + "," +
                      std::to_string(f.window[1]) + ": give LOW,HIGH in HU with LOW below HIGH");
    bool any_ct = false;
    for (auto& c : task.channels)
      if (c.windowed()) {
        c.window = {float(f.window[0]), float(f.window[1])};
        any_ct = true;
      }
    if (!any_ct)
      throw mt::Error("--window windows CT channels, and the channels are " + task.modalities() +
                      " (z-scored over the body); leave --window out, or name a channel CT in "
                      "--modalities");
  }
  task.class_weights = default_class_weights(task.classes.size());
  if (!f.class_weights.empty()) {
    if (f.class_weights.size() != task.classes.size())
      throw mt::Error("--class-weights gives " + std::to_string(f.class_weights.size()) +
                      " weights for the " + std::to_string(task.classes.size()) + " classes (" +
                      joined(task.classes) + "); give one per class");
    task.class_weights = f.class_weights;
  }
  return task;
}

}  // namespace unet3d
