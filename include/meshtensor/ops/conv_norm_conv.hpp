#pragma once
// Two convolutions with batch norm (and ReLU) between them — a U-Net level — sharing one halo
// exchange: a deep halo. Where a spatial dim is split, each processor receives its input's halo
// as wide as both windows together, computes the first convolution on its own rows and on the
// rows of the second's halo (one more per cut for a 3-wide window), normalises them all with the
// statistics of the own rows alone (the same on every processor: each row counted by its owner),
// and runs the second convolution on what it computed: one exchange forward instead of two.
//
// Backward runs the same way round. The halo rows' gradients stay where they are: the sums the
// normalisation's gradient needs are linear in the gradient, so every copy of a row adds its part
// (all-reduced as before); the per-row terms that do not scale with the gradient belong to the
// owner alone; and the first convolution takes the halo rows' gradients back to the input's box,
// whose gradient goes home in one adjoint exchange of the deep halo's width.

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/core/block.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/norm.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/detail/windowed.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/reshape.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// The two convolutions' dims, their common layout, and whether they can share a deep halo.
struct ConvPairDims {
  ConvDims first, second;
  Layout layout;
  bool deep = false;
};

// Both convolutions keep every spatial size (stride 1, "same" padding), no channel dim is split,
// some spatial dim is split and every processor holds some of each: then one deep exchange
// replaces two.
template <class T, class W>
ConvPairDims conv_pair_dims(const Tensor<T>& x, const Tensor<W>& w1, const Tensor<W>& w2,
                            const Window& window, const std::string& channels) {
  const std::string op = "conv_norm_conv";
  ConvPairDims d;
  d.first = conv_dims(op, x.shape(), w1.shape(), window, channels, false);
  std::vector<Dim> middle = x.shape().dims();
  middle[x.shape().position(channels)] = Dim(channels, d.first.out_channels.size);
  d.second = conv_dims(op, Shape(middle), w2.shape(), window, channels, false);
  d.layout = conv_layout(x.layout(), w1.layout(), d.first.kernel_names);
  if (window.padding_mode() != PadMode::zeros) return d;  // each convolution pads its input first

  const TensorLayout xl = x.layout().with_layout(d.layout);
  auto split_here = [&](const TensorLayout& l, const std::string& dim) {
    const auto axis = l.shape().contains(dim) ? l.mesh_axis_of(dim) : std::nullopt;
    return axis && l.mesh_shape()[*axis].size > 1;
  };
  if (split_here(xl, channels) ||
      split_here(w1.layout().with_layout(d.layout), d.first.out_channels.name) ||
      split_here(w2.layout().with_layout(d.layout), d.second.out_channels.name))
    return d;
  bool spatial_split = false;
  const auto& spatial = window.spatial();
  for (std::size_t i = 0; i < spatial.size(); ++i) {
    const std::int64_t n = x.shape().dim(spatial[i]).size;
    for (const WindowDim& w : {d.first.windows[i], d.second.windows[i]})
      if (w.stride != 1 || w.conv_output(n) != n) return d;
    // A processor that holds none of a split dim owns no rows whose halo rows it could compute.
    const auto axis = xl.mesh_axis_of(spatial[i]);
    if (axis && n < xl.mesh_shape()[*axis].size) return d;
    spatial_split = spatial_split || split_here(xl, spatial[i]);
  }
  d.deep = spatial_split;
  return d;
}

// The first convolution's output rows this processor computes: those the second convolution's
// own outputs read, inside the tensor.
inline Block rows_read(const Block& own, const Shape& shape,
                       const std::vector<std::string>& spatial,
                       const std::vector<WindowDim>& windows) {
  Block rows = own;
  for (std::size_t i = 0; i < spatial.size(); ++i) {
    const std::size_t d = shape.position(spatial[i]);
    rows.ranges[d] = intersect(windows[i].conv_reads(own.ranges[d]), {0, shape[d].size});
  }
  return rows;
}

inline Block in_kernel_order(const Block& b, const std::vector<std::size_t>& order) {
  Block out;
  for (auto d : order) out.ranges.push_back(b.ranges[d]);
  return out;
}

