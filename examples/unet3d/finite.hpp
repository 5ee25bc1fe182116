#pragma once
// Numbers that went bad in a training step: a NaN or infinite loss, or gradient, found before the
// optimiser applies it. The checks are computed where the numbers are (a GPU's memory stays
// there): 0 x a value is 0 where the value is finite and NaN where it is not, so one sum per
// gradient tells, and their total guards the optimiser, which skips the step on the device where
// it is not finite. The host reads the checks with the step's other results, a step later
// (ops/read_later.hpp), and names what went bad.

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

/// A step's checks: the loss and each gradient times 0, summed (in `parts`, the loss first), and
/// their total (`guard`, for the optimiser). The sums are global: every processor decides alike.
struct StepChecks {
  mt::Tensor<float> guard;
  std::vector<mt::Tensor<float>> parts;
  std::vector<std::string> names;  // of the parameters whose gradients parts[1..] check
};

inline StepChecks step_checks(const mt::Tensor<float>& loss,
                              const mt::nn::Parameters<float>& parameters) {
  mt::autodiff::NoGrad no_grad(loss.mesh());
  StepChecks c;
  c.parts.push_back(loss.detach() * 0.0f);
  c.guard = c.parts.front();
  for (const auto& entry : parameters.entries()) {
    const auto grad = entry.tensor.grad();
    if (!grad.defined()) continue;
    c.parts.push_back(mt::reduce_sum(grad * 0.0f));
    c.names.push_back(entry.name);
    c.guard = c.guard + c.parts.back();
  }
  return c;
}

/// What is not finite, from the loss and the checks' parts as read: "the loss (nan)", or "the
/// gradient of <parameter>" for the first such parameter; empty when all are finite.
inline std::string first_nonfinite(double loss, const std::vector<float>& parts,
                                   const std::vector<std::string>& names) {
  if (!std::isfinite(loss)) return "the loss (" + std::to_string(loss) + ")";
  for (std::size_t k = 1; k < parts.size() && k - 1 < names.size(); ++k)
    if (!std::isfinite(parts[k])) return "the gradient of " + names[k - 1];
  return "";
}

}  // namespace unet3d
