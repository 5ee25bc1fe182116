#pragma once
// The named tensors of a model: trainable parameters and non-trained state (running statistics),
// in the order they were made. Optimisers and checkpoints work through this list.

#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/memory/pool.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::nn {

template <class T = float>
class Parameters {
 public:
  struct Entry {
    std::string name;
    Tensor<T> tensor;
    bool trainable;
  };

  /// Adds a trainable parameter (it will require a gradient); names must be unique.
  Tensor<T> add(const std::string& name, Tensor<T> tensor) {
    tensor.set_requires_grad();
    return insert(name, std::move(tensor), true);
  }
  /// Adds state that is saved with the model but not trained (e.g. running statistics).
  Tensor<T> add_state(const std::string& name, Tensor<T> tensor) {
    return insert(name, std::move(tensor), false);
  }

  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Tensor<T>> trainable() const {
    std::vector<Tensor<T>> out;
    for (const auto& e : entries_)
      if (e.trainable) out.push_back(e.tensor);
    return out;
  }
  Tensor<T> operator[](const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return e.tensor;
    throw Error("no parameter named " + detail::quote(name));
  }
  /// Total number of elements of the trainable parameters.
  std::int64_t count() const {
    std::int64_t n = 0;
    for (const auto& e : entries_)
      if (e.trainable) n += e.tensor.shape().num_elements();
    return n;
  }
  void zero_grad() {
    for (auto& e : entries_) e.tensor.zero_grad();
  }

 private:
  Tensor<T> insert(const std::string& name, Tensor<T> tensor, bool trainable) {
    for (const auto& e : entries_)
      if (e.name == name) throw Error("parameter " + detail::quote(name) + " is defined twice");
    MemoryPool::count_as(tensor.array().data(), MemoryUse::parameters);  // made as an activation
    entries_.push_back({name, tensor, trainable});
    return tensor;
  }

  std::vector<Entry> entries_;
};

}  // namespace meshtensor::nn
