#pragma once
// Convolution and transposed convolution over named spatial dims, on any layout. A split spatial
// dim gets its halo from the neighbours (ops/halo.hpp); a split batch dim needs nothing; a split
// input-channel dim leaves partial sums that an all-reduce completes; a split output-channel dim
// splits the output. The gradients follow the same rules backwards: the input's by the reverse
// exchange-add of the halo, the weight's by an all-reduce over the axes that split batch and
// space.
//
// The weight has one kernel dim per spatial dim, named "k" + the spatial dim's name (kx, ky, kz),
// the input-channel dim (named as in the input) and one output-channel dim, which takes the input
// channel dim's place in the output.

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/conv_rows.hpp"
#include "meshtensor/ops/detail/saved_box.hpp"
#include "meshtensor/ops/detail/windowed.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

inline std::string kernel_dim(const std::string& spatial) { return "k" + spatial; }

// The mesh axes that split any of `dims` in `layout`.
inline AxisSet axes_splitting(const TensorLayout& layout, const std::vector<std::string>& dims) {
  AxisSet set = 0;
  for (const auto& d : dims)
    if (layout.shape().contains(d))
      if (auto axis = layout.mesh_axis_of(d)) set |= AxisSet{1} << *axis;
  return set;
}

template <class T>
void complete_partial_sums(Mesh& mesh, AxisSet axes, Array<T>& data) {
  if (axes) all_reduce(mesh.group(axes), data, ReduceOp::sum);
}

// Where the rows of a box split along its first kernel dim lie: the own block's rows
// [own_lo, own_hi) of the box, the halo pieces' rows around them.
struct RowsOfBox {
  RowsOfBox(const WindowedPlan& plan, std::size_t split_dim)
      : dim(split_dim),
        box_begin(plan.halo.inside().ranges[split_dim].begin),
        own_lo(plan.halo.own().ranges[split_dim].begin - box_begin),
        own_hi(plan.halo.own().ranges[split_dim].end - box_begin) {}

  // The box's rows with only the own block's (at `own`) known yet.
  template <class T>
  BoxRows<T> own(const kernels::ConvGeometry& g, const T* own_data) const {
    BoxRows<T> rows(kernels::input_row_size(g));
    rows.add(own_lo, own_hi - own_lo, own_data);
    return rows;
  }
  template <class T>
  void add_halo(BoxRows<T>& rows, const HaloExchange::Pieces<T>& halo) const {
    for (const auto& [block, data] : halo)
      rows.add(first_row(block), block.ranges[dim].size(), data.data());
  }
  std::int64_t first_row(const Block& piece) const { return piece.ranges[dim].begin - box_begin; }

  std::size_t dim;
  std::int64_t box_begin, own_lo, own_hi;
};

