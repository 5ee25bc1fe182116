#pragma once
// Class-weighted softmax cross-entropy plus the soft Dice loss, fused (what MONAI's DiceCELoss
// computes): one pass over the scores forward and one backward, keeping nothing but its inputs.
// Written with ops (loss.hpp) the same loss keeps the softmax, its logarithm, the weighted
// labels and their gradients over the whole volume at the start of backward, when every
// activation is alive too: a large part of a bfloat16 U-Net's peak.
// Forward sums what the loss needs on each block, all-reduces those 2 + 3 * classes numbers over
// the mesh axes that split the volume, and computes the loss on every processor alike; backward
// computes each score's gradient from its position's softmax, computed again. A class dim split
// over processors, or a processor whose kernels have no fused loss (a GPU's), runs the ops instead
// (the same loss).

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/kernels/dice_cross_entropy.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/cast.hpp"
#include "meshtensor/ops/detail/partial_sums.hpp"
#include "meshtensor/ops/loss.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/ops/resample.hpp"

namespace meshtensor {

/// Options of dice_cross_entropy: the first class the Dice term averages over (1 leaves out the
/// background, class 0, as MONAI's include_background=False does) and the Dice's smoothing.
struct DiceOptions {
  std::int64_t first_class = 1;
  double smooth = 1.0;
};

namespace detail {

inline void check_dice_cross_entropy(const Shape& logits, const Shape& labels, const Shape& weights,
                                     const std::string& classes, const DiceOptions& options) {
  const std::string name = "dice_cross_entropy: ";
  if (!logits.contains(classes))
    throw ShapeError(name + "the logits " + logits.to_string() + " have no class dim " +
                     quote(classes) + "; name one of " + quote_list(logits.names()));
  if (!(labels == logits))
    throw ShapeError(name + "the labels " + labels.to_string() + " must have the logits' shape " +
                     logits.to_string() + " (one-hot over " + quote(classes) + ")");
  const std::int64_t count = logits.dim(classes).size;
  if (!(weights == Shape({Dim(classes, count)})))
    throw ShapeError(name + "the class weights " + weights.to_string() + " must be [" + classes +
                     "=" + std::to_string(count) + "]");
  if (options.first_class < 0 || options.first_class >= count)
    throw Error(name + "the first Dice class " + std::to_string(options.first_class) +
                " is not a class of " + quote(classes) + ": give 0 to " +
                std::to_string(count - 1));
}

// The same loss written with ops: for a class dim split over processors.
template <class T, class L>
Tensor<float> dice_cross_entropy_by_ops(const Tensor<T>& logits, const Tensor<L>& labels,
                                        const std::string& classes,
                                        const Tensor<float>& class_weights,
                                        const DiceOptions& options) {
  const Tensor<float> scores = cast<float>(logits), truth = cast<float>(labels);
  const auto dice = soft_dice(softmax(scores, classes), truth, classes, float(options.smooth));
  const std::int64_t count = logits.shape().dim(classes).size;
  const auto mean_dice = reduce_sum(crop(dice, classes, options.first_class, 0)) *
                         (1.0f / float(count - options.first_class));
  return softmax_cross_entropy(scores, truth, classes, class_weights) + (1.0f - mean_dice);
}

// The loss and its gradient's coefficients from the all-reduced sums.
inline float dice_cross_entropy_value(const double* sums, std::int64_t classes,
                                      const DiceOptions& options,
                                      kernels::DiceCrossEntropyCoefficients& k) {
  const kernels::DiceCrossEntropySums at{classes};
  const double averaged = double(classes - options.first_class);
  k.inverse_weight = 1.0 / sums[at.weight];
  k.dice_label.assign(static_cast<std::size_t>(classes), 0.0);
  k.dice_constant.assign(static_cast<std::size_t>(classes), 0.0);
  double dice_total = 0;
  for (std::int64_t c = options.first_class; c < classes; ++c) {
    const double denominator = sums[at.predicted(c)] + sums[at.truth(c)] + options.smooth;
    const double dice = (2 * sums[at.overlap(c)] + options.smooth) / denominator;
    dice_total += dice;
    // d(1 - mean Dice)/dp_c = -(2 y_c - dice_c) / (denominator * averaged)
    k.dice_label[std::size_t(c)] = -2.0 / (denominator * averaged);
    k.dice_constant[std::size_t(c)] = dice / (denominator * averaged);
  }
  const double cross_entropy = -sums[at.log_likelihood] * k.inverse_weight;
  return static_cast<float>(cross_entropy + 1.0 - dice_total / averaged);
}

}  // namespace detail

/**
 * -sum(w[c] y log softmax(logits)) / sum(w[c] y) + 1 - the mean over classes c >= first_class of
 * the soft Dice (2 sum(p y) + smooth) / (sum(p) + sum(y) + smooth), sums over every dim but
 * `classes`: softmax_cross_entropy(...) + 1 - mean(soft_dice(softmax(...))[first_class:]) as one
 * op. `labels` (one-hot, float or bfloat16) have the logits' shape, `class_weights` is
 * [classes]; neither gets a gradient. Logits may be bfloat16 (computed in fp32; their gradient
 * rounded once). Returns a scalar, the same on every processor.
 */
template <class T, class L>
Tensor<float> dice_cross_entropy(const Tensor<T>& logits, const Tensor<L>& labels,
                                 const std::string& classes, const Tensor<float>& class_weights,
                                 const DiceOptions& options = {}) {
  detail::check_dice_cross_entropy(logits.shape(), labels.shape(), class_weights.shape(), classes,
                                   options);
  if (logits.layout().is_split(classes) || !kernels::fused_loss_kernels())
    return detail::dice_cross_entropy_by_ops(logits, labels, classes, class_weights, options);
  Mesh& mesh = logits.mesh();
  const Tensor<L> truth = detail::relayout_to(labels, logits.layout());
  const Tensor<float> weights = detail::relayout_to(
      class_weights, TensorLayout(class_weights.shape(), mesh.shape(), Layout{}));

  const std::size_t at = logits.shape().position(classes);
  const auto sizes = logits.block().sizes();
  kernels::ClassBlock block;
  std::vector<std::string> volume;  // every dim but the classes
  for (std::size_t d = 0; d < logits.rank(); ++d) {
    if (d < at) block.outer *= sizes[d];
    if (d > at) block.inner *= sizes[d];
    if (d != at) volume.push_back(logits.shape()[d].name);
  }
  block.classes = sizes[at];

  const kernels::DiceCrossEntropySums order{block.classes};
  Buffer<double> sums(static_cast<std::size_t>(order.size()));
  kernels::dice_cross_entropy_sums(block, logits.array().data(), truth.array().data(),
                                   weights.array().data(), sums.data());
  // All-reduced in the five pieces the ops' loss sends (two scalars, three per-class sums): the
  // same collectives on every path, so that a plan, which cannot know whether a processor runs
  // the fused kernels (a GPU composes the loss), counts what each sends.
  if (const AxisSet axes = detail::axes_splitting(logits.layout(), volume)) {
    Communicator& group = mesh.group(axes);
    const std::int64_t pieces[][2] = {{order.log_likelihood, 1},
                                      {order.weight, 1},
                                      {order.overlap(0), block.classes},
                                      {order.predicted(0), block.classes},
                                      {order.truth(0), block.classes}};
    for (const auto& [first, count] : pieces)
      all_reduce(group, sums.data() + first, static_cast<std::size_t>(count), ReduceOp::sum,
                 sums.space());
  }

  auto coefficients = std::make_shared<kernels::DiceCrossEntropyCoefficients>();
  Array<float> value = Array<float>::from_shape(std::vector<std::size_t>{});
  kernels::host_step([&] {
    value.data()[0] =
        detail::dice_cross_entropy_value(sums.data(), block.classes, options, *coefficients);
  });
  Tensor<float> out(mesh,
                    TensorLayout(Shape(std::vector<Dim>{}), mesh.shape(), logits.layout().layout()),
                    std::move(value));
  autodiff::record_mixed(
      out, std::make_tuple(logits),
      [scores = logits.detach(), truth = truth.detach(), weights = weights.detach(), block,
       coefficients](const Tensor<float>& grad, auto) {
        Array<T> into = Array<T>::from_shape(scores.array().shape());
        kernels::dice_cross_entropy_gradient(block, scores.array().data(), truth.array().data(),
                                             weights.array().data(), *coefficients,
                                             grad.array().data(), into.data());
        return std::make_tuple(Tensor<T>(scores.mesh(), scores.layout(), std::move(into)));
      });
  return out;
}

}  // namespace meshtensor
