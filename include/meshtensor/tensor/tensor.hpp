#pragma once
// Tensor<T>: a global named shape placed on a mesh, and this processor's block of it. A Tensor is a
// handle: copies share the block (as in PyTorch); clone() copies the data.

#include <algorithm>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/device/host_access.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/common/channel_affine.hpp"
#include "meshtensor/kernels/common/channel_parts.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/elementwise.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor {

template <class T>
class Tensor;

/// Where the gradient of one tensor accumulates during backward. Op outputs get one when an input
/// needs a gradient; `keep` marks leaves and retained tensors, whose gradient survives backward.
template <class T>
struct GradNode {
  Tensor<T> grad;  // empty until backward reaches the tensor
  bool keep = false;

  /// The gradient for the tensor's backward step: moved out where nothing keeps it, so that a
  /// step taking it by value may reuse its block (a relabelling) or free it early.
  Tensor<T> hand_over() { return keep ? grad : std::move(grad); }
};

/// A recipe's structure where the block it computes is a per-channel affine map of another block
/// of the same sizes, channels innermost (batch norm's output with its ReLU): a kernel reading the
/// block can compute it from `of` as it reads, with no copy written out.
template <class T>
struct MappedRecipe {
  Tensor<T> of;
  kernels::ChannelAffine map;

  /// Adds the block to `parts` as the map of `of`, for a kernel that computes it as it reads.
  void add_to(kernels::ChannelParts<const T>& parts) const {
    parts.add(of.array().data(), map.channels(), &map);
  }
};

namespace detail {
inline std::vector<std::size_t> to_xshape(const std::vector<std::int64_t>& sizes) {
  return std::vector<std::size_t>(sizes.begin(), sizes.end());
}
}  // namespace detail

/**
 * A distributed tensor: its global Shape, its TensorLayout on the mesh, and the local block this
 * processor holds (a row-major xtensor array with one axis per dim, in shape order).
 *
 * ```cpp
 * auto t = generate<float>(mesh, "x:8, y:4", "x:rows", [](const Index& i) { return i["x"]; });
 * t.block().ranges[0];   // on rows=1 of rows:2 → [4,8)
 * t.local()(0, 0);       // 4.0f: the global element (4, 0)
 * ```
 */
template <class T>
class Tensor {
 public:
  using value_type = T;
  using array_type = Array<T>;
  /// Writes this processor's block (row-major, its block's sizes) into the pointer it is given.
  using Recipe = std::function<void(T* into)>;

  Tensor() = default;

  /// Wraps a block this processor already holds; its shape must be this processor's block shape.
  Tensor(Mesh& mesh, TensorLayout layout, array_type local) : mesh_(&mesh) {
    check_mesh(mesh, layout);
    Block block = layout.block(mesh.coord());
    const auto expected = detail::to_xshape(block.sizes());
    if (!std::equal(expected.begin(), expected.end(), local.shape().begin(), local.shape().end()))
      throw ShapeError("local block of tensor " + layout.to_string() + " on processor " +
                       std::to_string(mesh.processor()) + " has the wrong shape; expected " +
                       shape_string(expected) + ", got " +
                       shape_string({local.shape().begin(), local.shape().end()}));
    state_ = std::make_shared<State>(State{std::move(layout), std::move(block),
                                           std::make_shared<array_type>(std::move(local)), nullptr,
                                           nullptr});
  }

  /// A tensor whose block is computed by `recipe` when it is first read (array(), local()), not
  /// here: an op whose consumer computes the values itself as it reads them (a convolution
  /// reading a normalisation's output as its `mapped` affine map) never writes the block out.
  static Tensor computed_on_read(Mesh& mesh, TensorLayout layout,
                                 std::shared_ptr<const Recipe> recipe,
                                 std::shared_ptr<const MappedRecipe<T>> mapped = nullptr) {
    check_mesh(mesh, layout);
    Tensor t;
    t.mesh_ = &mesh;
    Block block = layout.block(mesh.coord());
    t.state_ = std::make_shared<State>(State{std::move(layout), std::move(block),
                                             std::make_shared<array_type>(), nullptr, recipe,
                                             std::move(mapped), recipe});
    return t;
  }

  /// A block the host holds (an xtensor container of this processor's block shape), copied into
  /// the processor's memory.
  template <class Container, class = decltype(std::declval<const Container&>().shape()),
            class = std::enable_if_t<!std::is_same_v<Container, array_type>>>
  Tensor(Mesh& mesh, TensorLayout layout, const Container& host_block)
      : Tensor(mesh, std::move(layout), from_host(host_block)) {}