template <class T>
Tensor<T> convolve(const std::string& op, const Tensor<T>& input, const Tensor<T>& weight,
                   const Window& window, const std::string& channels, bool transposed) {
  check_same_mesh<T>(op, {&input, &weight});
  const Shape& in_shape = input.shape();
  const Shape& w_shape = weight.shape();
  const auto& spatial = window.spatial();
  if (!in_shape.contains(channels))
    throw ShapeError(op + ": the input " + in_shape.to_string() + " has no channel dim " +
                     quote(channels) + "; name it with the channels argument");
  if (!w_shape.contains(channels))
    throw ShapeError(op + ": the weight " + w_shape.to_string() + " has no input-channel dim " +
                     quote(channels));
  if (w_shape.dim(channels).size != in_shape.dim(channels).size)
    throw ShapeError(op + ": the input has " + channels + "=" +
                     std::to_string(in_shape.dim(channels).size) + " but the weight has " +
                     channels + "=" + std::to_string(w_shape.dim(channels).size) +
                     "; the input-channel counts must agree");
  std::vector<std::string> kernel_names;
  for (const auto& s : spatial) {
    if (!in_shape.contains(s))
      throw ShapeError(op + ": spatial dim " + quote(s) + " is not a dim of the input " +
                       in_shape.to_string());
    kernel_names.push_back(kernel_dim(s));
    if (!w_shape.contains(kernel_names.back()))
      throw ShapeError(op + ": the weight " + w_shape.to_string() + " has no kernel dim " +
                       quote(kernel_names.back()) + " for spatial dim " + quote(s));
  }
  std::vector<Dim> out_dims;
  for (const auto& dim : w_shape)
    if (dim.name != channels &&
        std::find(kernel_names.begin(), kernel_names.end(), dim.name) == kernel_names.end())
      out_dims.push_back(dim);
  if (out_dims.size() != 1)
    throw ShapeError(op + ": the weight " + w_shape.to_string() +
                     " needs exactly one output-channel dim besides the kernel dims and " +
                     quote(channels));
  const Dim out_channels = out_dims[0];
  if (out_channels.name != channels && in_shape.contains(out_channels.name))
    throw ShapeError(op + ": the weight's output-channel dim " + quote(out_channels.name) +
                     " is already a dim of the input " + in_shape.to_string());

  std::vector<WindowDim> windows;
  std::vector<Dim> output_dims;
  for (const auto& dim : in_shape) {
    if (dim.name == channels) {
      output_dims.push_back(out_channels);
      continue;
    }
    auto s = std::find(spatial.begin(), spatial.end(), dim.name);
    if (s == spatial.end()) {
      output_dims.push_back(dim);
      continue;
    }
    const std::size_t i = s - spatial.begin();
    windows.push_back(
        window.resolve(op, i, dim.size, w_shape.dim(kernel_names[i]).size, transposed));
    const auto n = transposed ? windows.back().transposed_output(dim.size)
                              : windows.back().conv_output(dim.size);
    if (n < 1)
      throw ShapeError(op + ": along dim " + quote(dim.name) + " the output would be empty");
    output_dims.push_back(dim.resized(n));
  }

  // One layout for both operands; kernel dims are never split.
  std::vector<LayoutRule> rules;
  const Layout common = common_layout({&input.layout(), &weight.layout()});
  for (const auto& rule : common.rules())
    if (std::find(kernel_names.begin(), kernel_names.end(), rule.dim) == kernel_names.end())
      rules.push_back(rule);
  const Layout layout(rules);
  Mesh& mesh = input.mesh();
  const auto x = relayout_to(input, input.layout().with_layout(layout));
  const auto w = relayout_to(weight, weight.layout().with_layout(layout));
  // Convolutions leave the zero padding to the kernels: no padded copy of the block.
  const WindowedPlan plan = plan_windowed(x.layout(), Shape(output_dims), layout, spatial, channels,
                                          windows, transposed, mesh.coord(), !transposed);

  // The weight in kernel order: kernel dims in window order, then input and output channels.
  std::vector<std::size_t> w_order;
  for (const auto& k : kernel_names) w_order.push_back(w_shape.position(k));
  w_order.push_back(w_shape.position(channels));
  w_order.push_back(w_shape.position(out_channels.name));
  Array<T> w_kernel = to_kernel_order(w.array(), w_order);

  kernels::ConvGeometry geometry;
  geometry.batch = plan.pass_size;
  geometry.c_in = x.block().ranges[in_shape.position(channels)].size();
  geometry.c_out = w.block().ranges[w_shape.position(out_channels.name)].size();
  geometry.in = plan.in;
  geometry.out = plan.out;
  geometry.kernel = plan.kernel;
  geometry.taps = plan.taps;

  // The kernels read the block in place when it needs no halo and no permutation; else a box.
  const bool in_place =
      plan.clip_padding && plan.halo.local_only() && kernels::is_identity(plan.to_kernel_order);
  // With the first spatial dim the only split one (and one pass-through index), the box is a
  // stack of rows: the kernels read the own block in place and the halo rows kept apart
  // (conv_rows.hpp). The output rows that need no halo are computed while it is in flight, then
  // the rows along the cuts.
  const std::size_t first_spatial = in_shape.position(spatial[0]);
  const bool by_rows = plan.clip_padding && !plan.halo.local_only() && !plan.empty() &&
                       kernels::is_identity(plan.to_kernel_order) && plan.pass_size == 1 &&
                       plan.halo.exchanged() == std::vector<std::size_t>{first_spatial} &&
                       plan.halo.inside_work() == plan.halo.inside();
  std::vector<std::size_t> out_sizes;
  for (auto d : plan.to_kernel_order) out_sizes.push_back(plan.output_block.ranges[d].size());
  Array<T> out = Array<T>::from_shape(out_sizes);
  SavedBox<T> saved;
  std::vector<std::size_t> box_sizes;
  if (by_rows) {
    const RowsOfBox rows_of(plan, first_spatial);
    auto pending = plan.halo.begin_halo(mesh, x.array());
    BoxRows<T> rows = rows_of.own(geometry, x.array().data());
    const auto [lo, hi] = interior_rows(geometry, rows_of.own_lo, rows_of.own_hi);
    conv_rows(geometry, rows, w_kernel.data(), out.data(), lo, hi);
    auto halo = plan.halo.finish_halo(mesh, std::move(pending));
    rows_of.add_halo(rows, halo);
    conv_rows(geometry, rows, w_kernel.data(), out.data(), 0, lo);
    conv_rows(geometry, rows, w_kernel.data(), out.data(), hi, geometry.out[0]);
    saved = SavedBox<T>::own_and_halo(x, plan.halo.inside(), std::move(halo));
  } else {
    Array<T> box = empty_array<T>();
    if (!in_place)
      box = to_kernel_order(plan.clip_padding ? plan.halo.exchange_inside(mesh, x.array())
                                              : plan.halo.exchange(mesh, x.array(), T(0)),
                            plan.to_kernel_order);
    const T* box_data = in_place ? x.array().data() : box.data();
    const auto& box_shape = in_place ? x.array().shape() : box.shape();
    box_sizes.assign(box_shape.begin(), box_shape.end());
    if (!plan.empty()) kernels::conv_forward(geometry, box_data, w_kernel.data(), out.data());
    // Backward keeps the input block and the halo, not a second copy of the block (nor the box of
    // a transposed convolution that needs neither halo nor padding: that box is the block).
    const bool box_is_block = plan.halo.local_only() &&
                              kernels::is_identity(plan.to_kernel_order) &&
                              box_sizes == to_xshape(x.block().sizes());
    saved = box_is_block ? SavedBox<T>::own_block(x)
            : plan.clip_padding && kernels::is_identity(plan.to_kernel_order) &&
                    plan.halo.inside_work() == plan.halo.inside()
                ? SavedBox<T>::halo_only(x, box, plan.halo.inside())
                : SavedBox<T>::whole(std::move(box));
  }
  out = from_kernel_order(std::move(out), plan.to_kernel_order);
  complete_partial_sums(mesh, axes_splitting(x.layout(), {channels}), out);
  Tensor<T> result(mesh, plan.output_layout, std::move(out));

  std::vector<std::string> summed;  // dims a weight gradient sums over: all but the channels
  for (const auto& dim : in_shape)
    if (dim.name != channels) summed.push_back(dim.name);
  autodiff::record(
      result, {input, weight},
      [plan, geometry, by_rows, first_spatial, saved = std::move(saved), box_sizes,
       w_kernel = std::move(w_kernel), w_order, summed, channels, out_channels,
       input_layout = input.layout(), weight_layout = weight.layout(),
       aligned_weight = w.layout()](const Tensor<T>& g, const std::vector<bool>& need) {
        Mesh& mesh = g.mesh();
        const Tensor<T> g_aligned = relayout_to(g, plan.output_layout);
        const KernelOrderView<T> g_kernel(g_aligned.array(), plan.to_kernel_order);
        std::vector<Tensor<T>> grads(2);
        // The weight's gradient accumulates in double, in the processor's memory (its device's,
        // where it computes on one), and is rounded to T there.
        auto zero_accumulator = [&] {
          Buffer<double> acc(w_kernel.size());
          kernels::fill_values(acc.data(), std::int64_t(acc.size()), 0.0);
          return acc;
        };
        auto weight_gradient_from = [&](const Buffer<double>& acc) {
          Array<T> dw = Array<T>::from_shape(w_kernel.shape());
          kernels::narrow(acc.data(), dw.data(), std::int64_t(acc.size()));
          complete_partial_sums(mesh, axes_splitting(plan.input_layout, summed), dw);
          grads[1] = relayout_to(
              Tensor<T>(mesh, aligned_weight, from_kernel_order(std::move(dw), w_order)),
              weight_layout);
        };
        auto input_gradient_from = [&](Array<T>&& own) {
          complete_partial_sums(mesh, axes_splitting(plan.output_layout, {out_channels.name}), own);
          grads[0] = relayout_to(Tensor<T>(mesh, plan.input_layout, std::move(own)), input_layout);
        };

        if (by_rows) {
          // The halo rows' gradient goes back to their owners first and travels while the
          // weight's gradient and the own rows' are computed — each from the own block in place,
          // so that backward holds no box-sized copy.
          const RowsOfBox rows_of(plan, first_spatial);
          std::optional<HaloExchange::Pending<T>> returning;
          if (need[0]) {
            HaloExchange::Pieces<T> halo_gradient;
            for (const auto& [block, data] : saved.halo()) {
              Buffer<T> piece(data.size());
              input_rows(geometry, g_kernel.data(), w_kernel.data(), piece.data(),
                         rows_of.first_row(block),
                         rows_of.first_row(block) + block.ranges[first_spatial].size());
              halo_gradient.emplace_back(block, std::move(piece));
            }
            returning = plan.halo.begin_add_halo(mesh, halo_gradient);
          }
          if (need[1]) {
            Buffer<double> acc = zero_accumulator();
            Array<T> recomputed =
                empty_array<T>();  // the input block, where backward keeps its recipe
            BoxRows<T> rows = rows_of.own(geometry, saved.own().data(recomputed));
            rows_of.add_halo(rows, saved.halo());
            const auto [lo, hi] = interior_rows(geometry, rows_of.own_lo, rows_of.own_hi);
            weight_rows(geometry, rows, g_kernel.data(), acc.data(), lo, hi);
            weight_rows(geometry, rows, g_kernel.data(), acc.data(), 0, lo);
            weight_rows(geometry, rows, g_kernel.data(), acc.data(), hi, geometry.out[0]);
            weight_gradient_from(acc);
          }
          if (need[0]) {
            Array<T> own = Array<T>::from_shape(to_xshape(plan.halo.own().sizes()));
            input_rows(geometry, g_kernel.data(), w_kernel.data(), own.data(), rows_of.own_lo,
                       rows_of.own_hi);
            plan.halo.finish_add_halo(mesh, std::move(*returning), own);
            input_gradient_from(std::move(own));
          }
          return grads;
        }

        auto weight_gradient = [&] {
          Buffer<double> acc = zero_accumulator();
          if (!plan.empty()) {
            Array<T> rebuilt = empty_array<T>();
            kernels::conv_backward_weight(geometry, saved.data(rebuilt), g_kernel.data(),
                                          acc.data());
          }
          weight_gradient_from(acc);
        };
        // The input's gradient goes back through the halo while the weight's is computed. With
        // no halo there is nothing to overlap: the weight's goes first, so that the input box it
        // rebuilds is freed before the input's gradient is allocated.
        const bool halo_traffic = !plan.halo.local_only();
        if (need[1] && !halo_traffic) weight_gradient();
        std::optional<HaloExchange::Pending<T>> returning;
        Array<T> own = empty_array<T>();
        if (need[0]) {
          Array<T> grad_box = Array<T>::from_shape(box_sizes);
          if (plan.empty())  // else the kernels write the whole box, zeros where nothing reads
            kernels::fill_values(grad_box.data(), std::int64_t(grad_box.size()), T(0));
          else
            kernels::conv_backward_input(geometry, g_kernel.data(), w_kernel.data(),
                                         grad_box.data());
          auto in_order = from_kernel_order(std::move(grad_box), plan.to_kernel_order);
          if (!plan.clip_padding)
            own = plan.halo.exchange_add(mesh, in_order);
          else if (!halo_traffic)
            own = std::move(in_order);
          else
            returning = plan.halo.begin_add_inside(mesh, std::move(in_order));
        }
        if (need[1] && halo_traffic) weight_gradient();
        if (need[0]) {
          if (returning) own = plan.halo.finish(mesh, std::move(*returning));
          input_gradient_from(std::move(own));
        }
        return grads;
      });
  return result;
}

}  // namespace detail

/**
 * Convolution of `input` with `weight` over the window's spatial dims, on any layout.
 *
 * ```cpp
 * // input [batch, x, y, z, channels=8], weight [kx=3, ky=3, kz=3, channels=8, features=16]
 * auto y = conv(input, weight, Window("x, y, z").padding("same"));   // [batch, x, y, z,
 * features=16]
 * ```
 */
template <class T>
Tensor<T> conv(const Tensor<T>& input, const Tensor<T>& weight, const Window& window,
               const std::string& channels = "channels") {
  return detail::convolve("conv", input, weight, window, channels, /*transposed=*/false);
}

/**
 * Transposed convolution (the gradient of a convolution with respect to its input, as a layer):
 * output o receives input i through tap k where o = i*stride - pad_before + k*dilation. With
 * kernel 2, stride 2 and "valid" padding it doubles each spatial size (the U-Net's up-sampling).
 */
template <class T>
Tensor<T> conv_transpose(const Tensor<T>& input, const Tensor<T>& weight, const Window& window,
                         const std::string& channels = "channels") {
  return detail::convolve("conv_transpose", input, weight, window, channels, /*transposed=*/true);
}

}  // namespace meshtensor
