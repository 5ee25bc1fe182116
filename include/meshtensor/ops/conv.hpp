#pragma once
// Convolution and transposed convolution over named spatial dims, on any layout. A split spatial
// dim gets its halo from the neighbours (ops/halo.hpp); a split batch dim needs nothing; a split
// input-channel dim leaves partial sums, reduce-scattered over the output channels (which the
// output then splits over the same mesh axis) or, where those are split already, all-reduced; a
// split output-channel dim splits the output. The gradients follow the same rules backwards: the
// input's by the reverse exchange-add of the halo, the weight's by an all-reduce over the axes that
// split batch and space.
//
// The weight has one kernel dim per spatial dim, named "k" + the spatial dim's name (kx, ky, kz),
// the input-channel dim (named as in the input) and one output-channel dim, which takes the input
// channel dim's place in the output.

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/kernels/conv.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/ops/detail/conv_boxes.hpp"
#include "meshtensor/ops/detail/conv_rows.hpp"
#include "meshtensor/ops/detail/partial_sums.hpp"
#include "meshtensor/ops/detail/saved_box.hpp"
#include "meshtensor/ops/detail/windowed.hpp"
#include "meshtensor/ops/resample.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

inline std::string kernel_dim(const std::string& spatial) { return "k" + spatial; }

// Where the rows of a box split along its first kernel dim lie: the own block's rows
// [own_lo, own_hi) of the box, the halo pieces' rows around them.
struct RowsOfBox {
  RowsOfBox(const WindowedPlan& plan, std::size_t split_dim)
      : dim(split_dim),
        box_begin(plan.halo.inside().ranges[split_dim].begin),
        own_lo(plan.halo.own().ranges[split_dim].begin - box_begin),
        own_hi(plan.halo.own().ranges[split_dim].end - box_begin) {}

  // The box's rows with only the own block's (at `own`, or `map` of it) known yet.
  template <class T>
  BoxRows<T> own(const kernels::ConvGeometry& g, const T* own_data,
                 const kernels::ChannelAffine* map = nullptr) const {
    BoxRows<T> rows(kernels::input_row_size(g), g.c_in);
    rows.add(own_lo, own_hi - own_lo, own_data, map);
    return rows;
  }
  template <class T>
  void add_halo(BoxRows<T>& rows, const HaloPieces<T>& halo) const {
    for (const auto& [block, data] : halo)
      rows.add(first_row(block), block.ranges[dim].size(), data.data());
  }
  std::int64_t first_row(const Block& piece) const { return piece.ranges[dim].begin - box_begin; }

  std::size_t dim;
  std::int64_t box_begin, own_lo, own_hi;
};

// The dims of a convolution: the weight's kernel dims (one per spatial dim), its output-channel
// dim, each spatial dim's window and the output's dims. Throws naming the dim that does not fit.
struct ConvDims {
  std::vector<std::string> kernel_names;
  Dim out_channels;
  std::vector<WindowDim> windows;
  std::vector<Dim> output_dims;
};

inline void check_channels(const std::string& op, const Shape& in_shape, const Shape& w_shape,
                           const std::string& channels) {
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
}

// The weight's kernel dims, one per spatial dim, and its one output-channel dim.
inline void find_weight_dims(const std::string& op, const Shape& in_shape, const Shape& w_shape,
                             const std::vector<std::string>& spatial, const std::string& channels,
                             ConvDims& dims) {
  for (const auto& s : spatial) {
    if (!in_shape.contains(s))
      throw ShapeError(op + ": spatial dim " + quote(s) + " is not a dim of the input " +
                       in_shape.to_string());
    dims.kernel_names.push_back(kernel_dim(s));
    if (!w_shape.contains(dims.kernel_names.back()))
      throw ShapeError(op + ": the weight " + w_shape.to_string() + " has no kernel dim " +
                       quote(dims.kernel_names.back()) + " for spatial dim " + quote(s));
  }
  std::vector<Dim> others;
  for (const auto& dim : w_shape)
    if (dim.name != channels && std::find(dims.kernel_names.begin(), dims.kernel_names.end(),
                                          dim.name) == dims.kernel_names.end())
      others.push_back(dim);
  if (others.size() != 1)
    throw ShapeError(op + ": the weight " + w_shape.to_string() +
                     " needs exactly one output-channel dim besides the kernel dims and " +
                     quote(channels));
  dims.out_channels = others[0];
  if (dims.out_channels.name != channels && in_shape.contains(dims.out_channels.name))
    throw ShapeError(op + ": the weight's output-channel dim " + quote(dims.out_channels.name) +
                     " is already a dim of the input " + in_shape.to_string());
}

