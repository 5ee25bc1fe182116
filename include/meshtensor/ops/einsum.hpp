#pragma once
// Einstein summation over named dims. Dims of the operands that the output does not name are summed
// over; where such a dim is split over a mesh axis each processor holds a partial sum, and an
// all-reduce over that axis completes it — the rule behind a data-parallel weight gradient.

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/kernels/common/accumulator.hpp"
#include "meshtensor/kernels/sum.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/ops/align.hpp"
#include "meshtensor/tensor/create.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

// A block with its dim names: what the local contraction works on. It points at an operand's
// block (never a copy) or owns an intermediate product.
template <class T>
struct NamedBlock {
  std::vector<std::string> names;
  kernels::Sizes sizes;
  const T* data = nullptr;
  Array<T> owned = empty_array<T>();
};

// Where a contraction's sums go: into accumulators (`sums`, to be all-reduced) or, where `sums`
// is null, rounded once into `rounded`.
template <class Acc, class T>
struct ContractionOutput {
  Acc* sums = nullptr;
  T* rounded = nullptr;
};

template <class T>
kernels::FoldOperand<T> fold_operand(const NamedBlock<T>& b,
                                     const std::vector<std::string>& out_names,
                                     const std::vector<std::string>& inner_names) {
  const auto own = kernels::row_major_strides(b.sizes);
  auto strides = [&](const std::vector<std::string>& names) {
    kernels::Strides s(names.size(), 0);
    for (std::size_t i = 0; i < names.size(); ++i)
      for (std::size_t d = 0; d < b.names.size(); ++d)
        if (b.names[d] == names[i]) s[i] = own[d];
    return s;
  };
  return {b.data, strides(out_names), strides(inner_names)};
}

// The sums over `inner_names` of the products of `in` (one or two blocks), onto `out_names`.
template <class Acc, class T>
void contract(const std::vector<const NamedBlock<T>*>& in,
              const std::vector<std::string>& out_names, const kernels::Sizes& out_sizes,
              const std::vector<std::string>& inner_names, const kernels::Sizes& inner_sizes,
              const ContractionOutput<Acc, T>& out) {
  auto run = [&](const auto& operands) {
    if (out.sums) return kernels::sum(out_sizes, inner_sizes, operands, out.sums);
    kernels::sum_rounded(out_sizes, inner_sizes, operands, out.rounded);
  };
  const auto operand = [&](std::size_t k) { return fold_operand(*in[k], out_names, inner_names); };
  if (in.size() == 1) return run(std::array{operand(0)});
  run(std::array{operand(0), operand(1)});
}

}  // namespace detail

template <class T>
Tensor<T> einsum(const std::vector<Tensor<T>>& given, const DimNames& output);

namespace detail {

// The dims a contraction step keeps (the output's or a later operand's) and those it sums over.
template <class T>
void split_step_dims(const std::vector<const NamedBlock<T>*>& in,
                     const std::vector<NamedBlock<T>>& blocks, std::size_t step,
                     const DimNames& output, std::vector<std::string>& keep,
                     std::vector<std::string>& inner) {
  auto needed_later = [&](const std::string& name) {
    if (output.contains(name)) return true;
    for (std::size_t later = step + 2; later < blocks.size(); ++later)
      if (std::count(blocks[later].names.begin(), blocks[later].names.end(), name)) return true;
    return false;
  };
  for (const auto* b : in)
    for (const auto& name : b->names) {
      if (std::count(keep.begin(), keep.end(), name) ||
          std::count(inner.begin(), inner.end(), name))
        continue;
      (needed_later(name) ? keep : inner).push_back(name);
    }
}

// The local blocks of `aligned` contracted left to right onto `output`, into `out`; each step
// keeps the dims the output or a later operand still needs, its products rounded to T.
// `local_size(name)` is a dim's size in this processor's blocks.
template <class T, class Acc, class LocalSize>
void contract_chain(const std::vector<Tensor<T>>& aligned, const DimNames& output,
                    LocalSize&& local_size, const ContractionOutput<Acc, T>& out) {
  std::vector<NamedBlock<T>> blocks;
  for (const auto& t : aligned)
    blocks.push_back({t.shape().names(), t.block().sizes(), t.array().data(), empty_array<T>()});
  NamedBlock<T> current{blocks[0].names, blocks[0].sizes, blocks[0].data, empty_array<T>()};
  const std::size_t steps = std::max<std::size_t>(1, blocks.size() - 1);
  for (std::size_t step = 0;; ++step) {
    std::vector<const NamedBlock<T>*> in{&current};
    if (blocks.size() > 1) in.push_back(&blocks[step + 1]);
    const bool last = step + 1 == steps;
    std::vector<std::string> keep, inner;
    split_step_dims(in, blocks, step, output, keep, inner);
    if (last) keep = output.names();  // the output's order, not the operands'
    kernels::Sizes keep_sizes, inner_sizes;
    for (const auto& name : keep) keep_sizes.push_back(local_size(name));
    for (const auto& name : inner) inner_sizes.push_back(local_size(name));
    if (last) return contract<Acc, T>(in, keep, keep_sizes, inner, inner_sizes, out);
    Array<T> data = Array<T>::from_shape(to_xshape(keep_sizes));
    contract<Acc, T>(in, keep, keep_sizes, inner, inner_sizes, {nullptr, data.data()});
    current = {keep, keep_sizes, nullptr, std::move(data)};
    current.data = current.owned.data();
  }
}

// d/d(operand k) is the einsum of the output gradient with the other operands, onto operand k's
// dims; dims only operand k has were summed over, so their gradient is a broadcast (ones).
template <class T>
std::vector<Tensor<T>> einsum_gradients(const std::vector<Tensor<T>>& given, const Tensor<T>& g,
                                        const std::vector<bool>& needed) {
  std::vector<Tensor<T>> grads(given.size());
  for (std::size_t k = 0; k < given.size(); ++k) {
    if (!needed[k]) continue;
    std::vector<Tensor<T>> factors{g};
    for (std::size_t j = 0; j < given.size(); ++j)
      if (j != k) factors.push_back(given[j]);
    std::vector<Dim> only_here;
    for (const auto& dim : given[k].shape()) {
      bool elsewhere = false;
      for (const auto& f : factors) elsewhere |= f.shape().contains(dim.name);
      if (!elsewhere) only_here.push_back(dim);
    }
    if (!only_here.empty())
      factors.push_back(full<T>(g.mesh(), Shape(only_here), given[k].layout().layout(), T(1)));
    grads[k] = relayout_to(einsum(factors, DimNames(given[k].shape())), given[k].layout());
  }
  return grads;
}

inline Shape einsum_output_shape(const Shape& all, const DimNames& output) {
  std::vector<Dim> out_dims;
  for (const auto& name : output) {
    if (!all.contains(name))
      throw ShapeError("einsum: output dim " + quote(name) +
                       " is in no operand; the operands' dims are " + quote_list(all.names()));
    out_dims.push_back(all.dim(name));
  }
  return Shape(out_dims);
}

}  // namespace detail

