#pragma once
// Small results read by the host without stalling the device: a loss, metrics, checks. Their copy
// is queued behind the work that computes them, and the host reads them later (a training step
// reads the previous step's while the device runs the next), so a GPU never waits for the host.

#include <cstdint>
#include <vector>

#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/**
 * The elements of `tensors`, one tensor after another (each row-major, whole), on their way to
 * the host in one copy; values() gives them. Collective where a tensor is split (it is gathered
 * first), so every processor calls it alike.
 *
 * ```cpp
 * auto later = read_later<float>({loss, dice_sums});   // queued now
 * ...                                                  // the next step's work, queued
 * const float loss_value = later.values()[0];          // waits only for what is left
 * ```
 */
template <class T>
ValuesOnTheWay<T> read_later(const std::vector<Tensor<T>>& tensors) {
  std::int64_t total = 0;
  std::vector<Tensor<T>> whole;
  for (const auto& t : tensors) {
    whole.push_back(relayout(t, Layout()));
    total += std::int64_t(whole.back().array().size());
  }
  Array<T> staging = Array<T>::from_shape({std::size_t(total)});
  std::int64_t at = 0;
  for (const auto& t : whole) {
    const auto n = std::int64_t(t.array().size());
    kernels::copy_values(t.array().data(), n, staging.data() + at);
    at += n;
  }
  return ValuesOnTheWay<T>(staging.data(), staging.space(), total);
}

}  // namespace meshtensor