inline ConvDims conv_dims(const std::string& op, const Shape& in_shape, const Shape& w_shape,
                          const Window& window, const std::string& channels, bool transposed) {
  check_channels(op, in_shape, w_shape, channels);
  ConvDims dims;
  const auto& spatial = window.spatial();
  find_weight_dims(op, in_shape, w_shape, spatial, channels, dims);
  for (const auto& dim : in_shape) {
    auto s = std::find(spatial.begin(), spatial.end(), dim.name);
    if (dim.name == channels || s == spatial.end()) {
      dims.output_dims.push_back(dim.name == channels ? dims.out_channels : dim);
      continue;
    }
    const std::size_t i = s - spatial.begin();
    dims.windows.push_back(
        window.resolve(op, i, dim.size, w_shape.dim(dims.kernel_names[i]).size, transposed));
    const auto n = transposed ? dims.windows.back().transposed_output(dim.size)
                              : dims.windows.back().conv_output(dim.size);
    if (n < 1)
      throw ShapeError(op + ": along dim " + quote(dim.name) + " the output would be empty");
    dims.output_dims.push_back(dim.resized(n));
  }
  return dims;
}

// One layout for both operands: their common one, kernel dims never split.
inline Layout conv_layout(const TensorLayout& input, const TensorLayout& weight,
                          const std::vector<std::string>& kernel_names) {
  std::vector<LayoutRule> rules;
  for (const auto& rule : common_layout({&input, &weight}).rules())
    if (std::find(kernel_names.begin(), kernel_names.end(), rule.dim) == kernel_names.end())
      rules.push_back(rule);
  return Layout(rules);
}

// What forward and backward of one convolution share: the plan, the kernels' geometry, the weight
// in kernel order and how the box reaches the kernels.
template <class T>
struct ConvCall {
  explicit ConvCall(WindowedPlan windowed) : plan(std::move(windowed)) {}

  WindowedPlan plan;
  kernels::ConvGeometry geometry;
  Array<T> w_kernel;  // kernel dims in window order, then input and output channels
  std::vector<std::size_t> w_order;
  std::size_t first_spatial = 0;
  bool by_rows = false;
  bool by_boxes = false;
  bool by_slabs = false;
};

// Whether the box is exactly the own block and halo pieces around it, one volume, in kernel order,
// with halo to exchange: then forward takes the halo as pieces and reads the box in slabs
// (for_each_box_slab), never holding it whole beside the block.
inline bool box_in_pieces(const WindowedPlan& p) {
  return p.form == HaloForm::inside && !p.halo.local_only() && !p.empty() &&
         kernels::is_identity(p.to_kernel_order) && p.pass_size == 1 &&
         p.halo.inside_work() == p.halo.inside();
}

// How a call's forward reaches its box, once its plan and geometry are set: by rows where the box
// is a stack of rows along one split dim (the kernels read the own block in place and the halo
// rows kept apart, conv_rows.hpp), else by boxes where it overlaps (conv_boxes.hpp), else in
// slabs or on a box exchanged first.
template <class T>
void choose_strategy(ConvCall<T>& c, std::size_t first_spatial) {
  c.first_spatial = first_spatial;
  c.by_rows = c.plan.form == HaloForm::pieces;
  c.by_boxes = halo_overlap() && overlaps_by_boxes(c.plan, c.geometry, first_spatial);
  c.by_slabs = box_in_pieces(c.plan);
}

// Runs fn(first_output_row, slab, box_rows) over the output rows along the first kernel dim in
// slabs — one per MiB of box, up to eight — each with the box rows it reads copied together from
// the own block (`own`) and the halo pieces of `saved` (nullptr where it reads only padding).
template <class T, class F>
void for_each_box_slab(const kernels::ConvGeometry& g, const SavedBox<T>& saved, std::size_t dim,
                       const T* own, F&& fn) {
  Block part = saved.box();
  const std::int64_t box_begin = part.ranges[dim].begin;
  const std::int64_t box_bytes = part.num_elements() * std::int64_t(sizeof(T));
  const std::int64_t slabs = std::clamp<std::int64_t>(box_bytes >> 20, 1, 8);
  const std::int64_t per_slab = kernels::ceil_div(g.out[0], slabs);
  Buffer<T> rows;
  for (std::int64_t a = 0; a < g.out[0]; a += per_slab) {
    const kernels::RowSlab slab = kernels::output_rows(g, a, std::min(g.out[0], a + per_slab));
    if (slab.r0 >= slab.r1) {
      fn(a, slab, static_cast<const T*>(nullptr));
      continue;
    }
    part.ranges[dim] = {box_begin + slab.r0, box_begin + slab.r1};
    if (rows.size() < std::size_t(part.num_elements())) rows.resize(part.num_elements());
    saved.copy_part(part, own, rows.data());
    fn(a, slab, static_cast<const T*>(rows.data()));
  }
}

