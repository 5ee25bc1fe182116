#pragma once
// A convolution of a concatenation along the channels (the U-Net decoder's skip and up-sampled
// channels), the concatenation never written out: the kernels read the parts where they lie and
// write the input gradient to the parts' gradients (kernels/common/channel_parts.hpp). That saves
// three passes over the joined block a training step (the join, its recomputation for the weight
// gradient and the gradient's split) and the block itself at the memory peak. It runs so where
// the convolution reads each processor's block in place: no halo (no spatial dim split), no
// permutation, channels unsplit on both sides; elsewhere conv(concat(parts)).

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/detail/saved_box.hpp"
#include "meshtensor/ops/resample.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// The concatenation's layout: the first part's, its channels the parts' sum. Empty where the
// parts differ in anything but their channels' size, or split the channels.
template <class T>
std::optional<TensorLayout> joined_layout(const std::vector<Tensor<T>>& parts,
                                          const std::string& channels) {
  const TensorLayout& first = parts[0].layout();
  if (!first.shape().contains(channels) || first.is_split(channels)) return std::nullopt;
  std::int64_t total = 0;
  for (const auto& p : parts) {
    if (&p.mesh() != &parts[0].mesh() || p.shape().names() != first.shape().names() ||
        p.layout().layout() != first.layout())
      return std::nullopt;
    for (const Dim& dim : p.shape())
      if (dim.name != channels && first.shape().dim(dim.name) != dim) return std::nullopt;
    total += p.shape().dim(channels).size;
  }
  std::vector<Dim> dims;
  for (const Dim& dim : first.shape())
    dims.push_back(dim.name == channels ? dim.resized(total) : dim);
  return TensorLayout(Shape(dims), first.mesh_shape(), first.layout());
}

// The backward of a convolution whose input is read as its parts: the weight's gradient (of the
// weight's type W: fp32 for a bfloat16 convolution's master weight) from the parts where they lie,
// the parts' gradients written to each.
template <class T, class W>
struct PartsConvBackward {
  ConvCall<T> call;
  std::vector<KeptBlock<T>> parts;
  std::vector<TensorLayout> layouts;
  std::vector<std::string> summed;  // dims a weight gradient sums over: all but the channels
  TensorLayout aligned_weight, weight_layout;

  std::pair<std::vector<Tensor<T>>, Tensor<W>> operator()(const Tensor<T>& g,
                                                          const std::vector<bool>& need) const {
    const Tensor<T> g_aligned = relayout_to(g, call.plan.output_layout);
    const T* dy = g_aligned.array().data();
    const std::size_t n = parts.size();
    std::pair<std::vector<Tensor<T>>, Tensor<W>> grads{std::vector<Tensor<T>>(n), Tensor<W>()};
    if (need[n]) grads.second = weight_gradient(g.mesh(), dy);
    if (std::find(need.begin(), need.begin() + std::ptrdiff_t(n), true) !=
        need.begin() + std::ptrdiff_t(n))
      input_gradients(g.mesh(), dy, need, grads.first);
    return grads;
  }

 private:
  static std::int64_t channels_of(const Block& block) { return block.sizes().back(); }

  Tensor<W> weight_gradient(Mesh& mesh, const T* dy) const {
    std::vector<Array<T>> scratch;  // a part kept as its recipe, recomputed
    scratch.reserve(parts.size());
    kernels::ChannelParts<const T> in;
    const bool mapped =
        kernels::takes_mapped_input<T>(call.geometry, kernels::plan::ConvClass::backward_weight);
    for (const KeptBlock<T>& part : parts) {
      scratch.push_back(empty_array<T>());
      part.add_to(in, mapped, scratch.back());
    }
    Buffer<double> acc = zero_weight_accumulator(call.w_kernel);
    kernels::conv_backward_weight(call.geometry, in, dy, acc.data());
    return weight_gradient_of<W>(mesh, acc, call.w_kernel.shape(), call.w_order,
                                 axes_splitting(call.plan.input_layout, summed), aligned_weight,
                                 weight_layout);
  }

