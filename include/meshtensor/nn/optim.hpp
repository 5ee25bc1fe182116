#pragma once
// Optimisers: SGD with momentum, Adam and AdamW. Gradients are complete on every processor (the
// ops all-reduce them), so each processor updates its own block of each parameter with no
// communication, and replicated parameters stay identical everywhere.

#include <cmath>
#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/optimizer.hpp"
#include "meshtensor/nn/parameters.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::nn {

/// SGD with momentum (PyTorch's form: v = mu v + g; p -= lr v) and L2 weight decay.
template <class T = float>
class Sgd {
 public:
  Sgd(std::vector<Tensor<T>> parameters, double lr, double momentum = 0.0,
      double weight_decay = 0.0)
      : params_(std::move(parameters)), lr_(lr), momentum_(momentum), weight_decay_(weight_decay) {
    const MemoryUseScope state(MemoryUse::optimizer);
    velocity_.reserve(params_.size());  // no copies of the blocks when the vector grows
    for (const auto& p : params_) velocity_.push_back(kernels::zeros_like(p.array()));
  }

  /// One update from the parameters' gradients; with a `guard` (a scalar, e.g. the sum of the
  /// loss and the gradients times 0) none where it is not finite, decided where the parameters
  /// are, without the host reading it.
  void step(const Tensor<T>* guard = nullptr) {
    const kernels::shared::SgdStep h{lr_, momentum_, weight_decay_};
    const T* skip = guard ? guard->array().data() : nullptr;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto g = params_[k].grad();
      if (!g.defined()) continue;
      T* p = params_[k].array().data();
      T* v = velocity_[k].data();
      const T* d = g.array().data();
      const auto n = static_cast<std::int64_t>(params_[k].array().size());
      kernels::sgd(h, p, v, d, n, skip);
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }
  void set_learning_rate(double lr) { lr_ = lr; }
  std::vector<Array<T>>& state() { return velocity_; }

 private:
  std::vector<Tensor<T>> params_;
  std::vector<Array<T>> velocity_;
  double lr_, momentum_, weight_decay_;
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
      : params_(std::move(parameters)),
        lr_(lr),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        weight_decay_(weight_decay),
        decoupled_(decoupled) {
    const MemoryUseScope state(MemoryUse::optimizer);
    first_.reserve(params_.size());  // no copies of the blocks when the vectors grow
    second_.reserve(params_.size());
    for (const auto& p : params_) {
      first_.push_back(kernels::zeros_like(p.array()));
      second_.push_back(kernels::zeros_like(p.array()));
    }
  }

  /// One update from the parameters' gradients; with a `guard` (a scalar, e.g. the sum of the
  /// loss and the gradients times 0) none where it is not finite, decided where the parameters
  /// are, without the host reading it (the step is counted: undo_step() takes it back once the
  /// host knows it was skipped).
  void step(const Tensor<T>* guard = nullptr) {
    ++steps_;
    const T* skip = guard ? guard->array().data() : nullptr;
    const kernels::shared::AdamStep h{lr_,
                                      beta1_,
                                      beta2_,
                                      epsilon_,
                                      weight_decay_,
                                      1.0 - std::pow(beta1_, double(steps_)),
                                      1.0 - std::pow(beta2_, double(steps_)),
                                      decoupled_};
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const auto g = params_[k].grad();
      if (!g.defined()) continue;
      T* p = params_[k].array().data();
      T* m = first_[k].data();
      T* v = second_[k].data();
      const T* d = g.array().data();
      const auto n = static_cast<std::int64_t>(params_[k].array().size());
      kernels::adam(h, p, m, v, d, n, skip);
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.zero_grad();
  }
  void set_learning_rate(double lr) { lr_ = lr; }
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  /// A guarded step that was skipped no longer counts for the bias correction of later steps.
  void undo_step() { --steps_; }
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

  std::vector<Tensor<T>> params_;
  std::vector<Array<T>> first_, second_;
  double lr_, beta1_, beta2_, epsilon_, weight_decay_;
  bool decoupled_;
  std::int64_t steps_ = 0;
};

/// AdamW: Adam with decoupled weight decay (default 0.01, as PyTorch).
template <class T = float>
Adam<T> adamw(std::vector<Tensor<T>> parameters, double lr = 1e-3, double weight_decay = 0.01,
              double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8) {
  return Adam<T>(std::move(parameters), lr, beta1, beta2, epsilon, weight_decay,
                 /*decoupled=*/true);
}

}  // namespace meshtensor::nn