// The weight in kernel order and in the activations' type T (a bfloat16 convolution computes with
// its fp32 weight rounded once per call).
template <class T, class W>
Array<T> weight_in_kernel_order(const Array<W>& w, const std::vector<std::size_t>& order) {
  if constexpr (std::is_same_v<T, W>) {
    return to_kernel_order(w, order);
  } else {
    Array<T> rounded = Array<T>::from_shape(w.shape());
    kernels::convert_values(w.data(), std::int64_t(w.size()), rounded.data());
    return to_kernel_order(std::move(rounded), order);
  }
}

// The call for an input laid out as `input` on `mesh` (aligned to `layout`, as the weight `w`).
template <class T, class W>
ConvCall<T> conv_call(Mesh& mesh, const TensorLayout& input, const Tensor<W>& w,
                      const Window& window, const std::string& channels, const ConvDims& dims,
                      const Layout& layout, bool transposed) {
  const Shape& in_shape = input.shape();
  const Shape& w_shape = w.shape();
  const auto& spatial = window.spatial();
  // Convolutions leave the zero padding to the kernels (no padded copy of the block) and overlap
  // the halo with the outputs that need none — by rows or by boxes — unless halo_overlap() is off.
  const HaloForm form = transposed       ? HaloForm::padded
                        : halo_overlap() ? HaloForm::pieces
                                         : HaloForm::inside;
  ConvCall<T> c(plan_windowed(input, Shape(dims.output_dims), layout, spatial, channels,
                              dims.windows, transposed, mesh.coord(), form));
  for (const auto& k : dims.kernel_names) c.w_order.push_back(w_shape.position(k));
  c.w_order.push_back(w_shape.position(channels));
  c.w_order.push_back(w_shape.position(dims.out_channels.name));
  c.w_kernel = weight_in_kernel_order<T>(w.array(), c.w_order);
  kernels::ConvGeometry& g = c.geometry;
  g.batch = c.plan.pass_size;
  g.c_in = input.block(mesh.coord()).ranges[in_shape.position(channels)].size();
  g.c_out = w.block().ranges[w_shape.position(dims.out_channels.name)].size();
  g.in = c.plan.in;
  g.out = c.plan.out;
  g.kernel = c.plan.kernel;
  g.taps = c.plan.taps;
  choose_strategy(c, in_shape.position(spatial[0]));
  return c;
}

// Forward in slabs: the halo arrives as pieces (every split dim exchanged, no box), and each slab
// of output rows reads the box rows it needs, copied together. Backward keeps the pieces.
template <class T>
SavedBox<T> conv_forward_by_slabs(const ConvCall<T>& c, const Tensor<T>& x, Array<T>& out,
                                  EarlyHalo<T>* early) {
  Mesh& mesh = x.mesh();
  SavedBox<T> saved = SavedBox<T>::own_and_halo(
      x, c.plan.halo.inside(),
      finish_pieces(c.plan, mesh, begin_pieces(c.plan, mesh, x.array(), early)));
  const std::int64_t row_size = kernels::output_row_size(c.geometry);
  for_each_box_slab(c.geometry, saved, c.first_spatial, x.array().data(),
                    [&](std::int64_t a, const kernels::RowSlab& slab, const T* rows) {
                      T* to = out.data() + a * row_size;
                      if (!rows)
                        kernels::fill_values(to, slab.geometry.out[0] * row_size, T(0));
                      else
                        kernels::conv_forward(slab.geometry, rows, c.w_kernel.data(), to);
                    });
  return saved;
}

