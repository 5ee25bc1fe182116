#pragma once
// Numbers that went bad in a training step: a NaN or infinite loss, or gradient, found before the
// optimiser applies it. The gradients are checked where they live (a GPU's memory stays there):
// 0 x a value is 0 where the value is finite and NaN where it is not, so one sum per gradient and
// one value read per step tell; the sums are global, so every processor decides alike.

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

/// What is not finite after a step's backward: "the loss (nan)", or "the gradient of <parameter>"
/// for the first such parameter; empty when all are finite (collective).
inline std::string first_nonfinite(const mt::Tensor<float>& loss,
                                   const mt::nn::Parameters<float>& parameters) {
  const double loss_value = loss.item();
  if (!std::isfinite(loss_value)) return "the loss (" + std::to_string(loss_value) + ")";
  std::vector<std::pair<std::string, mt::Tensor<float>>> sums;
  std::optional<mt::Tensor<float>> total;
  for (const auto& entry : parameters.entries()) {
    const auto grad = entry.tensor.grad();
    if (!grad.defined()) continue;
    auto sum = mt::reduce_sum(grad * 0.0f);
    total = total ? *total + sum : sum;
    sums.emplace_back(entry.name, std::move(sum));
  }
  if (!total || std::isfinite(total->item())) return "";
  for (const auto& [name, sum] : sums)
    if (!std::isfinite(sum.item())) return "the gradient of " + name;
  return "";
}

}  // namespace unet3d
