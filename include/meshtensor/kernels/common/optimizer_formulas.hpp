#pragma once
// One parameter element's update under each optimiser (nn/optim.hpp), said once for the CPU loop
// and the GPU kernel (kernels/common/shared_source.hpp). Arithmetic is in double, rounded to the
// parameter's type when stored, as PyTorch's foreach kernels do for float parameters.

#include "meshtensor/kernels/common/shared_source.hpp"

namespace meshtensor::kernels::shared {
// clang-format off
MESHTENSOR_SHARED_SOURCE(optimizer_formulas_text,
struct SgdStep {
  double learning_rate, momentum, weight_decay;
};
template <class T>
MESHTENSOR_DEVICE inline void sgd_update(const SgdStep& h, T& parameter, T& velocity, T gradient) {
  const double g = double(gradient) + h.weight_decay * parameter;
  velocity = T(h.momentum * velocity + g);
  parameter = T(parameter - h.learning_rate * (h.momentum > 0 ? double(velocity) : g));
}
struct AdamStep {
  double learning_rate, beta1, beta2, epsilon, weight_decay;
  double first_correction, second_correction;
  long long decoupled;
  // The steps taken, and beta1 and beta2 to their power: what the corrections come from.
  long long steps;
  double first_power, second_power;
};
// One more step: the powers of beta1 and beta2, and the bias corrections they give, updated where
// the step's values are kept (a GPU's memory: a graph's launches count their steps there too).
MESHTENSOR_DEVICE inline void adam_advance(AdamStep& h) {
  h.steps += 1;
  h.first_power *= h.beta1;
  h.second_power *= h.beta2;
  h.first_correction = 1 - h.first_power;
  h.second_correction = 1 - h.second_power;
}
template <class T>
MESHTENSOR_DEVICE inline void adam_update(const AdamStep& h, T& parameter, T& first, T& second,
                                          T gradient) {
  double g = gradient;
  if (!h.decoupled) g += h.weight_decay * parameter;
  first = T(h.beta1 * first + (1 - h.beta1) * g);
  second = T(h.beta2 * second + (1 - h.beta2) * g * g);
  double value = parameter;
  if (h.decoupled) value -= h.learning_rate * h.weight_decay * value;
  value -= h.learning_rate * (first / h.first_correction) /
           (sqrt(second / h.second_correction) + h.epsilon);
  parameter = T(value);
}
)
// clang-format on
}  // namespace meshtensor::kernels::shared
