#pragma once
// An op's dims looked up and checked by name: an error names the op the user called, not the
// ops it is made of, and the dims the tensor has.

#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/dim_names.hpp"
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

/// A ShapeError naming `op` unless `t` has each of `dims`.
template <class T>
void require_dims(const std::string& op, const Tensor<T>& t, const DimNames& dims) {
  for (const auto& dim : dims) position_in(op, t, dim);
}

/// A ShapeError naming `op` unless every dim of `param` (a scale or shift) is one of x's, the
/// same size: a parameter with a dim of its own would silently broadcast x over it.
template <class P, class T>
void require_dims_of_x(const std::string& op, const char* what, const Tensor<P>& param,
                       const Tensor<T>& x) {
  for (const auto& dim : param.shape())
    if (!x.shape().contains(dim.name) || x.shape().dim(dim.name).size != dim.size)
      throw ShapeError(op + ": " + what + " " + param.shape().to_string() + " has dim " +
                       quote(dim.name) + " of size " + std::to_string(dim.size) + ", which x " +
                       x.shape().to_string() + " does not have; give it some of x's dims");
}

}  // namespace meshtensor::detail
