#pragma once
// The training loss and the Dice scores. The loss is class-weighted softmax cross-entropy plus the
// soft Dice loss of the tumour class; the scores are hard Dice from the predicted labels, summed
// over volumes before dividing (a global Dice), so small tumours count by their size.

#include <array>
#include <fstream>
#include <string>

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

/// loss = CE(logits, labels; class weights) + (1 - soft Dice of the tumour).
inline mt::Tensor<float> segmentation_loss(const mt::Tensor<float>& logits,
                                           const mt::Tensor<float>& labels,
                                           const mt::Tensor<float>& class_weights) {
  const auto dice = mt::soft_dice(mt::softmax(logits, "classes"), labels, "classes");
  const auto tumour_dice =
      mt::reduce_sum(mt::crop(dice, "classes", tumour, num_classes - 1 - tumour));
  return mt::softmax_cross_entropy(logits, labels, "classes", class_weights) + (1.0f - tumour_dice);
}

/// Voxel counts per class for Dice: predicted and true, and their overlap.
struct Overlap {
  std::array<double, num_classes> both{}, predicted{}, truth{};

  Overlap& operator+=(const Overlap& o) {
    for (int c = 0; c < num_classes; ++c) {
      both[c] += o.both[c];
      predicted[c] += o.predicted[c];
      truth[c] += o.truth[c];
    }
    return *this;
  }
  /// 2|P ∩ T| / (|P| + |T|); 1 when the class is absent from both.
  double dice(int c) const {
    const double total = predicted[c] + truth[c];
    return total > 0 ? 2 * both[c] / total : 1.0;
  }
};

/// The overlap of the predicted classes (argmax of the logits) with the one-hot labels.
inline Overlap overlap(const mt::Tensor<float>& logits, const mt::Tensor<float>& labels) {
  mt::autodiff::NoGrad no_grad(logits.mesh());
  const auto detached = logits.detach();
  const auto predicted = mt::equal(detached, mt::reduce_max(detached, "classes"));
  mt::DimNames all_but_classes("batch, x, y, z");
  const auto both = mt::gather(mt::reduce_sum(predicted * labels, all_but_classes));
  const auto p = mt::gather(mt::reduce_sum(predicted, all_but_classes));
  const auto t = mt::gather(mt::reduce_sum(labels, all_but_classes));
  Overlap o;
  for (int c = 0; c < num_classes; ++c) {
    o.both[c] = both(c);
    o.predicted[c] = p(c);
    o.truth[c] = t(c);
  }
  return o;
}

}  // namespace unet3d
