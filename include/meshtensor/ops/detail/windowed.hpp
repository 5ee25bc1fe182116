#pragma once
// What every windowed op (convolution, transposed convolution, pooling) does the same way: it
// plans the output's shape and layout, the halo each processor needs, and the order that brings a
// block into the kernels' layout — pass-through dims, then the spatial dims in window order, then
// the inner dim (channels) last; then it exchanges the box the kernels read, runs its kernels on
// it, and on the way back sends the box's gradient to the owners. The op chooses the strategy, as
// the exchange's HaloForm (ops/halo.hpp): the padded box, or the box inside the tensor (kernels
// reading zeros beyond it), exchanged before the kernels (windowed_box) — or overlapped: the
// kernels run on the own block while the halo travels and on the rows along the cuts after
// (windowed_overlapped), where the box is a stack of rows along one split dim (a convolution
// split otherwise overlaps by boxes: ops/detail/conv_boxes.hpp). Backward, the
// box's gradient travels while the op computes what needs none (windowed_input_gradient,
// windowed_overlapped_gradient).

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/core/window.hpp"
#include "meshtensor/kernels/common/conv_geometry.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
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
  HaloForm form = HaloForm::padded;  // the strategy: how the box reaches the kernels

  // Whether the box the kernels read stops at the tensor's edges.
  bool clipped() const { return form != HaloForm::padded; }

  // Whether the kernels can read the input block itself: nothing exchanged, in their dim order,
  // and no padding in the box (a clipped box holds none; a padded one none where it is the block).
  bool reads_block_in_place() const {
    return halo.local_only() && kernels::is_identity(to_kernel_order) &&
           (clipped() || halo.box() == halo.own());
  }

  bool empty() const { return output_block.empty(); }
};

// `input` is already on the op's layout; `output_shape` is the input's shape with the spatial dims
// resized (and the inner dim possibly renamed/resized); `windows[i]` is spatial dim i's window.
// `form` is the strategy the op asks for: with HaloForm::padded the box includes the padding;
// else it stops at the tensor's edges (the halo exchange's inside()) and the kernels read the zero
// padding beyond it implicitly. HaloForm::pieces (overlap) becomes HaloForm::inside where the box
// is not a stack of rows along one split dim (rows_of_one_split()).
// Whether the kernels' box is a stack of rows along the first spatial dim, the only one split,
// and halo rows arrive: then the kernels can read the own block in place and the halo rows kept
// apart, computing the rows that need no halo while those travel.
inline bool rows_of_one_split(const WindowedPlan& p, std::size_t first_spatial) {
  return !p.halo.local_only() && !p.empty() && kernels::is_identity(p.to_kernel_order) &&
         p.pass_size == 1 && p.halo.exchanged() == std::vector<std::size_t>{first_spatial} &&
         p.halo.inside_work() == p.halo.inside();
}

