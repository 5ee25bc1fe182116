#pragma once
// Window arithmetic for the ops that slide a window over named spatial dims (convolution, pooling,
// transposed convolution): output sizes, padding, and — the basis of halo planning — which input
// range a block of outputs reads.

#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/core/block.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// How a windowed op pads: `same` (the output covers the input: ceil(n / stride) positions, as in
/// TensorFlow), `valid` (no padding), or explicit amounts before and after each spatial dim.
struct Padding {
  enum class Mode { same, valid, explicit_sizes };
  Mode mode = Mode::valid;
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;  // (before, after) per dim

  static Padding same() { return {Mode::same, {}}; }
  static Padding valid() { return {Mode::valid, {}}; }
  static Padding explicit_sizes(std::vector<std::pair<std::int64_t, std::int64_t>> sizes) {
    return {Mode::explicit_sizes, std::move(sizes)};
  }
  /// "same" or "valid".
  friend bool operator==(const Padding& a, const Padding& b) {
    return a.mode == b.mode && a.sizes == b.sizes;
  }
  static Padding parse(const std::string& name) {
    if (name == "same") return same();
    if (name == "valid") return valid();
    throw Error("padding " + detail::quote(name) +
                " is not supported; use \"same\", \"valid\" or explicit sizes per side");
  }
};

/// What a windowed op (or `pad`) reads beyond a dim's edges, as PyTorch's padding_mode: zeros, the
/// mirror image (not repeating the edge), copies of the edge, or the dim's far end (a periodic
/// domain, where a split dim's halo comes from the processor at the far end).
enum class PadMode { zeros, reflect, replicate, circular };

inline std::string to_string(PadMode mode) {
  switch (mode) {
    case PadMode::reflect:
      return "reflect";
    case PadMode::replicate:
      return "replicate";
    case PadMode::circular:
      return "circular";
    case PadMode::zeros:
      break;
  }
  return "zeros";
}

/// "zeros", "reflect", "replicate" or "circular".
inline PadMode parse_pad_mode(const std::string& name) {
  for (const PadMode mode :
       {PadMode::zeros, PadMode::reflect, PadMode::replicate, PadMode::circular})
    if (name == to_string(mode)) return mode;
  throw Error("padding mode " + detail::quote(name) +
              " is not supported; use \"zeros\", \"reflect\", \"replicate\" or \"circular\"");
}

/// One spatial dim of a window: what the op reads for each output index.
struct WindowDim {
  std::int64_t kernel = 1, stride = 1, dilation = 1, pad_before = 0, pad_after = 0;

  std::int64_t span() const { return (kernel - 1) * dilation + 1; }
  /// Outputs of a convolution or pooling over n inputs.
  std::int64_t conv_output(std::int64_t n) const {
    return (n + pad_before + pad_after - span()) / stride + 1;
  }
  /// Outputs of a transposed convolution over n inputs.
  std::int64_t transposed_output(std::int64_t n) const {
    return (n - 1) * stride - pad_before - pad_after + span();
  }
  /// Input range (padded coordinates, may leave [0, n)) that conv outputs `out` read.
  Range conv_reads(const Range& out) const {
    if (out.empty()) return {0, 0};
    return {out.begin * stride - pad_before, (out.end - 1) * stride - pad_before + span()};
  }
  /// Input range that transposed-conv outputs `out` read: inputs i with i*stride - pad_before +
  /// k*dilation inside `out` for some tap k.
  Range transposed_reads(const Range& out) const {
    if (out.empty()) return {0, 0};
    auto floor_div = [](std::int64_t a, std::int64_t b) {
      return a >= 0 ? a / b : -((-a + b - 1) / b);
    };
    const std::int64_t first = -floor_div(-(out.begin + pad_before - (span() - 1)), stride);
    const std::int64_t last = floor_div(out.end - 1 + pad_before, stride);
    return {first, std::max(first, last + 1)};
  }
};

/**
 * The window of a windowed op over named spatial dims, built in steps:
 * ```cpp
 * Window("x, y, z").stride(2).padding(Padding::same())   // conv: the kernel comes from the weight
 * Window("x, y").kernel(3).stride(2)                     // pooling: overlapping 3x3 windows
 * ```
 * Single values apply to every spatial dim; lists give one value per dim, in the order named.
 */
class Window {
 public:
  Window(const DimNames& spatial) : spatial_(spatial.names()) {
    if (spatial_.empty() || spatial_.size() > 3)
      throw Error("a window slides over 1, 2 or 3 spatial dims, but " +
                  std::to_string(spatial_.size()) + " were named");
  }