// Forward by rows: the own rows' outputs while the halo travels, then the rows along the cuts.
template <class T>
SavedBox<T> conv_forward_by_rows(const ConvCall<T>& c, const Tensor<T>& x, Array<T>& out,
                                 EarlyHalo<T>* early) {
  const RowsOfBox rows_of(c.plan, c.first_spatial);
  BoxRows<T> rows = rows_of.own(c.geometry, x.array().data());
  const auto [lo, hi] = interior_rows(c.geometry, rows_of.own_lo, rows_of.own_hi);
  auto halo = windowed_overlapped(
      c.plan, x.mesh(), x.array(),
      [&](auto&& progress) {
        // In parts, the messages advancing between them.
        for_each_row_part(lo, hi, [&](std::int64_t a, std::int64_t b) {
          conv_rows(c.geometry, rows, c.w_kernel.data(), out.data(), a, b);
          progress();
        });
      },
      [&](const HaloPieces<T>& pieces) {
        rows_of.add_halo(rows, pieces);
        conv_rows(c.geometry, rows, c.w_kernel.data(), out.data(), 0, lo);
        conv_rows(c.geometry, rows, c.w_kernel.data(), out.data(), hi, c.geometry.out[0]);
      },
      early);
  return SavedBox<T>::own_and_halo(x, c.plan.halo.inside(), std::move(halo));
}

// The box inside the tensor, in kernel order, from the own block and the halo's pieces.
template <class T>
Array<T> box_from_pieces(const WindowedPlan& p, const Array<T>& own, const HaloPieces<T>& pieces) {
  const Block& inside = p.halo.inside();
  Array<T> box = Array<T>::from_shape(HaloPlan::sizes_of(inside));
  gather_part(inside, box.data(), p.halo.own(), own.data(), pieces);
  return to_kernel_order(std::move(box), p.to_kernel_order);
}

// The box the kernels read (the block itself where `in_place`): exchanged now, or built from the
// pieces of an exchange begun early.
template <class T>
Array<T> box_of(const WindowedPlan& p, const Tensor<T>& x, bool in_place, EarlyHalo<T>* early) {
  if (!early) return in_place ? empty_array<T>() : windowed_box(p, x.mesh(), x.array(), T(0));
  if (!p.clipped())
    throw Error("internal: a convolution's halo was begun early, but it reads a padded box");
  const HaloPieces<T> pieces =
      finish_pieces(p, x.mesh(), begin_pieces(p, x.mesh(), x.array(), early));
  return in_place ? empty_array<T>() : box_from_pieces(p, x.array(), pieces);
}

// Forward on a box: the block in place where it needs no halo and no permutation, else the
// exchanged box in kernel order. Returns what backward keeps; `box_sizes` the box's shape.
template <class T>
SavedBox<T> conv_forward_on_box(const ConvCall<T>& c, const Tensor<T>& x, Array<T>& out,
                                std::vector<std::size_t>& box_sizes, EarlyHalo<T>* early) {
  const WindowedPlan& p = c.plan;
  const bool identity = kernels::is_identity(p.to_kernel_order);
  const bool in_place = p.reads_block_in_place();
  Array<T> box = box_of(p, x, in_place, early);
  if (in_place)
    box_sizes = to_xshape(x.block().sizes());
  else
    box_sizes.assign(box.shape().begin(), box.shape().end());
  if (!p.empty()) {
    if (in_place && x.unwritten() && x.mapped_recipe()) {
      // The block, never written out, as the affine map of the block it is computed from.
      kernels::ChannelParts<const T> input;
      x.mapped_recipe()->add_to(input);
      kernels::conv_forward(c.geometry, input, c.w_kernel.data(), out.data());
    } else {
      const T* box_data = in_place ? x.array().data() : box.data();
      kernels::conv_forward(c.geometry, box_data, c.w_kernel.data(), out.data());
    }
  }
  // Backward keeps the input block and the halo, not a second copy of the block (nor the box of
  // a transposed convolution that needs neither halo nor padding: that box is the block).
  if (p.halo.local_only() && identity && box_sizes == to_xshape(x.block().sizes()))
    return SavedBox<T>::own_block(x);
  if (p.clipped() && identity && p.halo.inside_work() == p.halo.inside())
    return SavedBox<T>::halo_only(x, box, p.halo.inside());
  return SavedBox<T>::whole(std::move(box));
}

