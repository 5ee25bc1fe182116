#pragma once
// Segmentation losses over named dims, written with the differentiable ops, so every sum over a
// split dim is all-reduced and the result is the same scalar on every processor.

#include <string>

#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/reduce.hpp"

namespace meshtensor {

/**
 * Class-weighted softmax cross-entropy: -sum(w[c] * y * log softmax(logits)) / sum(w[c] * y) over
 * every element, with `labels` one-hot over `classes` and `class_weights` over `classes` (the
 * weighted mean PyTorch's CrossEntropyLoss takes).
 */
template <class T>
Tensor<T> softmax_cross_entropy(const Tensor<T>& logits, const Tensor<T>& labels,
                                const std::string& classes, const Tensor<T>& class_weights) {
  detail::require_reduced_dim("softmax_cross_entropy", logits, classes);
  const auto weighted = labels * class_weights;
  return -(reduce_sum(weighted * log_softmax(logits, classes)) / reduce_sum(weighted));
}

/// Unweighted softmax cross-entropy, the mean over every element but the classes.
template <class T>
Tensor<T> softmax_cross_entropy(const Tensor<T>& logits, const Tensor<T>& labels,
                                const std::string& classes) {
  detail::require_reduced_dim("softmax_cross_entropy", logits, classes);
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
