#pragma once
// Segmentation losses over named dims, written with the differentiable ops, so every sum over a
// split dim is all-reduced and the result is the same scalar on every processor.

#include <string>

#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/detail/dim_of.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/one_hot.hpp"
#include "meshtensor/ops/reduce.hpp"

namespace meshtensor {
namespace detail {
// Whether `a` and `b` have the same dims with the same sizes, in any order, `skipped` left out of
// b.
inline bool same_dims(const Shape& a, const Shape& b, const std::string& skipped = "") {
  std::size_t matched = 0;
  for (const auto& dim : b) {
    if (dim.name == skipped) continue;
    if (!a.contains(dim.name) || a.dim(dim.name).size != dim.size) return false;
    ++matched;
  }
  return matched == a.rank();
}

// Throws naming `op` unless `labels` have the logits' dims (one-hot or probabilities) or the
// logits' dims without `classes` (class numbers), and `weights` (if given) are [classes].
template <class T>
void require_labels(const std::string& op, const Tensor<T>& logits, const Tensor<T>& labels,
                    const std::string& classes, const Tensor<T>* weights = nullptr) {
  position_in(op, logits, classes);
  const Shape& l = labels.shape();
  if (!same_dims(l, logits.shape()) &&
      (l.contains(classes) || !same_dims(l, logits.shape(), classes)))
    throw ShapeError(op + ": labels " + l.to_string() + " must have the logits' dims " +
                     logits.shape().to_string() + " (one-hot or probabilities over " +
                     quote(classes) + "), or all of them but " + quote(classes) +
                     " (class numbers)");
  if (weights && !(weights->shape() == Shape{logits.shape().dim(classes)}))
    throw ShapeError(op + ": class weights " + weights->shape().to_string() + " must be [" +
                     classes + "=" + std::to_string(logits.shape().dim(classes).size) + "]");
}

// Labels with the `classes` dim as they are (one-hot or probabilities); labels without it are class
// numbers, made one-hot on the logits' split of `classes`.
template <class T>
Tensor<T> class_indicators(const Tensor<T>& logits, const Tensor<T>& labels,
                           const std::string& classes) {
  if (labels.shape().contains(classes)) return labels;
  return one_hot(labels, logits.shape().dim(classes), logits.layout().layout());
}
}  // namespace detail

/**
 * Class-weighted softmax cross-entropy: -sum(w[c] * y * log softmax(logits)) / sum(w[c] * y) over
 * every element, with `class_weights` over `classes` (the weighted mean PyTorch's
 * CrossEntropyLoss takes). `labels` are one-hot (or probabilities) over `classes`, or, without
 * that dim, class numbers; a class number outside [0, classes) marks a position to ignore.
 */
template <class T>
Tensor<T> softmax_cross_entropy(const Tensor<T>& logits, const Tensor<T>& labels,
                                const std::string& classes, const Tensor<T>& class_weights) {
  detail::require_labels("softmax_cross_entropy", logits, labels, classes, &class_weights);
  const auto weighted = detail::class_indicators(logits, labels, classes) * class_weights;
  return -(reduce_sum(weighted * log_softmax(logits, classes)) / reduce_sum(weighted));
}

/**
 * Unweighted softmax cross-entropy, the mean over every element but the classes: of one-hot (or
 * probability) `labels` over `classes`, or, for labels without that dim, of the class numbers
 * they hold, over the positions whose number is in [0, classes) (the others are ignored, as
 * PyTorch's ignore_index).
 */
template <class T>
Tensor<T> softmax_cross_entropy(const Tensor<T>& logits, const Tensor<T>& labels,
                                const std::string& classes) {
  detail::require_labels("softmax_cross_entropy", logits, labels, classes);
  if (!labels.shape().contains(classes)) {
    const auto hot = detail::class_indicators(logits, labels, classes);
    return -(reduce_sum(hot * log_softmax(logits, classes)) / reduce_sum(hot));
  }
  return -(reduce_sum(labels * log_softmax(logits, classes)) /
           T(logits.shape().num_elements() / logits.shape().dim(classes).size));
}

/**
 * Soft Dice per class: (2 sum(p y) + smooth) / (sum(p) + sum(y) + smooth), the sums over every dim
 * but `classes`; `probabilities` and one-hot `labels` share their dims. Returns a [classes] tensor.
 */
template <class T>
Tensor<T> soft_dice(const Tensor<T>& probabilities, const Tensor<T>& labels,
                    const std::string& classes, T smooth = T(1)) {
  detail::position_in("soft_dice", probabilities, classes);
  if (!detail::same_dims(labels.shape(), probabilities.shape()))
    throw ShapeError("soft_dice: labels " + labels.shape().to_string() +
                     " must have the probabilities' dims " + probabilities.shape().to_string() +
                     " (one-hot over " + detail::quote(classes) + ")");
  DimNames reduced;
  std::vector<std::string> names;
  for (const auto& dim : probabilities.shape())
    if (dim.name != classes) names.push_back(dim.name);
  reduced = DimNames(names);
  const auto overlap = reduce_sum(probabilities * labels, reduced);
  const auto total = reduce_sum(probabilities, reduced) + reduce_sum(labels, reduced);
  return (overlap * T(2) + smooth) / (total + smooth);
}

}  // namespace meshtensor
