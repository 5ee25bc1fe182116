#pragma once
// Moving a tensor to another layout on the same mesh. One rule covers all-gather, all-to-all and
// local slicing: every processor receives each part of its new block from the processor that holds
// that part in the old layout *and* shares its coordinates on the mesh axes the old layout leaves
// unused. Where the old layout replicates and the new one splits, that processor is itself, and
// nothing moves.

#include <cstdint>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/device/array.hpp"
#include "meshtensor/device/transfer.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {
namespace detail {

template <class T>
Tensor<T> relayout_to(const Tensor<T>& tensor, const TensorLayout& target) {
  if (target == tensor.layout()) return tensor;
  Mesh& mesh = tensor.mesh();
  const MeshShape& mesh_shape = mesh.shape();
  const TensorLayout& source = tensor.layout();
  const MeshCoord& me = mesh.coord();

  std::vector<bool> source_splits(mesh_shape.rank(), false);
  for (std::size_t d = 0; d < source.rank(); ++d)
    if (auto axis = source.mesh_axis_of(d)) source_splits[*axis] = true;
  auto same_replica = [&](const MeshCoord& other) {
    for (std::size_t a = 0; a < mesh_shape.rank(); ++a)
      if (!source_splits[a] && other[a] != me[a]) return false;
    return true;
  };

  const Block& old_block = tensor.block();
  const Block new_block = target.block(me);
  const auto old_strides = kernels::row_major_strides(old_block.sizes());
  const auto new_strides = kernels::row_major_strides(new_block.sizes());
  Array<T> local = detail::new_block<T>(mesh, target, new_block);

  struct Piece {
    Block box;
    Buffer<T> data;  // the processor's memory: its device's where it has one
  };
  std::vector<Piece> outgoing, incoming;
  outgoing.reserve(mesh_shape.num_processors());
  incoming.reserve(mesh_shape.num_processors());
  std::vector<Request> requests;
  Communicator& world = mesh.world();

  for (int p = 0; p < mesh_shape.num_processors(); ++p) {
    const MeshCoord other = mesh_shape.coord_of(p);
    if (!same_replica(other)) continue;
    const Block to_send = intersect(old_block, target.block(other));
    if (!to_send.empty()) {
      const T* from =
          tensor.array().data() + kernels::offset_of_box(to_send, old_block, old_strides);
      if (p == mesh.processor()) {
        kernels::copy_box(to_send.sizes(), from, old_strides,
                          local.data() + kernels::offset_of_box(to_send, new_block, new_strides),
                          new_strides);
      } else {
        auto& piece = outgoing.emplace_back(Piece{to_send, Buffer<T>(to_send.num_elements())});
        kernels::copy_box(to_send.sizes(), from, old_strides, piece.data.data(),
                          kernels::row_major_strides(to_send.sizes()));
        requests.push_back(world.isend(piece.data.data(), piece.data.size() * sizeof(T), p,
                                       tags::relayout, piece.data.space()));
      }
    }
    if (p == mesh.processor()) continue;
    const Block to_receive = intersect(source.block(other), new_block);
    if (!to_receive.empty()) {
      auto& piece = incoming.emplace_back(Piece{to_receive, Buffer<T>(to_receive.num_elements())});
      requests.push_back(world.irecv(piece.data.data(), piece.data.size() * sizeof(T), p,
                                     tags::relayout, piece.data.space()));
    }
  }
  wait_all(requests);
  for (const auto& piece : incoming)
    kernels::copy_box(
        piece.box.sizes(), piece.data.data(), kernels::row_major_strides(piece.box.sizes()),
        local.data() + kernels::offset_of_box(piece.box, new_block, new_strides), new_strides);
  return Tensor<T>(mesh, target, std::move(local));
}

}  // namespace detail

/**
 * The same global tensor under another layout. Where the new layout splits a dim the old one
 * replicated, processors slice locally; where it replicates a dim the old one split, blocks are
 * gathered; a dim moving between mesh axes is an all-to-all.
 *
 * ```cpp
 * auto by_rows = relayout(t, "x:rows");    // was "y:rows"
 * ```
 */
template <class T>
Tensor<T> relayout(const Tensor<T>& tensor, const Layout& layout) {
  auto moved = detail::relayout_to(tensor, tensor.layout().with_layout(layout));
  if (moved.layout() == tensor.layout()) return moved;
  // The gradient goes back the way the data came.
  autodiff::record(moved, {tensor},
                   [source = tensor.layout()](const Tensor<T>& g, const std::vector<bool>&) {
                     return std::vector<Tensor<T>>{detail::relayout_to(g, source)};
                   });
  return moved;
}

/// The whole global array, on every processor, in the host's memory (tests and small data: it
/// needs the full memory).
template <class T>
xt::xarray<T> gather(const Tensor<T>& tensor) {
  const auto whole = detail::relayout_to(tensor, tensor.layout().with_layout(Layout{}));
  xt::xarray<T> out = xt::xarray<T>::from_shape(whole.array().shape());
  copy_to_host(whole.array().data(), whole.array().space(), std::int64_t(out.size()), out.data());
  return out;
}

}  // namespace meshtensor
