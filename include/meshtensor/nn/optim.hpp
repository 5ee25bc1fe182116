#pragma once
// Optimisers: SGD with momentum, Adam and AdamW. Gradients are complete on every processor (the
// ops all-reduce them), so each processor updates its own block of each parameter with no
// communication, and replicated parameters stay identical everywhere. A step's values (learning
// rate, Adam's step count and bias corrections) are kept where the parameters are and counted
// there, so that a step captured as a CUDA graph (StepGraph) takes them up at every launch; a
// learning rate set between launches applies to the next.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/optimizer.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::nn {

namespace detail {
// Writes `value` into the field at `offset` of the step values kept in `step`'s memory.
template <class Step>
void write_field(Buffer<Step>& step, std::size_t offset, double value) {
  auto* field = reinterpret_cast<double*>(reinterpret_cast<char*>(step.data()) + offset);
  copy_from_host(&value, 1, field, step.space());
}
}  // namespace detail

/// SGD with momentum (PyTorch's form: v = mu v + g; p -= lr v) and L2 weight decay.
template <class T = float>
class Sgd {
 public:
  Sgd(std::vector<Tensor<T>> parameters, double lr, double momentum = 0.0,
      double weight_decay = 0.0)
      : params_(std::move(parameters)) {
    const MemoryUseScope state(MemoryUse::optimizer);
    step_ = buffer_from_host(std::vector<kernels::shared::SgdStep>{{lr, momentum, weight_decay}});
    velocity_.reserve(params_.size());  // no copies of the blocks when the vector grows
    for (const auto& p : params_) velocity_.push_back(kernels::zeros_like(p.array()));
  }

  /// One update from the parameters' gradients; with a `guard` (a scalar, e.g. the sum of the
  /// loss and the gradients times 0) none where it is not finite, decided where the parameters
  /// are, without the host reading it.
  void step(const Tensor<T>* guard = nullptr) {
    const T* skip = guard ? guard->array().data() : nullptr;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto g = params_[k].grad();
      if (!g.defined()) continue;
      T* p = params_[k].array().data();
      T* v = velocity_[k].data();
      const T* d = g.array().data();
      const auto n = static_cast<std::int64_t>(params_[k].array().size());
      kernels::sgd(step_.data(), p, v, d, n, skip);
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }
  void set_learning_rate(double lr) {
    detail::write_field(step_, offsetof(kernels::shared::SgdStep, learning_rate), lr);
  }
  std::vector<Array<T>>& state() { return velocity_; }

 private:
  std::vector<Tensor<T>> params_;
  std::vector<Array<T>> velocity_;
  Buffer<kernels::shared::SgdStep> step_;
};

/**
 * Adam (Kingma and Ba) with bias correction; with `decoupled` weight decay it is AdamW (Loshchilov
 * and Hutter): p -= lr * wd * p, separately from the adaptive step.
 */
template <class T = float>
class Adam {
 public:
  Adam(std::vector<Tensor<T>> parameters, double lr = 1e-3, double beta1 = 0.9,
       double beta2 = 0.999, double epsilon = 1e-8, double weight_decay = 0.0,
       bool decoupled = false)
      : params_(std::move(parameters)) {
    const MemoryUseScope state(MemoryUse::optimizer);
    step_ = buffer_from_host(std::vector<kernels::shared::AdamStep>{
        {lr, beta1, beta2, epsilon, weight_decay, 0, 0, decoupled, 0, 1, 1}});
    first_.reserve(params_.size());  // no copies of the blocks when the vectors grow
    second_.reserve(params_.size());
    for (const auto& p : params_) {
      first_.push_back(kernels::zeros_like(p.array()));
      second_.push_back(kernels::zeros_like(p.array()));
    }
  }

  /// One update from the parameters' gradients; with a `guard` (a scalar, e.g. the sum of the
  /// loss and the gradients times 0) none where it is not finite, decided where the parameters
  /// are, without the host reading it (a skipped step is not counted for the bias correction).
  void step(const Tensor<T>* guard = nullptr) {
    const T* skip = guard ? guard->array().data() : nullptr;
    kernels::adam_advance(step_.data(), skip);
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto g = params_[k].grad();
      if (!g.defined()) continue;
      T* p = params_[k].array().data();
      T* m = first_[k].data();
      T* v = second_[k].data();
      const T* d = g.array().data();
      const auto n = static_cast<std::int64_t>(params_[k].array().size());
      kernels::adam(step_.data(), p, m, v, d, n, skip);
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }
  void set_learning_rate(double lr) {
    detail::write_field(step_, offsetof(kernels::shared::AdamStep, learning_rate), lr);
  }
  /// The steps counted (waits for the work queued before).
  std::int64_t steps() const { return read_step().steps; }
  /// Counts `steps` steps taken (a checkpoint's), for the bias corrections of the next.
  void set_steps(std::int64_t steps) {
    kernels::shared::AdamStep h = read_step();
    h.steps = steps;
    h.first_power = std::pow(h.beta1, double(steps));
    h.second_power = std::pow(h.beta2, double(steps));
    h.first_correction = 1 - h.first_power;
    h.second_correction = 1 - h.second_power;
    copy_from_host(&h, 1, step_.data(), step_.space());
  }
  std::vector<Array<T>>& first_moments() { return first_; }
  std::vector<Array<T>>& second_moments() { return second_; }
  /// A copy of parameter k's first (or second) moment as a tensor on the parameter's layout (to
  /// save it): made where the moments are, in the order of the work that updated them.
  Tensor<T> first_moment(std::size_t k) const { return moment_tensor(k, first_); }
  Tensor<T> second_moment(std::size_t k) const { return moment_tensor(k, second_); }

 private:
  Tensor<T> moment_tensor(std::size_t k, const std::vector<Array<T>>& moments) const {
    const Tensor<T>& p = params_.at(k);
    return Tensor<T>(p.mesh(), p.layout(), kernels::copy_of(moments.at(k)));
  }

  kernels::shared::AdamStep read_step() const {
    kernels::shared::AdamStep h{};
    copy_to_host(step_.data(), step_.space(), 1, &h);
    return h;
  }

  std::vector<Tensor<T>> params_;
  std::vector<Array<T>> first_, second_;
  Buffer<kernels::shared::AdamStep> step_;
};

/// AdamW: Adam with decoupled weight decay (default 0.01, as PyTorch).
template <class T = float>
Adam<T> adamw(std::vector<Tensor<T>> parameters, double lr = 1e-3, double weight_decay = 0.01,
              double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8) {
  return Adam<T>(std::move(parameters), lr, beta1, beta2, epsilon, weight_decay,
                 /*decoupled=*/true);
}

}  // namespace meshtensor::nn