inline WindowedPlan plan_windowed(const TensorLayout& input, const Shape& output_shape,
                                  const Layout& layout, const std::vector<std::string>& spatial,
                                  const std::string& inner, const std::vector<WindowDim>& windows,
                                  bool transposed, const MeshCoord& me,
                                  HaloForm form = HaloForm::padded) {
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

  plan.form = form;
  if (form == HaloForm::pieces && !rows_of_one_split(plan, shape.position(spatial[0])))
    plan.form = HaloForm::inside;
  const Block& need = plan.halo.box();
  const Block box = plan.clipped() ? plan.halo.inside() : need;
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
// `pad` outside the tensor, or (HaloForm::inside) stopping at the tensor's edges.
template <class T>
Array<T> windowed_box(const WindowedPlan& plan, Mesh& mesh, const Array<T>& own, T pad) {
  return to_kernel_order(plan.halo.exchange(mesh, plan.form, own, pad).array, plan.to_kernel_order);
}

// A pieces-form exchange begun before the op that reads it, on values that only become the op's
// input where they arrive: a normalisation's output sent raw, before its statistics are agreed
// (ops/norm_conv.hpp), so that no neighbour waits for the all-gather to let it go. It may travel
// on another plan than the op's (rows before a pooling); finish() hands over the op's pieces.
template <class T>
struct EarlyHalo {
  std::function<void()> progress;         // lets its messages advance
  std::function<HaloPieces<T>()> finish;  // waits; the op's halo, over its plan's pieces' boxes
};

// The op's exchange in flight: the early one where the caller began it, else its own.
template <class T>
struct PiecesInFlight {
  HaloExchange::Pending<T> pending;
  EarlyHalo<T>* early = nullptr;
  void progress() { early ? early->progress() : pending.progress(); }
};

template <class T>
PiecesInFlight<T> begin_pieces(const WindowedPlan& plan, Mesh& mesh, const Array<T>& own,
                               EarlyHalo<T>* early) {
  if (early) return {{}, early};
  return {plan.halo.begin(mesh, HaloForm::pieces, own), nullptr};
}
template <class T>
HaloPieces<T> finish_pieces(const WindowedPlan& plan, Mesh& mesh, PiecesInFlight<T>&& in_flight) {
  if (in_flight.early) return in_flight.early->finish();
  return plan.halo.finish(mesh, std::move(in_flight.pending)).pieces;
}

// The overlapped strategy (HaloForm::pieces): interior(progress) computes what needs no halo while
// the halo travels, calling progress() between its parts (MPI moves a large message only inside
// its calls); edges(halo) the rest once it is here. Returns the halo's pieces.
template <class T, class Interior, class Edges>
HaloPieces<T> windowed_overlapped(const WindowedPlan& plan, Mesh& mesh, const Array<T>& own,
                                  Interior&& interior, Edges&& edges,
                                  EarlyHalo<T>* early = nullptr) {
  auto pending = begin_pieces(plan, mesh, own, early);
  interior([&] { pending.progress(); });
  HaloPieces<T> halo = finish_pieces(plan, mesh, std::move(pending));
  edges(halo);
  return halo;
}

// Its adjoint: the halo pieces' gradient goes back to their owners while own_gradient() computes
// the own block's (and whatever else needs nothing from them); the gradients others return are
// added to it.
template <class T, class OwnGradient>
Array<T> windowed_overlapped_gradient(const WindowedPlan& plan, Mesh& mesh,
                                      HaloPieces<T>&& halo_gradient, OwnGradient&& own_gradient) {
  auto pending = plan.halo.begin_adjoint(mesh, HaloForm::pieces,
                                         HaloBox<T>{empty_array<T>(), std::move(halo_gradient)});
  Array<T> own = own_gradient();
  return plan.halo.finish(mesh, std::move(pending), std::move(own)).array;
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
// meanwhile(progress) runs while the gradients travel, calling progress() now and then to let the
// exchange's steps advance; where none travel, it runs first, so that what it frees is freed
// before the box's gradient is allocated.
template <class T, class Backward, class Meanwhile>
Array<T> windowed_input_gradient(const WindowedPlan& plan, Mesh& mesh,
                                 const std::vector<std::size_t>& box_sizes, Backward&& backward,
                                 Meanwhile&& meanwhile) {
  const bool travels = !plan.halo.local_only();
  if (!travels) meanwhile([] {});
  Array<T> grad = windowed_box_gradient<T>(plan, box_sizes, std::forward<Backward>(backward));
  auto pending = plan.halo.begin_adjoint(mesh, plan.form, HaloBox<T>{std::move(grad), {}});
  if (travels) meanwhile([&] { pending.progress(); });
  return plan.halo.finish(mesh, std::move(pending)).array;
}
template <class T, class Backward>
Array<T> windowed_input_gradient(const WindowedPlan& plan, Mesh& mesh,
                                 const std::vector<std::size_t>& box_sizes, Backward&& backward) {
  return windowed_input_gradient<T>(plan, mesh, box_sizes, std::forward<Backward>(backward),
                                    [](auto&&) {});
}

}  // namespace meshtensor::detail
