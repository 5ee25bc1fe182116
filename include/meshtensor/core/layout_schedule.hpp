#pragma once
// A layout per stage of a model: deep stages of a U-Net hold few voxels and many channels, so the
// split that suits level 0 (space) leaves slivers there, and channels or the batch split better.

#include <cstddef>
#include <string>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/core/layout.hpp"

namespace meshtensor {

/**
 * One layout per stage, the last one repeating for every deeper stage. Written with `|` between
 * stages, each in Layout's syntax; a stage left empty replicates everything.
 *
 * ```cpp
 * LayoutSchedule schedule("x:p | x:p | channels:p");
 * schedule.at(0);   // "x:p"
 * schedule.at(5);   // "channels:p" (the last repeats)
 * x = relayout(x, schedule.at(level));   // a model moves its tensors at each boundary
 * ```
 */
class LayoutSchedule {
 public:
  LayoutSchedule() = default;  // no stage has a layout of its own
  explicit LayoutSchedule(std::vector<Layout> stages) : stages_(std::move(stages)) {}
  explicit LayoutSchedule(const std::string& text) : stages_(parse(text)) {}
  explicit LayoutSchedule(const char* text) : LayoutSchedule(std::string(text)) {}

  bool empty() const { return stages_.empty(); }
  /// The stages written out; deeper ones repeat the last.
  std::size_t size() const { return stages_.size(); }

  /// The layout of `stage`: its own, or the last one written for deeper stages.
  const Layout& at(std::size_t stage) const {
    if (stages_.empty()) throw LayoutError("an empty layout schedule has no stage layouts");
    return stages_[stage < stages_.size() ? stage : stages_.size() - 1];
  }

  /// `x:p | x:p | channels:p`; parsing it gives this schedule back.
  std::string to_string() const {
    std::string out;
    for (std::size_t s = 0; s < stages_.size(); ++s)
      out += (s ? " | " : "") + stages_[s].to_string();
    return out;
  }

  friend bool operator==(const LayoutSchedule& a, const LayoutSchedule& b) {
    return a.stages_ == b.stages_;
  }
  friend bool operator!=(const LayoutSchedule& a, const LayoutSchedule& b) { return !(a == b); }

 private:
  static std::vector<Layout> parse(const std::string& text) {
    std::vector<Layout> stages;
    std::size_t begin = 0;
    while (true) {
      const std::size_t end = text.find('|', begin);
      const std::string part = text.substr(begin, end - begin);
      try {
        stages.emplace_back(part);
      } catch (const Error& e) {
        throw ParseError("layout schedule \"" + text + "\", stage " +
                         std::to_string(stages.size()) + " (counting from 0): " + e.what());
      }
      if (end == std::string::npos) break;
      begin = end + 1;
    }
    return stages;
  }

  std::vector<Layout> stages_;
};

}  // namespace meshtensor