// The weight's gradient accumulates in double, in the processor's memory (its device's, where
// it computes on one), and is rounded to W there, before the all-reduce over `axes` (those that
// split what it sums over); it leaves in the weight's layout.
template <class T>
Buffer<double> zero_weight_accumulator(const Array<T>& w_kernel) {
  Buffer<double> acc(w_kernel.size());
  kernels::fill_values(acc.data(), std::int64_t(acc.size()), 0.0);
  return acc;
}
template <class W, class Sizes>
Tensor<W> weight_gradient_of(Mesh& mesh, const Buffer<double>& acc, const Sizes& kernel_sizes,
                             const std::vector<std::size_t>& w_order, AxisSet axes,
                             const TensorLayout& aligned_weight,
                             const TensorLayout& weight_layout) {
  Array<W> dw = Array<W>::from_shape(kernel_sizes);
  kernels::narrow(acc.data(), dw.data(), std::int64_t(acc.size()));
  complete_partial_sums(mesh, axes, dw);
  return relayout_to(Tensor<W>(mesh, aligned_weight, from_kernel_order(std::move(dw), w_order)),
                     weight_layout);
}

// A convolution's forward into `out` (in kernel order) by the call's strategy. Returns what
// backward keeps; `box_sizes` the box's shape. `early`: the halo in the pieces form, begun
// already (on every processor, whichever strategy each takes).
template <class T>
SavedBox<T> conv_forward(const ConvCall<T>& call, const Tensor<T>& x, Array<T>& out,
                         std::vector<std::size_t>& box_sizes, EarlyHalo<T>* early = nullptr) {
  if (call.by_rows) return conv_forward_by_rows(call, x, out, early);
  if (!call.by_boxes && !call.by_slabs) return conv_forward_on_box(call, x, out, box_sizes, early);
  // Both keep the box as the input block and the halo pieces.
  const auto sizes = call.plan.halo.inside().sizes();
  box_sizes.assign(sizes.begin(), sizes.end());
  return call.by_boxes ? conv_forward_by_boxes(call.plan, call.geometry, call.first_spatial,
                                               call.w_kernel.data(), x, out, early)
                       : conv_forward_by_slabs(call, x, out, early);
}

// A convolution's backward: the input's gradient by the kernels' input pass and the adjoint halo
// exchange, the weight's by their weight pass and an all-reduce over the axes that split batch and
// space — in the weight's type W (fp32 for a bfloat16 convolution's master weight).
template <class T, class W>
struct ConvBackward {
  using Grads = std::tuple<Tensor<T>, Tensor<W>>;

  ConvCall<T> call;
  SavedBox<T> saved;
  std::vector<std::size_t> box_sizes;
  std::vector<std::string> summed;  // dims a weight gradient sums over: all but the channels
  Dim out_channels;
  TensorLayout input_layout, weight_layout, aligned_weight;

  Grads operator()(const Tensor<T>& g, const std::array<bool, 2>& need) const {
    const Tensor<T> g_aligned = relayout_to(g, call.plan.output_layout);
    const KernelOrderView<T> g_kernel(g_aligned.array(), call.plan.to_kernel_order);
    return gradients(g.mesh(), g_kernel.data(), need);
  }

  /// The gradients from the output's, `g`: over the geometry's output, in kernel order.
  Grads gradients(Mesh& mesh, const T* g, const std::array<bool, 2>& need) const {
    Grads grads;
    if (call.by_rows)
      by_rows(mesh, g, need, grads);
    else
      on_box(mesh, g, need, grads);
    return grads;
  }

 private:
  Buffer<double> zero_accumulator() const { return zero_weight_accumulator(call.w_kernel); }
  Tensor<W> weight_gradient_from(Mesh& mesh, const Buffer<double>& acc) const {
    return weight_gradient_of<W>(mesh, acc, call.w_kernel.shape(), call.w_order,
                                 axes_splitting(call.plan.input_layout, summed), aligned_weight,
                                 weight_layout);
  }
  Tensor<T> input_gradient_from(Mesh& mesh, Array<T>&& own) const {
    complete_partial_sums(mesh, axes_splitting(call.plan.output_layout, {out_channels.name}), own);
    return relayout_to(Tensor<T>(mesh, call.plan.input_layout, std::move(own)), input_layout);
  }

