#pragma once
// An op's dim looked up by name: an error names the op the user called, not the ops it is made
// of, and the dims the tensor has.

#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::detail {

/// The position of `dim` in `t`; a ShapeError naming `op` where `t` lacks it.
template <class T>
std::size_t position_in(const std::string& op, const Tensor<T>& t, const std::string& dim) {
  if (!t.shape().contains(dim))
    throw ShapeError(op + ": tensor " + t.layout().to_string() + " has no dim " + quote(dim) +
                     "; its dims are " + quote_list(t.shape().names()));
  return t.shape().position(dim);
}

/// The size of `dim` in `t`; a ShapeError naming `op` where `t` lacks it.
template <class T>
std::int64_t size_in(const std::string& op, const Tensor<T>& t, const std::string& dim) {
  return t.shape()[position_in(op, t, dim)].size;
}

}  // namespace meshtensor::detail