namespace detail {
// The einsum's value in the element type Out (T, or fp32 for a bfloat16 gradient summed onto an
// fp32 parameter): accumulated and all-reduced in the accumulator type, rounded once into Out.
template <class Out, class T>
Tensor<Out> einsum_values(const std::vector<Tensor<T>>& given, const DimNames& output) {
  using Acc = kernels::accumulator_t<T>;
  if (given.empty()) throw ShapeError("einsum needs at least one operand");
  std::vector<const Tensor<T>*> operands;
  std::vector<const Shape*> shapes;
  std::vector<const TensorLayout*> layouts;
  for (const auto& t : given) {
    operands.push_back(&t);
    shapes.push_back(&t.shape());
    layouts.push_back(&t.layout());
  }
  check_same_mesh<T>("einsum", operands);
  const Shape all = merged_shape("einsum", shapes);
  const Shape out_shape = einsum_output_shape(all, output);
  Mesh& mesh = given.front().mesh();
  const Layout common = common_layout(mesh, "einsum", layouts);
  const auto aligned = detail::aligned<T>(operands, common);
  const TensorLayout common_all(all, mesh.shape(), common);
  const Block all_block = common_all.block(mesh.coord());
  const auto local_size = [&](const std::string& name) {
    return all_block.ranges[all.position(name)].size();
  };

  // Summed dims that were split leave partial sums on each processor of their mesh axes.
  AxisSet partial_axes = 0;
  for (const auto& dim : all)
    if (!output.contains(dim.name))
      if (auto axis = common_all.mesh_axis_of(dim.name)) partial_axes |= AxisSet{1} << *axis;

  TensorLayout out_layout(out_shape, mesh.shape(), common);
  Array<Out> out = new_block<Out>(mesh, out_layout, out_layout.block(mesh.coord()));
  if constexpr (std::is_same_v<Out, T>)
    if (!partial_axes) {
      contract_chain<T, Acc>(aligned, output, local_size, {nullptr, out.data()});
      return Tensor<Out>(mesh, std::move(out_layout), std::move(out));
    }
  Buffer<Acc> sums(static_cast<std::size_t>(out.size()));
  contract_chain<T, Acc>(aligned, output, local_size, {sums.data(), nullptr});
  if (partial_axes) all_reduce(mesh.group(partial_axes), sums, ReduceOp::sum);
  kernels::narrow(sums.data(), out.data(), static_cast<std::int64_t>(sums.size()));
  return Tensor<Out>(mesh, std::move(out_layout), std::move(out));
}
}  // namespace detail

/**
 * Sum over the dims the output omits of the product of the operands, all aligned by dim name.
 *
 * ```cpp
 * auto y = einsum({x, w}, "batch, hidden");      // x [batch, features], w [features, hidden]
 * auto g = einsum({x, dy}, "features, hidden");  // weight gradient: sums over batch, all-reduced
 * ```
 */
template <class T>
Tensor<T> einsum(const std::vector<Tensor<T>>& given, const DimNames& output) {
  Tensor<T> product = detail::einsum_values<T>(given, output);
  autodiff::record(product, given, [given](const Tensor<T>& g, const std::vector<bool>& needed) {
    return detail::einsum_gradients(given, g, needed);
  });
  return product;
}

template <class T>
Tensor<T> einsum(std::initializer_list<Tensor<T>> operands, const DimNames& output) {
  return einsum(std::vector<Tensor<T>>(operands), output);
}

}  // namespace meshtensor