// A convolution from `box` to `out` (kernel order, global indices), windows stride 1.
inline kernels::ConvGeometry geometry_between(const Block& box, const Block& out,
                                              const std::vector<WindowDim>& windows,
                                              std::int64_t batch, std::int64_t c_in,
                                              std::int64_t c_out) {
  kernels::ConvGeometry g;
  g.batch = batch;
  g.c_in = c_in;
  g.c_out = c_out;
  const std::size_t first = box.ranges.size() - 1 - windows.size();  // after the pass dims
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const Range &in = box.ranges[first + i], &o = out.ranges[first + i];
    g.in[i] = in.size();
    g.out[i] = o.size();
    g.kernel[i] = windows[i].kernel;
    g.taps[i].dilation = windows[i].dilation;
    g.taps[i].origin = o.begin - windows[i].pad_before - in.begin;
  }
  return g;
}

template <class T>
Array<T> array_over(const Block& b) {
  return Array<T>::from_shape(HaloPlan::sizes_of(b));
}

// `part` (inside `box`) of an array over `box`, as an array of its own.
template <class T>
Array<T> part_of(const Array<T>& a, const Block& box, const Block& part) {
  Array<T> out = array_over<T>(part);
  copy_box_between(part, a.data(), box, out.data(), part);
  return out;
}

// What both passes share. The first convolution is a call of its own (ops/conv.hpp: overlapped,
// in slabs or on a box, as a single convolution would be) on the exchange of both windows' halo,
// with the middle rows as its output; blocks are in kernel order (pass-through dims, spatial,
// channels).
template <class T, class W>
struct ConvPair {
  explicit ConvPair(ConvCall<T> first_call) : first(std::move(first_call)) {}

  ConvCall<T> first;             // box -> middle rows
  Block middle, own;             // the first output's rows here and its own rows
  kernels::ConvGeometry second;  // middle rows -> own rows of the output
  std::vector<std::size_t> w2_order;
  Array<T> w2;            // in kernel order, in T
  NormStatistics st;      // of the own rows of the first output
  AffineOfKey<W> affine;  // the normalisation: a y + b, then the ReLU's floor
  bool relu = true;
  TensorLayout stats_layout, aligned_w2;

  const WindowedPlan& plan() const { return first.plan; }

  // The normalised first output over the middle rows, from the first output `y`.
  Array<T> normalised(const Array<T>& y) const {
    Array<T> a = array_over<T>(middle);
    const T floor = relu ? T(0) : -std::numeric_limits<T>::infinity();
    kernels::norm_affine(middle.sizes(), st.key_strides, st.key_count(), y.data(), affine.a(),
                         affine.b(), floor, a.data());
    return a;
  }
  // The ReLU's mask on the first output `y`: where its normalised value is positive.
  kernels::ReluMask<T> mask(const Array<T>& y) const {
    return {relu ? y.data() : nullptr, affine.a(), affine.b()};
  }
};

inline std::vector<std::size_t> weight_order(const Shape& w, const ConvDims& dims,
                                             const std::string& channels) {
  std::vector<std::size_t> order;
  for (const auto& k : dims.kernel_names) order.push_back(w.position(k));
  order.push_back(w.position(channels));
  order.push_back(w.position(dims.out_channels.name));
  return order;
}

// The first convolution's call: the exchange of both windows' halo (overlapped by rows or by
// boxes where halo_overlap() is on), the middle rows out.
template <class T, class W>
ConvCall<T> first_call(const Tensor<T>& x, const Tensor<W>& w1, const ConvPairDims& d,
                       const Window& window, const std::string& channels, const Block& middle) {
  const auto& spatial = window.spatial();
  std::vector<WindowDim> both;  // the input rows both windows read, one after the other
  for (std::size_t i = 0; i < spatial.size(); ++i) {
    const WindowDim &a = d.first.windows[i], &b = d.second.windows[i];
    both.push_back(WindowDim{a.span() + b.span() - 1, 1, 1, a.pad_before + b.pad_before,
                             a.pad_after + b.pad_after});
  }
  const HaloForm form = halo_overlap() ? HaloForm::pieces : HaloForm::inside;
  ConvCall<T> c(plan_windowed(x.layout(), Shape(d.second.output_dims), d.layout, spatial, channels,
                              both, false, x.mesh().coord(), form));
  const auto& order = c.plan.to_kernel_order;
  c.w_order = weight_order(w1.shape(), d.first, channels);
  c.w_kernel = weight_in_kernel_order<T>(w1.array(), c.w_order);
  c.geometry = geometry_between(in_kernel_order(c.plan.halo.inside(), order),
                                in_kernel_order(middle, order), d.first.windows, c.plan.pass_size,
                                x.shape().dim(channels).size, d.first.out_channels.size);
  choose_strategy(c, x.shape().position(spatial[0]));
  return c;
}