  // The halo rows' gradient goes back to their owners first and travels while the weight's
  // gradient and the own rows' are computed — each from the own block in place, so that backward
  // holds no box-sized copy.
  void by_rows(Mesh& mesh, const T* g, const std::array<bool, 2>& need, Grads& grads) const {
    const RowsOfBox rows_of(call.plan, call.first_spatial);
    if (!need[0]) {
      if (need[1]) std::get<1>(grads) = weight_gradient_by_rows(mesh, rows_of, g);
      return;
    }
    Array<T> own =
        windowed_overlapped_gradient(call.plan, mesh, halo_rows_gradient(rows_of, g), [&] {
          if (need[1]) std::get<1>(grads) = weight_gradient_by_rows(mesh, rows_of, g);
          Array<T> own_rows = Array<T>::from_shape(to_xshape(call.plan.halo.own().sizes()));
          input_rows(call.geometry, g, call.w_kernel.data(), own_rows.data(), rows_of.own_lo,
                     rows_of.own_hi);
          return own_rows;
        });
    std::get<0>(grads) = input_gradient_from(mesh, std::move(own));
  }

  // The gradient of each halo piece the forward read, to go back to its owner.
  HaloPieces<T> halo_rows_gradient(const RowsOfBox& rows_of, const T* g) const {
    HaloPieces<T> halo_gradient;
    for (const auto& [block, data] : saved.halo()) {
      Buffer<T> piece(data.size());
      const std::int64_t first = rows_of.first_row(block);
      input_rows(call.geometry, g, call.w_kernel.data(), piece.data(), first,
                 first + block.ranges[call.first_spatial].size());
      halo_gradient.emplace_back(block, std::move(piece));
    }
    return halo_gradient;
  }

  Tensor<W> weight_gradient_by_rows(Mesh& mesh, const RowsOfBox& rows_of, const T* g) const {
    const kernels::ConvGeometry& geometry = call.geometry;
    Buffer<double> acc = zero_accumulator();
    // The input block where backward keeps its recipe: its map, which the kernels compute as
    // they read (else recomputed here, with mapped inputs off).
    Array<T> recomputed = empty_array<T>();
    const auto [own, map] = saved.own().read_as(kernels::mapped_inputs_enabled(), recomputed);
    BoxRows<T> rows = rows_of.own(geometry, own, map);
    rows_of.add_halo(rows, saved.halo());
    const auto [lo, hi] = interior_rows(geometry, rows_of.own_lo, rows_of.own_hi);
    weight_rows(geometry, rows, g, acc.data(), lo, hi);
    weight_rows(geometry, rows, g, acc.data(), 0, lo);
    weight_rows(geometry, rows, g, acc.data(), hi, geometry.out[0]);
    return weight_gradient_from(mesh, acc);
  }

  // progress() lets a halo exchange in flight advance between the slabs.
  template <class Progress>
  Tensor<W> weight_gradient(Mesh& mesh, const T* g, Progress&& progress) const {
    Buffer<double> acc = zero_accumulator();
    if (call.plan.empty()) return weight_gradient_from(mesh, acc);
    if (saved.in_pieces() && call.plan.pass_size == 1) {
      weight_gradient_by_slabs(g, acc.data(), progress);
    } else if (saved.halo().empty() && saved.own().defined()) {  // the box is the input block
      kernels::ChannelParts<const T> block;
      Array<T> recomputed = empty_array<T>();  // where the kernels do not compute it as they read
      saved.own().add_to(
          block,
          kernels::takes_mapped_input<T>(call.geometry, kernels::plan::ConvClass::backward_weight),
          recomputed);
      kernels::conv_backward_weight(call.geometry, block, g, acc.data());
    } else {
      Array<T> rebuilt = empty_array<T>();
      kernels::conv_backward_weight(call.geometry, saved.data(rebuilt), g, acc.data());
    }
    return weight_gradient_from(mesh, acc);
  }

  // A box kept as the input block and its halo (a split along several dims) is read a slab of
  // rows at a time, never rebuilt whole.
  template <class Progress>
  void weight_gradient_by_slabs(const T* g, double* acc, Progress& progress) const {
    Array<T> recomputed = empty_array<T>();  // the input block, where backward keeps its recipe
    for_each_box_slab(call.geometry, saved, call.first_spatial, saved.own().data(recomputed),
                      [&](std::int64_t a, const kernels::RowSlab& slab, const T* rows) {
                        if (rows)  // else its outputs read only padding
                          kernels::conv_backward_weight(
                              slab.geometry, rows, g + a * kernels::output_row_size(call.geometry),
                              acc);
                        progress();
                      });
  }