  bool defined() const { return state_ != nullptr; }
  Mesh& mesh() const { return *mesh_; }
  const TensorLayout& layout() const { return state().layout; }
  const Shape& shape() const { return state().layout.shape(); }
  std::size_t rank() const { return shape().rank(); }
  /// The global index ranges of this processor's block.
  const Block& block() const { return state().block; }

  /// This processor's block as the host sees it, once the processor's device has run the work
  /// the ops queued on it: an xtensor array over the block, in shape order, which keeps the block
  /// alive. Writing through it changes the block, so a view for writing drops the block's recipe
  /// (see recipe()). On a GPU the view is a copy: its writes reach the block when the view goes,
  /// or when an op next uses the tensor, whichever comes first (device/host_access.hpp).
  HostView<T> local() {
    state().recipe = nullptr;
    return on_host(written(), state().data);
  }
  HostView<const T> local() const {
    return on_host(static_cast<const array_type&>(written()), state().data);
  }

  /// The block where the processor keeps it, for kernels (no wait: in a GPU's memory the host
  /// reaches it only through local()). Ops writing into it drop the recipe too.
  array_type& array() {
    state().recipe = nullptr;
    return written();
  }
  const array_type& array() const { return written(); }

  /// Whether the block is still to be computed from its recipe, on first read (computed_on_read).
  bool unwritten() const {
    return state().unwritten && state().data->shape() != detail::to_xshape(block().sizes());
  }

  /// Puts `block` (this processor's block sizes) in place of the block, e.g. one read from a file.
  void set_block(array_type&& block) {
    const auto expected = detail::to_xshape(this->block().sizes());
    if (block.shape() != expected)
      throw ShapeError("set_block: tensor " + layout().to_string() + " has the block shape " +
                       shape_string(expected) + " on processor " +
                       std::to_string(mesh().processor()) + ", not " + shape_string(block.shape()));
    state().recipe = nullptr;
    state().unwritten = nullptr;
    send_back_host_writes(state().data->data());  // before the old block goes
    *state().data = std::move(block);
  }

  /// The value of a tensor without dims (a reduction's result); the same on every processor.
  T item() const {
    if (rank() != 0)
      throw ShapeError("item() needs a tensor without dims, but this tensor is " +
                       layout().to_string() + "; reduce it first");
    T value;
    copy_to_host(array().data(), array().space(), 1, &value);
    return value;
  }

  /// Whether this handle is the only way to the block: no copy of the handle, no detached view, no
  /// op that saved it. An op given such a tensor as an rvalue may reuse its block.
  bool sole_owner() const { return state_.use_count() == 1 && state().data.use_count() == 1; }

  /// For ops consuming an rvalue tensor: its block, moved out if this handle is its sole owner
  /// (the tensor is left without data, as a moved-from object), else copied.
  array_type release_local() {
    if (sole_owner()) return std::move(written());
    return kernels::copy_of(written());
  }

  /// A tensor with its own copy of the data (and no gradient history).
  Tensor clone() const { return Tensor(mesh(), layout(), kernels::copy_of(array())); }

  /// The same data (shared, not copied), cut off from gradient history: backward stops here.
  Tensor detach() const {
    Tensor out = *this;
    out.state_ = std::make_shared<State>(State{state().layout, state().block, state().data, nullptr,
                                               state().recipe, state().mapped, state().unwritten});
    return out;
  }

  // --- recomputation ---------------------------------------------------------------------------

  /// How to compute this block again from tensors that backward keeps anyway (a normalisation's
  /// output from its input and statistics), or null. An op that saves this tensor for backward
  /// keeps the recipe instead of the block, so the block is freed as soon as forward is done with
  /// it; the recipe must reproduce the block bit for bit.
  const std::shared_ptr<const Recipe>& recipe() const { return state().recipe; }
  /// For ops: attaches the recipe of an output they computed with that same recipe, and its
  /// structure where it is a per-channel affine map (the same values as the recipe's).
  Tensor& set_recipe(std::shared_ptr<const Recipe> recipe,
                     std::shared_ptr<const MappedRecipe<T>> mapped = nullptr) {
    state().recipe = std::move(recipe);
    state().mapped = std::move(mapped);
    return *this;
  }
  /// The recipe as a per-channel affine map, or null.
  const std::shared_ptr<const MappedRecipe<T>>& mapped_recipe() const { return state().mapped; }

  // --- gradients -------------------------------------------------------------------------------

  bool requires_grad() const { return state().node != nullptr; }