// The plan of a pair on `x`, `w1` and `w2` already in the pair's layout.
template <class T, class W>
ConvPair<T, W> conv_pair(const Tensor<T>& x, const Tensor<W>& w1, const Tensor<W>& w2,
                         const ConvPairDims& d, const Window& window, const std::string& channels) {
  const Shape& shape = x.shape();
  const std::size_t cd = shape.position(channels);
  Block own =
      TensorLayout(Shape(d.second.output_dims), x.mesh().shape(), d.layout).block(x.mesh().coord());
  Block middle = rows_read(own, shape, window.spatial(), d.second.windows);
  own.ranges[cd] = middle.ranges[cd] = {0, d.first.out_channels.size};
  ConvPair<T, W> c(first_call(x, w1, d, window, channels, middle));
  const auto& order = c.plan().to_kernel_order;
  c.middle = in_kernel_order(middle, order);
  c.own = in_kernel_order(own, order);
  c.second = geometry_between(c.middle, c.own, d.second.windows, c.plan().pass_size,
                              d.first.out_channels.size, d.second.out_channels.size);
  c.w2_order = weight_order(w2.shape(), d.second, channels);
  c.w2 = weight_in_kernel_order<T>(w2.array(), c.w2_order);
  c.aligned_w2 = w2.layout();
  return c;
}

// The statistics of the first output's own rows (`y` over the middle rows), each row counted
// once, by its owner: read in place where they are one run of y, else copied out.
template <class T, class W>
NormStatistics own_statistics(const ConvPair<T, W>& c, Mesh& mesh, const Array<T>& y,
                              std::vector<Dim> dims, const std::string& channels, double epsilon) {
  std::vector<Dim> permuted;
  std::vector<std::string> reduced;
  for (auto d : c.plan().to_kernel_order) {
    permuted.push_back(dims[d]);
    if (dims[d].name != channels) reduced.push_back(dims[d].name);
  }
  const TensorLayout layout(Shape(permuted), mesh.shape(), c.plan().output_layout.layout());
  if (contiguous_in(c.middle, c.own)) {
    const auto strides = kernels::row_major_strides(c.middle.sizes());
    const T* own = y.data() + kernels::offset_of_box(c.own, c.middle, strides);
    return norm_statistics(mesh, layout, own, DimNames(reduced), epsilon, "conv_norm_conv");
  }
  const Array<T> own = part_of(y, c.middle, c.own);
  return norm_statistics(mesh, layout, own.data(), DimNames(reduced), epsilon, "conv_norm_conv");
}

// Backward of a pair: the second convolution's, the normalisation's and the first's (as a
// single convolution's backward, whose input gradient goes home in one adjoint exchange).
template <class T, class W>
struct ConvNormConvBackward {
  using Grads = std::tuple<Tensor<T>, Tensor<W>, Tensor<W>, Tensor<W>, Tensor<W>>;

  ConvPair<T, W> c;          // its first call moved to `first`
  ConvBackward<T, W> first;  // the first convolution's backward, from the middle rows' gradient
  // The first output over the middle rows: released once the normalisation's gradient is made
  // (a step runs once), before the first convolution's gradients, backward's largest arrays.
  mutable Array<T> y;
  TensorLayout gamma_layout, beta_layout, w2_layout;

  const WindowedPlan& plan() const { return first.call.plan; }