  void input_gradients(Mesh& mesh, const T* dy, const std::vector<bool>& need,
                       std::vector<Tensor<T>>& grads) const {
    std::vector<Array<T>> dx;
    dx.reserve(parts.size());
    kernels::ChannelParts<T> out;
    for (const KeptBlock<T>& part : parts) {
      dx.push_back(Array<T>::from_shape(to_xshape(part.block().sizes())));
      out.add(dx.back().data(), channels_of(part.block()));
    }
    kernels::conv_backward_input(call.geometry, dy, call.w_kernel.data(), out);
    for (std::size_t i = 0; i < parts.size(); ++i)
      if (need[i]) grads[i] = Tensor<T>(mesh, layouts[i], std::move(dx[i]));
  }
};

// Whether a call reads each processor's block in place, whole, channels last (the identity order
// puts them last), with no partial sums on either side: what the kernels need to read the parts
// where they lie.
template <class T>
bool reads_parts_in_place(const ConvCall<T>& call, const std::string& out_channels) {
  const WindowedPlan& p = call.plan;
  return !call.by_rows && !call.by_boxes && !call.by_slabs && !p.empty() &&
         p.reads_block_in_place() && !p.output_layout.is_split(out_channels);
}

}  // namespace detail

/**
 * conv(concat(parts, channels), weight, window, channels), the concatenation never written out
 * where each processor's convolution reads its block in place (see above); the same values and
 * gradients either way. The parts have the same dims but the channels' size, and one layout. As
 * conv, bfloat16 parts take a bfloat16 weight or an fp32 one (rounded for the call, its gradient
 * summed in fp32).
 */
template <class T, class W>
Tensor<T> conv_concat(const std::vector<Tensor<T>>& parts, const Tensor<W>& weight,
                      const Window& window, const std::string& channels = "channels") {
  const auto joined_parts = [&] { return conv(concat(parts, channels), weight, window, channels); };
  if (parts.size() < 2 || window.padding_mode() != PadMode::zeros) return joined_parts();
  const auto joined = detail::joined_layout(parts, channels);
  if (!joined) return joined_parts();
  Mesh& mesh = parts[0].mesh();
  auto setup = detail::conv_setup<T>("conv", mesh, *joined, weight, window, channels, false);
  detail::ConvCall<T>& call = setup.call;
  const std::string out_channels = setup.dims.out_channels.name;
  if (*joined != joined->with_layout(setup.layout) ||
      !detail::reads_parts_in_place(call, out_channels))
    return joined_parts();

  kernels::ChannelParts<const T> in;
  for (const auto& p : parts) in.add(p.array().data(), p.block().sizes().back());
  Array<T> out = detail::windowed_output<T>(call.plan);
  kernels::conv_forward(call.geometry, in, call.w_kernel.data(), out.data());
  Tensor<T> result(mesh, call.plan.output_layout, std::move(out));

  detail::PartsConvBackward<T, W> backward{std::move(call), {}, {}, {}, setup.weight.layout(),
                                           weight.layout()};
  std::vector<Tensor<T>> inputs;
  for (const auto& p : parts) {
    backward.parts.emplace_back(p);
    backward.layouts.push_back(p.layout());
    inputs.push_back(p);
  }
  for (const Dim& dim : joined->shape())
    if (dim.name != channels) backward.summed.push_back(dim.name);
  autodiff::record_with(result, inputs, weight, std::move(backward));
  return result;
}

template <class T, class W>
Tensor<T> conv_concat(std::initializer_list<Tensor<T>> parts, const Tensor<W>& weight,
                      const Window& window, const std::string& channels = "channels") {
  return conv_concat(std::vector<Tensor<T>>(parts), weight, window, channels);
}

}  // namespace meshtensor
