#pragma once
// What every windowed op (convolution, transposed convolution, pooling) does the same way: it
// plans the output's shape and layout, the halo each processor needs, and the order that brings a
// block into the kernels' layout — pass-through dims, then the spatial dims in window order, then
// the inner dim (channels) last; then it exchanges the box the kernels read, runs its kernels on
// it, and on the way back sends the box's gradient to the owners (windowed_box, windowed_output,
// windowed_input_gradient). The op chooses the strategy: the padded box or the box inside the
// tensor (with the kernels reading zeros beyond it), exchanged before the kernels or overlapped
// with them (the convolution's rows, ops/conv.hpp).

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/ops/halo.hpp"

namespace meshtensor::detail {

struct WindowedPlan {
  TensorLayout input_layout, output_layout;
  HaloExchange halo;
  Block output_block;
  std::vector<std::size_t> to_kernel_order;  // input (and output) dim positions in kernel order
  std::int64_t pass_size = 1;                // product of the pass-through dims' local sizes
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1};
  std::array<kernels::Taps, 3> taps{};
  std::array<WindowDim, 3> windows{};
  std::array<std::int64_t, 3> inside_begin{0, 0, 0}, inside_end{1, 1, 1};
  bool clip_padding = false;  // the box is the halo's inside(), not its padded box()

  bool empty() const { return output_block.empty(); }
};

// `input` is already on the op's layout; `output_shape` is the input's shape with the spatial dims
// resized (and the inner dim possibly renamed/resized); `windows[i]` is spatial dim i's window.
// With `clip_padding` the kernels' box stops at the tensor's edges (the halo exchange's inside())
// and the kernels read the zero padding beyond it implicitly; else the box includes the padding.
inline WindowedPlan plan_windowed(const TensorLayout& input, const Shape& output_shape,
                                  const Layout& layout, const std::vector<std::string>& spatial,
                                  const std::string& inner, const std::vector<WindowDim>& windows,
                                  bool transposed, const MeshCoord& me, bool clip_padding = false) {
  const Shape& shape = input.shape();
  TensorLayout output_layout(output_shape, input.mesh_shape(), layout);
  const HaloNeeds needs = window_needs(input, output_shape, spatial, windows, transposed);
  WindowedPlan plan{
      input, output_layout, HaloExchange(input, me, needs), output_layout.block(me), {}};

  std::vector<std::size_t> pass;
  for (std::size_t d = 0; d < shape.rank(); ++d)
    if (std::find(spatial.begin(), spatial.end(), shape[d].name) == spatial.end() &&
        shape[d].name != inner)
      pass.push_back(d);
  plan.to_kernel_order = pass;
  for (const auto& s : spatial) plan.to_kernel_order.push_back(shape.position(s));
  if (!inner.empty()) plan.to_kernel_order.push_back(shape.position(inner));
  for (auto d : pass) plan.pass_size *= plan.output_block.ranges[d].size();

  plan.clip_padding = clip_padding;
  const Block& need = plan.halo.box();
  const Block box = clip_padding ? plan.halo.inside() : need;
  for (std::size_t i = 0; i < spatial.size(); ++i) {
    const std::size_t d = shape.position(spatial[i]);
    const WindowDim& w = windows[i];
    plan.windows[i] = w;
    plan.in[i] = box.ranges[d].size();
    plan.out[i] = plan.output_block.ranges[d].size();
    plan.kernel[i] = w.kernel;
    plan.inside_begin[i] = -box.ranges[d].begin;
    plan.inside_end[i] = shape[d].size - box.ranges[d].begin;
    kernels::Taps& taps = plan.taps[i];
    taps.transposed = transposed;
    taps.stride = w.stride;
    taps.dilation = w.dilation;
    // A convolution's output 0 reads box index origin (negative where the box was clipped at the
    // tensor's start); a transposed convolution's output o reads box index
    // (o + origin - k*dilation) / stride.
    taps.origin = transposed ? plan.output_block.ranges[d].begin + w.pad_before -
                                   box.ranges[d].begin * w.stride
                             : need.ranges[d].begin - box.ranges[d].begin;
  }
  return plan;
}