  // The input's gradient goes back through the halo while the weight's is computed — first, where
  // no halo travels (windowed_input_gradient) or where backward recomputes the input block: that
  // block and the box's gradient are not held at once (memory before overlap).
  void on_box(Mesh& mesh, const T* g, std::array<bool, 2> need, Grads& grads) const {
    if (need[1] && (!need[0] || saved.own().recomputed())) {
      std::get<1>(grads) = weight_gradient(mesh, g, [] {});
      need[1] = false;
    }
    if (!need[0]) return;
    Array<T> own = windowed_input_gradient<T>(
        call.plan, mesh, box_sizes,
        [&](T* grad_box) {
          kernels::conv_backward_input(call.geometry, g, call.w_kernel.data(), grad_box);
        },
        [&](auto&& progress) {
          if (need[1]) std::get<1>(grads) = weight_gradient(mesh, g, progress);
        });
    std::get<0>(grads) = input_gradient_from(mesh, std::move(own));
  }
};

// The output from each processor's partial sums over its input channels: reduce-scattered over
// the output channels where they can take the input channels' mesh axis (backward gathers the
// gradient back: ConvBackward aligns it to the unsplit output), else all-reduced.
template <class T>
Tensor<T> complete_output(Mesh& mesh, const TensorLayout& input, const std::string& channels,
                          const TensorLayout& output, const std::string& out_channels,
                          Array<T>&& partial) {
  if (const auto scattered = scattered_layout(input, channels, output, out_channels))
    return Tensor<T>(mesh, *scattered,
                     reduce_scatter_along(mesh, partial, *scattered, out_channels));
  complete_partial_sums(mesh, axes_splitting(input, {channels}), partial);
  return Tensor<T>(mesh, output, std::move(partial));
}

// A convolution's dims, its operands' common layout, the weight aligned to it and the call: all
// that the input's layout and shape decide, before its values exist (ops/norm_conv.hpp begins the
// exchange of a tensor laid out as the input).
template <class T, class W>
struct ConvSetup {
  ConvDims dims;
  Layout layout;
  Tensor<W> weight;  // aligned to `layout`
  ConvCall<T> call;
};

// The same for an input laid out as `input` on `mesh` (one not written out: a concatenation read as
// its parts, ops/conv_concat.hpp).
template <class T, class W>
ConvSetup<T, W> conv_setup(const std::string& op, Mesh& mesh, const TensorLayout& input,
                           const Tensor<W>& weight, const Window& window,
                           const std::string& channels, bool transposed) {
  static_assert(std::is_same_v<T, W> || (std::is_same_v<T, bfloat16> && std::is_same_v<W, float>),
                "a convolution's weight has its input's element type, or fp32 for bfloat16 input");
  if (&mesh != &weight.mesh())
    throw LayoutError(op + ": operands " + input.to_string() + " and " + weight.to_string() +
                      " live on different meshes");
  if (window.padding_mode() != PadMode::zeros)
    throw Error("internal: " + op + " set up with " + to_string(window.padding_mode()) +
                " padding; such windows pad the input first (convolve_padded)");
  ConvDims dims = conv_dims(op, input.shape(), weight.shape(), window, channels, transposed);
  Layout layout = conv_layout(input, weight.layout(), dims.kernel_names);
  auto w = relayout_to(weight, weight.layout().with_layout(layout));
  ConvCall<T> call =
      conv_call<T>(mesh, input.with_layout(layout), w, window, channels, dims, layout, transposed);
  return {std::move(dims), std::move(layout), std::move(w), std::move(call)};
}

template <class T, class W>
ConvSetup<T, W> conv_setup(const std::string& op, const Tensor<T>& input, const Tensor<W>& weight,
                           const Window& window, const std::string& channels, bool transposed) {
  if (&input.mesh() != &weight.mesh())
    throw LayoutError(op + ": operands " + input.to_string() + " and " + weight.to_string() +
                      " live on different meshes");
  return conv_setup<T>(op, input.mesh(), input.layout(), weight, window, channels, transposed);
}