  /// Marks a leaf (a parameter, an input) whose gradient backward() should fill.
  Tensor& set_requires_grad(bool required = true) {
    static_assert(is_floating_v<T>, "only floating-point tensors have gradients");
    if (!required) {
      state().node.reset();
    } else if (!state().node) {
      state().node = std::make_shared<GradNode<T>>();
      state().node->keep = true;
    }
    return *this;
  }

  /// Keeps the gradient of an intermediate tensor after backward, for inspection.
  Tensor& retain_grad() {
    if (!state().node)
      throw Error("retain_grad: tensor " + layout().to_string() +
                  " does not depend on anything that requires a gradient");
    state().node->keep = true;
    return *this;
  }

  /// The accumulated gradient; an empty Tensor if backward has not reached this tensor.
  Tensor grad() const { return state().node ? state().node->grad : Tensor(); }
  void zero_grad() {
    if (state().node) state().node->grad = Tensor();
  }

  /// For ops and autodiff: this tensor's gradient node (null if it needs no gradient).
  const std::shared_ptr<GradNode<T>>& node() const { return state().node; }
  /// For ops: gives an op's output a fresh node, whose gradient is released after backward.
  const std::shared_ptr<GradNode<T>>& make_node() {
    state().node = std::make_shared<GradNode<T>>();
    return state().node;
  }

  /// For autodiff: adds `g` (same layout) into `sum`, in place unless another handle shares it.
  static void accumulate(Tensor& sum, const Tensor& g) {
    if (!sum.defined()) {
      sum = g;
      return;
    }
    if (sum.layout() != g.layout())
      throw Error("gradient of layout " + g.layout().to_string() + " cannot accumulate into " +
                  sum.layout().to_string());
    if (sum.state_.use_count() > 1 || sum.state_->data.use_count() > 1) sum = sum.clone();
    // In place (xtensor's `+=` would build a temporary).
    kernels::add_into(sum.array().data(), g.array().data(),
                      static_cast<std::int64_t>(sum.array().size()));
  }

  std::string to_string() const {
    return "Tensor " + layout().to_string() + " on mesh " + layout().mesh_shape().to_string();
  }
  friend std::ostream& operator<<(std::ostream& out, const Tensor& t) {
    return out << t.to_string();
  }

 private:
  struct State {
    TensorLayout layout;
    Block block;
    std::shared_ptr<array_type> data;  // shared with detached views of the same tensor
    std::shared_ptr<GradNode<T>> node = nullptr;
    std::shared_ptr<const Recipe> recipe = nullptr;           // see recipe()
    std::shared_ptr<const MappedRecipe<T>> mapped = nullptr;  // see mapped_recipe()
    // Writes the block on first read (computed_on_read); kept by every handle sharing `data`,
    // each of which finds it written once one of them has read it.
    mutable std::shared_ptr<const Recipe> unwritten = nullptr;
  };

  static void check_mesh(const Mesh& mesh, const TensorLayout& layout) {
    if (layout.mesh_shape() != mesh.shape())
      throw LayoutError("tensor " + layout.to_string() + " is laid out on mesh " +
                        layout.mesh_shape().to_string() + " but this mesh is " +
                        mesh.shape().to_string());
  }

  // The block, computed first where it is still unwritten.
  array_type& written() const {
    const State& s = state();
    if (s.unwritten) {
      if (unwritten()) {
        array_type block = array_type::from_shape(detail::to_xshape(s.block.sizes()));
        (*s.unwritten)(block.data());
        *s.data = std::move(block);
      }
      s.unwritten = nullptr;
    }
    send_back_host_writes(s.data->data());
    return *s.data;
  }

  const State& state() const {
    if (!state_)
      throw Error("use of an empty meshtensor::Tensor (default-constructed, never assigned)");
    return *state_;
  }
  State& state() {
    if (!state_)
      throw Error("use of an empty meshtensor::Tensor (default-constructed, never assigned)");
    return *state_;
  }

  template <class Container>
  static array_type from_host(const Container& host_block) {
    const std::vector<T> values(host_block.begin(), host_block.end());
    return array_from_host(values, typename array_type::shape_type(host_block.shape().begin(),
                                                                   host_block.shape().end()));
  }

  static std::string shape_string(const std::vector<std::size_t>& sizes) {
    std::string out = "(";
    for (std::size_t i = 0; i < sizes.size(); ++i)
      out += (i ? ", " : "") + std::to_string(sizes[i]);
    return out + ")";
  }

  Mesh* mesh_ = nullptr;
  std::shared_ptr<State> state_;
};

}  // namespace meshtensor