  Window& kernel(std::vector<std::int64_t> sizes) {
    return set(kernel_, std::move(sizes), "kernel");
  }
  Window& kernel(std::int64_t size) {
    return kernel(std::vector<std::int64_t>(spatial_.size(), size));
  }
  Window& stride(std::vector<std::int64_t> sizes) {
    return set(stride_, std::move(sizes), "stride");
  }
  Window& stride(std::int64_t size) {
    return stride(std::vector<std::int64_t>(spatial_.size(), size));
  }
  Window& dilation(std::vector<std::int64_t> sizes) {
    return set(dilation_, std::move(sizes), "dilation");
  }
  Window& dilation(std::int64_t size) {
    return dilation(std::vector<std::int64_t>(spatial_.size(), size));
  }
  Window& padding(Padding p) {
    if (p.mode == Padding::Mode::explicit_sizes && p.sizes.size() != spatial_.size())
      throw Error("explicit padding needs (before, after) for each of the " +
                  std::to_string(spatial_.size()) + " spatial dims, got " +
                  std::to_string(p.sizes.size()));
    padding_ = std::move(p);
    return *this;
  }
  Window& padding(const std::string& mode) { return padding(Padding::parse(mode)); }
  /// What the padding holds (PyTorch's padding_mode): zeros by default.
  Window& padding_mode(PadMode mode) {
    padding_mode_ = mode;
    return *this;
  }
  Window& padding_mode(const std::string& mode) { return padding_mode(parse_pad_mode(mode)); }
  PadMode padding_mode() const { return padding_mode_; }
  /// The same window without padding: what an op runs once its input is padded.
  Window unpadded() const {
    Window w = *this;
    w.padding_ = Padding::valid();
    w.padding_mode_ = PadMode::zeros;
    return w;
  }

  const std::vector<std::string>& spatial() const { return spatial_; }
  friend bool operator==(const Window& a, const Window& b) {
    return a.spatial_ == b.spatial_ && a.kernel_ == b.kernel_ && a.stride_ == b.stride_ &&
           a.dilation_ == b.dilation_ && a.padding_ == b.padding_ &&
           a.padding_mode_ == b.padding_mode_ && a.pool_default_stride_ == b.pool_default_stride_;
  }
  const std::vector<std::int64_t>& kernel_sizes() const { return kernel_; }
  bool has_kernel() const { return !kernel_.empty(); }
  const std::vector<std::int64_t>& strides() const { return stride_; }

  /// The window along spatial dim `i` of size `n`, for `op` (named in errors), with `kernel` taps
  /// (from the weight for convolutions) and `transposed` for transposed convolutions.
  WindowDim resolve(const std::string& op, std::size_t i, std::int64_t n, std::int64_t kernel,
                    bool transposed = false) const {
    WindowDim w;
    w.kernel = kernel;
    w.stride = stride_.empty() ? (transposed || !pool_default_stride_ ? 1 : kernel) : stride_[i];
    w.dilation = dilation_.empty() ? 1 : dilation_[i];
    const std::string dim = detail::quote(spatial_[i]);
    if (w.kernel < 1 || w.stride < 1 || w.dilation < 1)
      throw Error(op + ": along dim " + dim + " the kernel (" + std::to_string(w.kernel) +
                  "), stride (" + std::to_string(w.stride) + ") and dilation (" +
                  std::to_string(w.dilation) + ") must all be at least 1");
    switch (padding_.mode) {
      case Padding::Mode::valid:
        break;
      case Padding::Mode::explicit_sizes:
        w.pad_before = padding_.sizes[i].first;
        w.pad_after = padding_.sizes[i].second;
        if (w.pad_before < 0 || w.pad_after < 0)
          throw Error(op + ": padding along dim " + dim + " must not be negative");
        break;
      case Padding::Mode::same: {
        const std::int64_t total =
            transposed
                ? w.span() - w.stride
                : std::max<std::int64_t>((ceil_div(n, w.stride) - 1) * w.stride + w.span() - n, 0);
        if (total < 0)
          throw Error(op + ": \"same\" padding along dim " + dim + " needs the kernel span (" +
                      std::to_string(w.span()) + ") to be at least the stride (" +
                      std::to_string(w.stride) + ")");
        w.pad_before = total / 2;
        w.pad_after = total - total / 2;
        break;
      }
    }
    if (!transposed && w.span() > n + w.pad_before + w.pad_after)
      throw Error(op + ": the window along dim " + dim + " spans " + std::to_string(w.span()) +
                  " positions (kernel " + std::to_string(w.kernel) + ", dilation " +
                  std::to_string(w.dilation) + ") but the padded extent is only " +
                  std::to_string(n + w.pad_before + w.pad_after) + " (size " + std::to_string(n) +
                  "); use a smaller kernel or more padding");
    if (transposed && w.transposed_output(n) < 1)
      throw Error(op + ": along dim " + dim + " the padding (" + std::to_string(w.pad_before) +
                  ", " + std::to_string(w.pad_after) + ") leaves no output");
    return w;
  }

  /// Pooling without an explicit stride steps by the kernel size (non-overlapping windows).
  Window& stride_defaults_to_kernel() {
    pool_default_stride_ = true;
    return *this;
  }

 private:
  static std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

  Window& set(std::vector<std::int64_t>& field, std::vector<std::int64_t> sizes, const char* what) {
    if (sizes.size() != spatial_.size())
      throw Error(std::string("window ") + what + " needs one value for each of the " +
                  std::to_string(spatial_.size()) + " spatial dims " +
                  detail::quote_list(spatial_) + ", got " + std::to_string(sizes.size()));
    field = std::move(sizes);
    return *this;
  }

  std::vector<std::string> spatial_;
  std::vector<std::int64_t> kernel_, stride_, dilation_;
  Padding padding_;
  PadMode padding_mode_ = PadMode::zeros;
  bool pool_default_stride_ = false;
};

}  // namespace meshtensor
