#pragma once
// Element types and reduction operators the transports understand. Transports move bytes; these
// tags tell them how to combine elements in a reduction.

#include <cstdint>
#include <string>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"

namespace meshtensor {

enum class DType { f32, f64, i32, i64, u8, bf16 };
enum class ReduceOp { sum, max, min };

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::i64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::u8;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DType::bf16;
  else
    static_assert(sizeof(T) == 0, "meshtensor: unsupported element type");
}

inline std::size_t dtype_size(DType type) {
  switch (type) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::bf16:
      return 2;
  }
  return 0;
}

inline std::string to_string(DType type) {
  switch (type) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
    case DType::bf16:
      return "bfloat16";
  }
  return "?";
}

inline std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

namespace detail {

// Calls `f(T{})` with the C++ type behind `type`.
template <class F>
decltype(auto) visit_dtype(DType type, F&& f) {
  switch (type) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i32:
      return f(std::int32_t{});
    case DType::i64:
      return f(std::int64_t{});
    case DType::u8:
      return f(std::uint8_t{});
    case DType::bf16:
      return f(bfloat16{});
  }
  return f(std::uint8_t{});
}

template <class T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum:
      return static_cast<T>(a + b);
    case ReduceOp::max:
      return a < b ? b : a;
    case ReduceOp::min:
      return b < a ? b : a;
  }
  return a;
}

}  // namespace detail
}  // namespace meshtensor
