#pragma once
// bfloat16: the upper half of an IEEE float (8 exponent bits, 7 stored mantissa bits). Storage and
// communication in half the bytes of fp32, arithmetic in fp32: a value converts to float wherever
// an expression needs one, and a float converts back rounded to nearest, ties to even — the
// rounding of AVX512_BF16's VCVTNEPS2BF16 and of CUDA's __float2bfloat16, so CPU and GPU agree.

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace meshtensor {

struct bfloat16 {
  std::uint16_t bits;  // uninitialised by default, as a float is: the type stays trivial

  bfloat16() = default;
  // Implicit from float (and so from anything that converts to one): T(0), T(x) in generic code.
  bfloat16(float value) : bits(round(value)) {}  // NOLINT(google-explicit-constructor)
  operator float() const {                       // NOLINT(google-explicit-constructor)
    const std::uint32_t wide = std::uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof value);
    return value;
  }

  static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 out;
    out.bits = b;
    return out;
  }

  // Exact: the sign bit alone (and -infinity stays a bfloat16 in `c ? T(0) : -inf`).
  friend bfloat16 operator-(bfloat16 a) { return from_bits(std::uint16_t(a.bits ^ 0x8000u)); }

  bfloat16& operator+=(float x) { return *this = float(*this) + x; }
  bfloat16& operator-=(float x) { return *this = float(*this) - x; }
  bfloat16& operator*=(float x) { return *this = float(*this) * x; }
  bfloat16& operator/=(float x) { return *this = float(*this) / x; }

  /// The nearest bfloat16's bits, ties to even; NaN stays NaN (quietened), infinities stay, a
  /// denormal rounds as zero of its sign (as VCVTNEPS2BF16 does, so every path rounds alike).
  static std::uint16_t round(float value) {
    std::uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return std::uint16_t(u >> 16);
  }
};

/// The element type of fp32 tensors computed in reduced precision.
using bf16 = bfloat16;

/// Floating-point element types: the ones that have gradients and sum in double.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || std::is_same_v<T, bfloat16>;

/// The type a value of T is computed in: float for bfloat16, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

}  // namespace meshtensor

namespace std {
template <>
class numeric_limits<meshtensor::bfloat16> {
  using bf16 = meshtensor::bfloat16;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 8;
  static constexpr int radix = 2;
  static bf16 min() { return bf16::from_bits(0x0080); }
  static bf16 lowest() { return bf16::from_bits(0xff7f); }
  static bf16 max() { return bf16::from_bits(0x7f7f); }
  static bf16 epsilon() { return bf16::from_bits(0x3c00); }  // 2^-7
  static bf16 infinity() { return bf16::from_bits(0x7f80); }
  static bf16 quiet_NaN() { return bf16::from_bits(0x7fc0); }
};
}  // namespace std