  // g by value: freed once the second convolution's gradients are made (the first's input
  // gradient, the largest, is made without it).
  Grads operator()(Tensor<T> g, const std::array<bool, 5>& need) const {
    Mesh& mesh = g.mesh();
    Grads grads;
    Array<T> gy = second_gradients(std::move(g), need[4], grads);
    if (!need[0] && !need[1] && !need[2] && !need[3]) return grads;
    // Over the middle rows: each copy of a row adds its part of the row's gradient, so the
    // all-reduced sums are the single-processor ones.
    const Array<double> sums = gradient_sums(mesh, c.st, c.middle.sizes(), gy.data(), y.data(),
                                             c.st.scale(), c.st.shift(), c.mask(y));
    if (need[2])
      std::get<2>(grads) = per_key_gradient<W>(mesh, c.st, sums, 1, c.stats_layout, gamma_layout);
    if (need[3])
      std::get<3>(grads) = per_key_gradient<W>(mesh, c.st, sums, 0, c.stats_layout, beta_layout);
    if (!need[0] && !need[1]) return grads;
    through_normalisation(sums, gy);
    y = empty_array<T>();
    std::tie(std::get<0>(grads), std::get<1>(grads)) =
        first.gradients(mesh, gy.data(), {need[0], need[1]});
    return grads;
  }

 private:
  // The second convolution's weight gradient (where `need_w2`) and the gradient of its input,
  // the middle rows (returned).
  Array<T> second_gradients(Tensor<T> g, bool need_w2, Grads& grads) const {
    Mesh& mesh = g.mesh();
    const Tensor<T> aligned = relayout_to(std::move(g), plan().output_layout);
    const KernelOrderView<T> g_kernel(aligned.array(), plan().to_kernel_order);
    if (need_w2) {
      Buffer<double> acc = zero_weight_accumulator(c.w2);
      const Array<T> a = c.normalised(y);
      kernels::conv_backward_weight(c.second, a.data(), g_kernel.data(), acc.data());
      std::get<4>(grads) = weight_gradient_of<W>(mesh, acc, c.w2.shape(), c.w2_order,
                                                 axes_splitting(plan().input_layout, first.summed),
                                                 c.aligned_w2, w2_layout);
    }
    Array<T> gy = array_over<T>(c.middle);
    kernels::conv_backward_input(c.second, g_kernel.data(), c.w2.data(), gy.data());
    return gy;
  }

  // gy becomes the first output's gradient, p g' + q y + r: p g' on every copy of a row (linear
  // in its part of the gradient), q y + r by the row's owner alone. Each element is computed in
  // one go (in bfloat16, rounding p g' and q y + r apart loses what they cancel): the halo rows
  // first, apart, then the whole in place, then the halo rows put back.
  void through_normalisation(const Array<double>& sums, Array<T>& gy) const {
    const KeyArray terms = gradient_terms(c.st, c.affine.gamma.array().data(), sums);
    const std::size_t keys = c.st.keys;
    const double *p = terms->data(), *q = p + keys, *r = p + 2 * keys;
    Array<double> zeros = Array<double>::from_shape({keys});
    kernels::fill_values(zeros.data(), std::int64_t(keys), 0.0);
    std::vector<std::pair<Block, Array<T>>> halo_rows;
    for (const Block& slab : outside(c.middle, c.own)) {
      Array<T> g = part_of(gy, c.middle, slab);
      const Array<T> v = part_of(y, c.middle, slab);
      const kernels::ReluMask<T> mask{c.relu ? v.data() : nullptr, c.affine.a(), c.affine.b()};
      kernels::norm_input_gradient(slab.sizes(), c.st.key_strides, c.st.key_count(), g.data(),
                                   v.data(), mask, p, zeros.data(), zeros.data(), g.data());
      halo_rows.emplace_back(slab, std::move(g));
    }
    kernels::norm_input_gradient(c.middle.sizes(), c.st.key_strides, c.st.key_count(), gy.data(),
                                 y.data(), c.mask(y), p, q, r, gy.data());
    for (const auto& [slab, g] : halo_rows)
      copy_box_between(slab, g.data(), slab, gy.data(), c.middle);
  }
};