// The convolution of `input` set up by `setup` (from an input of its layout and shape), its
// backward recorded; `early`: its halo, begun already.
template <class T, class W>
Tensor<T> convolve(ConvSetup<T, W>&& setup, const Tensor<T>& input, const Tensor<W>& weight,
                   const std::string& channels, EarlyHalo<T>* early = nullptr) {
  Mesh& mesh = input.mesh();
  ConvCall<T>& call = setup.call;
  const auto x = relayout_to(input, input.layout().with_layout(setup.layout));
  Array<T> out = windowed_output<T>(call.plan);
  std::vector<std::size_t> box_sizes;
  SavedBox<T> saved = conv_forward(call, x, out, box_sizes, early);
  out = from_kernel_order(std::move(out), call.plan.to_kernel_order);
  Tensor<T> result = complete_output(mesh, x.layout(), channels, call.plan.output_layout,
                                     setup.dims.out_channels.name, std::move(out));

  std::vector<std::string> summed;
  for (const auto& dim : input.shape())
    if (dim.name != channels) summed.push_back(dim.name);
  autodiff::record_mixed(
      result, std::make_tuple(input, weight),
      ConvBackward<T, W>{std::move(call), std::move(saved), std::move(box_sizes), std::move(summed),
                         setup.dims.out_channels, input.layout(), weight.layout(),
                         setup.weight.layout()});
  return result;
}

template <class T, class W>
Tensor<T> convolve(const std::string& op, const Tensor<T>& input, const Tensor<W>& weight,
                   const Window& window, const std::string& channels, bool transposed);

// A convolution whose padding holds other than zeros: on its input padded so (ops/resample.hpp),
// unpadded; transposed, the adjoint of a circular one: unpadded, the outputs past each edge added
// at the far end.
template <class T, class W>
Tensor<T> convolve_padded(const std::string& op, const Tensor<T>& input, const Tensor<W>& weight,
                          const Window& window, const std::string& channels, bool transposed) {
  const ConvDims dims = conv_dims(op, input.shape(), weight.shape(), window, channels, transposed);
  if (!transposed)
    return convolve(op, padded_for_window(op, input, window, dims.windows), weight,
                    window.unpadded(), channels, false);
  if (window.padding_mode() != PadMode::circular)
    throw Error(op + ": padding mode " + quote(to_string(window.padding_mode())) +
                " has no transposed form; use \"zeros\" or \"circular\"");
  Tensor<T> out = convolve(op, input, weight, window.unpadded(), channels, true);
  for_each_window_dim(input.shape(), window, dims.windows,
                      [&](const std::string& dim, const WindowDim& w) {
                        out = fold_periodic(op, out, dim, w.pad_before, w.pad_after);
                      });
  return out;
}

template <class T, class W>
Tensor<T> convolve(const std::string& op, const Tensor<T>& input, const Tensor<W>& weight,
                   const Window& window, const std::string& channels, bool transposed) {
  if (window.padding_mode() != PadMode::zeros)
    return convolve_padded(op, input, weight, window, channels, transposed);
  return convolve(conv_setup(op, input, weight, window, channels, transposed), input, weight,
                  channels);
}

}  // namespace detail

/**
 * Convolution of `input` with `weight` over the window's spatial dims, on any layout. A bfloat16
 * input takes a bfloat16 weight or an fp32 one (a master weight: rounded for the call, its
 * gradient summed in fp32). The padding holds zeros unless the window's padding_mode says
 * otherwise: reflect, replicate or circular (a periodic domain) pad the input first, as PyTorch.
 *
 * ```cpp
 * // input [batch, x, y, z, channels=8], weight [kx=3, ky=3, kz=3, channels=8, features=16]
 * auto y = conv(input, weight, Window("x, y, z").padding("same"));   // [batch, x, y, z,
 * features=16]
 * ```
 */
template <class T, class W>
Tensor<T> conv(const Tensor<T>& input, const Tensor<W>& weight, const Window& window,
               const std::string& channels = "channels") {
  return detail::convolve("conv", input, weight, window, channels, /*transposed=*/false);
}

/**
 * Transposed convolution (the gradient of a convolution with respect to its input, as a layer):
 * output o receives input i through tap k where o = i*stride - pad_before + k*dilation. With
 * kernel 2, stride 2 and "valid" padding it doubles each spatial size (the U-Net's up-sampling).
 * With a circular padding_mode it is the adjoint of the circular convolution: the outputs past
 * each edge are added at the far end (PyTorch's transposed convolutions take zeros only).
 */
template <class T, class W>
Tensor<T> conv_transpose(const Tensor<T>& input, const Tensor<W>& weight, const Window& window,
                         const std::string& channels = "channels") {
  return detail::convolve("conv_transpose", input, weight, window, channels, /*transposed=*/true);
}

}  // namespace meshtensor