// A block (in its dims' order) copied into kernel order; no copy when it already is.
template <class T>
Array<T> to_kernel_order(const Array<T>& block, const std::vector<std::size_t>& order) {
  if (kernels::is_identity(order)) return kernels::copy_of(block);
  std::vector<std::int64_t> sizes(block.shape().begin(), block.shape().end());
  std::vector<std::size_t> permuted;
  for (auto d : order) permuted.push_back(static_cast<std::size_t>(sizes[d]));
  Array<T> out = Array<T>::from_shape(permuted);
  kernels::permute(block.data(), sizes, order, out.data());
  return out;
}

// The same for an array the caller gives up: moved, not copied, when already in kernel order.
template <class T>
Array<T> to_kernel_order(Array<T>&& block, const std::vector<std::size_t>& order) {
  if (kernels::is_identity(order)) return std::move(block);
  return to_kernel_order(static_cast<const Array<T>&>(block), order);
}

// A block read in kernel order: the block itself when it already is, else a permuted copy. The
// block must outlive the view.
template <class T>
class KernelOrderView {
 public:
  KernelOrderView(const Array<T>& block, const std::vector<std::size_t>& order)
      : data_(block.data()) {
    if (kernels::is_identity(order)) return;
    copy_ = to_kernel_order(block, order);
    data_ = copy_.data();
  }
  const T* data() const { return data_; }

 private:
  Array<T> copy_ = empty_array<T>();
  const T* data_;
};

// The inverse: an array in kernel order back to the dims' order.
template <class T>
Array<T> from_kernel_order(Array<T>&& block, const std::vector<std::size_t>& order) {
  return to_kernel_order(std::move(block), kernels::inverse(order));
}
template <class T>
Array<T> from_kernel_order(const Array<T>& block, const std::vector<std::size_t>& order) {
  return to_kernel_order(block, kernels::inverse(order));
}

// The box the kernels read, in kernel order: the own block with the halo around it, padded with
// `pad` outside the tensor, or (with the plan's clip_padding) stopping at the tensor's edges.
template <class T>
Array<T> windowed_box(const WindowedPlan& plan, Mesh& mesh, const Array<T>& own, T pad) {
  return to_kernel_order(
      plan.clip_padding ? plan.halo.exchange_inside(mesh, own) : plan.halo.exchange(mesh, own, pad),
      plan.to_kernel_order);
}

// The output block in kernel order, for the kernels to write.
template <class T>
Array<T> windowed_output(const WindowedPlan& plan) {
  std::vector<std::size_t> sizes;
  for (auto d : plan.to_kernel_order) sizes.push_back(plan.output_block.ranges[d].size());
  return Array<T>::from_shape(sizes);
}

// The gradient of the box (of `box_sizes`, in kernel order) that backward(grad_box) writes —
// zeros where the processor has no output — back in the dims' order, ready to go to the owners.
template <class T, class Backward>
Array<T> windowed_box_gradient(const WindowedPlan& plan, const std::vector<std::size_t>& box_sizes,
                               Backward&& backward) {
  Array<T> grad_box = Array<T>::from_shape(box_sizes);
  if (plan.empty())  // else the kernels write the whole box, zeros where nothing reads
    kernels::fill_values(grad_box.data(), std::int64_t(grad_box.size()), T(0));
  else
    backward(grad_box.data());
  return from_kernel_order(std::move(grad_box), plan.to_kernel_order);
}

// The input block's gradient: the box's (windowed_box_gradient), each part added at its owner.
template <class T, class Backward>
Array<T> windowed_input_gradient(const WindowedPlan& plan, Mesh& mesh,
                                 const std::vector<std::size_t>& box_sizes, Backward&& backward) {
  Array<T> grad = windowed_box_gradient<T>(plan, box_sizes, std::forward<Backward>(backward));
  return plan.clip_padding ? plan.halo.exchange_add_inside(mesh, std::move(grad))
                           : plan.halo.exchange_add(mesh, grad);
}

}  // namespace meshtensor::detail
