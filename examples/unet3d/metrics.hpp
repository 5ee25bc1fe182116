#pragma once
// The training loss and the Dice scores. The loss is class-weighted softmax cross-entropy plus the
// soft Dice loss of the foreground classes; the scores are hard Dice from the predicted labels,
// summed over volumes before dividing (a global Dice), so small tumours count by their size.

#include <array>
#include <fstream>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "phantom.hpp"

namespace unet3d {

namespace mt = meshtensor;

/// This process's peak resident memory in MiB (VmHWM).
inline double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

/// loss = CE(logits, labels; class weights) + (1 - the mean soft Dice of the foreground classes,
/// every class but the background, 0), fused: it keeps no softmax over the volume.
template <class T>
mt::Tensor<float> segmentation_loss(const mt::Tensor<T>& logits, const mt::Tensor<float>& labels,
                                    const mt::Tensor<float>& class_weights) {
  return mt::dice_cross_entropy(logits, labels, "classes", class_weights,
                                mt::DiceOptions{/*first_class=*/1, /*smooth=*/1.0});
}

/// Voxel counts per class for Dice: predicted and true, and their overlap.
struct Overlap {
  std::vector<double> both, predicted, truth;

  Overlap() = default;
  explicit Overlap(std::size_t classes) : both(classes), predicted(classes), truth(classes) {}

  std::size_t classes() const { return both.size(); }

  Overlap& operator+=(const Overlap& o) {
    if (both.empty()) *this = Overlap(o.classes());
    for (std::size_t c = 0; c < o.classes(); ++c) {
      both[c] += o.both[c];
      predicted[c] += o.predicted[c];
      truth[c] += o.truth[c];
    }
    return *this;
  }
  /// 2|P ∩ T| / (|P| + |T|); 1 when the class is absent from both.
  double dice(std::size_t c) const {
    if (c >= classes()) return 1.0;  // no volume counted yet
    const double total = predicted[c] + truth[c];
    return total > 0 ? 2 * both[c] / total : 1.0;
  }
  /// The mean Dice of the foreground classes: what picks the best checkpoint.
  double mean_foreground_dice() const {
    double sum = 0;
    for (std::size_t c = 1; c < classes(); ++c) sum += dice(c);
    return classes() > 1 ? sum / double(classes() - 1) : 1.0;
  }
};

/// The voxel counts of an Overlap as tensors over the classes, computed where the logits are:
/// [both, predicted, truth], each [classes].
inline std::vector<mt::Tensor<float>> overlap_sums(const mt::Tensor<float>& logits,
                                                   const mt::Tensor<float>& labels) {
  mt::autodiff::NoGrad no_grad(logits.mesh());
  const auto detached = logits.detach();
  const auto predicted = mt::equal(detached, mt::reduce_max(detached, "classes"));
  mt::DimNames all_but_classes("batch, x, y, z");
  return {mt::reduce_sum(predicted * labels, all_but_classes),
          mt::reduce_sum(predicted, all_but_classes), mt::reduce_sum(labels, all_but_classes)};
}

/// The Overlap of `classes` classes from overlap_sums' values as read, from `at` on.
inline Overlap overlap_of(const std::vector<float>& values, std::size_t at, std::size_t classes) {
  Overlap o(classes);
  for (std::size_t c = 0; c < classes; ++c) {
    o.both[c] = values.at(at + c);
    o.predicted[c] = values.at(at + classes + c);
    o.truth[c] = values.at(at + 2 * classes + c);
  }
  return o;
}

/// The overlap of the predicted classes (argmax of the logits) with the one-hot labels.
inline Overlap overlap(const mt::Tensor<float>& logits, const mt::Tensor<float>& labels) {
  auto sums = mt::read_later(overlap_sums(logits, labels));
  return overlap_of(sums.values(), 0, std::size_t(logits.shape().dim("classes").size));
}

}  // namespace unet3d
