#pragma once
// Max and average pooling over named spatial dims, on any layout: windows of any size and stride,
// overlapping or not, with padding. Windows that cross a split get their halo from the neighbours;
// the gradient returns through the reverse exchange-add.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/pool.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/detail/windowed.hpp"
#include "meshtensor/ops/resample.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

template <class T>
Tensor<T> pool(const std::string& op, const Tensor<T>& input, Window window, bool is_max,
               bool count_padding) {
  if (!window.has_kernel())
    throw Error(op + ": the window needs a kernel size, e.g. Window(\"x, y, z\").kernel(2)");
  window.stride_defaults_to_kernel();
  const Shape& shape = input.shape();
  const auto& spatial = window.spatial();
  for (const auto& s : spatial)
    if (!shape.contains(s))
      throw ShapeError(op + ": spatial dim " + quote(s) + " is not a dim of the input " +
                       shape.to_string());
  std::vector<WindowDim> windows;
  std::vector<Dim> output_dims;
  for (const auto& dim : shape) {
    auto s = std::find(spatial.begin(), spatial.end(), dim.name);
    if (s == spatial.end()) {
      output_dims.push_back(dim);
      continue;
    }
    const std::size_t i = s - spatial.begin();
    windows.push_back(window.resolve(op, i, dim.size, window.kernel_sizes()[i]));
    output_dims.push_back(dim.resized(windows.back().conv_output(dim.size)));
  }
  // Padding that holds other than zeros: the input padded so, pooled unpadded (as PyTorch).
  if (window.padding_mode() != PadMode::zeros)
    return pool(op, padded_for_window(op, input, window, windows), window.unpadded(), is_max,
                count_padding);
  // The last dim, when not spatial, is the contiguous inner dim of the kernels.
  const std::string inner =
      std::find(spatial.begin(), spatial.end(), shape[shape.rank() - 1].name) == spatial.end()
          ? shape[shape.rank() - 1].name
          : std::string();
  Mesh& mesh = input.mesh();
  const WindowedPlan plan =
      plan_windowed(input.layout(), Shape(output_dims), input.layout().layout(), spatial, inner,
                    windows, /*transposed=*/false, mesh.coord());
  kernels::PoolGeometry geometry;
  geometry.batch = plan.pass_size;
  geometry.channels = inner.empty() ? 1 : input.block().ranges[shape.rank() - 1].size();
  geometry.in = plan.in;
  geometry.out = plan.out;
  geometry.kernel = plan.kernel;
  geometry.taps = plan.taps;
  geometry.inside_begin = plan.inside_begin;
  geometry.inside_end = plan.inside_end;

  const T pad = is_max ? -std::numeric_limits<T>::infinity() : T(0);
  // Where the windows read the block alone, they read it in place: a box built for them would
  // cost a fill and a copy of the block.
  const bool in_place = plan.reads_block_in_place();
  const Array<T> built = in_place ? empty_array<T>() : windowed_box(plan, mesh, input.array(), pad);
  const Array<T>& box = in_place ? input.array() : built;
  Array<T> out = windowed_output<T>(plan);
  // What max pooling's backward reads: which position of each window won.
  Buffer<std::uint8_t> workspace(
      is_max && !plan.empty() ? kernels::max_pool_workspace_bytes<T>(geometry) : 0);
  if (!plan.empty()) {
    if (is_max)
      kernels::max_pool_forward(geometry, box.data(), out.data(), workspace.data());
    else
      kernels::avg_pool_forward(geometry, box.data(), out.data(), count_padding);
  }
  Tensor<T> result(mesh, plan.output_layout,
                   from_kernel_order(std::move(out), plan.to_kernel_order));

  std::vector<std::size_t> box_sizes(box.shape().begin(), box.shape().end());
  autodiff::record(
      result, {input},
      [plan, geometry, box_sizes, workspace = std::move(workspace), is_max, count_padding](
          const Tensor<T>& g, const std::vector<bool>&) {
        const KernelOrderView<T> g_kernel(g.array(), plan.to_kernel_order);
        auto own = windowed_input_gradient<T>(plan, g.mesh(), box_sizes, [&](T* grad_box) {
          if (is_max)
            kernels::max_pool_backward(geometry, g_kernel.data(), workspace.data(), grad_box);
          else
            kernels::avg_pool_backward(geometry, g_kernel.data(), grad_box, count_padding);
        });
        return std::vector<Tensor<T>>{Tensor<T>(g.mesh(), plan.input_layout, std::move(own))};
      });
  return result;
}

}  // namespace detail

/**
 * Maximum over each window. Without an explicit stride the windows do not overlap (stride =
 * kernel); padding positions never win, unless the window's padding_mode fills them (reflect,
 * replicate or circular: the input padded so first).
 * ```cpp
 * auto down = max_pool(t, Window("x, y, z").kernel(2));               // halves x, y and z
 * auto overlapping = max_pool(t, Window("x, y").kernel(3).stride(2));
 * ```
 */
template <class T>
Tensor<T> max_pool(const Tensor<T>& input, const Window& window) {
  return detail::pool("max_pool", input, window, /*is_max=*/true, false);
}

/// Mean over each window; padding positions count as zeros unless count_padding is false, or
/// hold what the window's padding_mode puts there.
template <class T>
Tensor<T> avg_pool(const Tensor<T>& input, const Window& window, bool count_padding = true) {
  return detail::pool("avg_pool", input, window, /*is_max=*/false, count_padding);
}

}  // namespace meshtensor