template <class T, class W>
Tensor<T> deep_conv_norm_conv(const Tensor<T>& input, const Tensor<W>& w1, const Tensor<W>& gamma,
                              const Tensor<W>& beta, const Tensor<W>& w2, const Window& window,
                              const std::string& channels, double epsilon, Moments<W>* moments,
                              Activation activation, const ConvPairDims& d) {
  Mesh& mesh = input.mesh();
  const auto x = relayout_to(input, input.layout().with_layout(d.layout));
  const auto w1_here = relayout_to(w1, w1.layout().with_layout(d.layout));
  ConvPair<T, W> c = conv_pair(x, w1_here, relayout_to(w2, w2.layout().with_layout(d.layout)), d,
                               window, channels);
  Array<T> y = array_over<T>(c.middle);
  std::vector<std::size_t> box_sizes;
  SavedBox<T> saved = conv_forward(c.first, x, y, box_sizes);

  std::vector<Dim> middle_dims = x.shape().dims();
  middle_dims[x.shape().position(channels)] = Dim(channels, d.first.out_channels.size);
  c.st = own_statistics(c, mesh, y, middle_dims, channels, epsilon);
  store_moments(c.st, mesh, d.layout, moments);
  c.stats_layout = TensorLayout(Shape(c.st.kept_dims), mesh.shape(), d.layout);
  c.affine = affine_of_key(c.st, gamma, beta, c.stats_layout);
  c.relu = activation == Activation::relu;

  Array<T> out = windowed_output<T>(c.plan());
  kernels::conv_forward(c.second, c.normalised(y).data(), c.w2.data(), out.data());
  Tensor<T> result(mesh, c.plan().output_layout,
                   from_kernel_order(std::move(out), c.plan().to_kernel_order));

  std::vector<std::string> summed;
  for (const auto& dim : x.shape())
    if (dim.name != channels) summed.push_back(dim.name);
  ConvBackward<T, W> first{std::move(c.first), std::move(saved),     std::move(box_sizes),
                           std::move(summed),  d.first.out_channels, input.layout(),
                           w1.layout(),        w1_here.layout()};
  autodiff::record_mixed(result, std::make_tuple(input, w1, gamma, beta, w2),
                         ConvNormConvBackward<T, W>{std::move(c), std::move(first), std::move(y),
                                                    gamma.layout(), beta.layout(), w2.layout()});
  return result;
}

}  // namespace detail

/**
 * conv(activation(batch_norm(conv(x, w1))), w2): a U-Net level's two convolutions, with the
 * batch norm (training mode: the batch's statistics, returned in `moments`) and the activation
 * between them. The first convolution's output channel dim takes the name `channels` (as
 * nn::Conv renames it); the result has w2's output-channel dim in its place, as conv's.
 *
 * Where a spatial dim is split, both convolutions keep the spatial sizes (stride 1, "same"
 * padding) and no channel dim is split, the two share one halo exchange as wide as both windows
 * (a deep halo: the first computes the rows the second's halo needs); elsewhere it is the three
 * ops one after the other. Either way the result is the single-processor one.
 *
 * ```cpp
 * // x [batch, x, y, z, channels=8], w1 and w2 [kx=3, ky=3, kz=3, channels=8, features=8]
 * auto y = conv_norm_conv(x, w1, gamma, beta, w2, Window("x, y, z").padding("same"));
 * ```
 */
template <class T, class W>
Tensor<T> conv_norm_conv(const Tensor<T>& x, const Tensor<W>& w1, const Tensor<W>& gamma,
                         const Tensor<W>& beta, const Tensor<W>& w2, const Window& window,
                         const std::string& channels = "channels", double epsilon = 1e-5,
                         std::common_type_t<Moments<W>>* moments = nullptr,
                         Activation activation = Activation::relu) {
  const detail::ConvPairDims d = detail::conv_pair_dims(x, w1, w2, window, channels);
  if (d.deep)
    return detail::deep_conv_norm_conv(x, w1, gamma, beta, w2, window, channels, epsilon, moments,
                                       activation, d);
  Tensor<T> y = conv(x, w1, window, channels);
  if (d.first.out_channels.name != channels)
    y = rename(std::move(y), d.first.out_channels.name, channels);
  return conv(batch_norm(y, gamma, beta, channels, epsilon, moments, activation), w2, window,
              channels);
}

}  // namespace meshtensor
