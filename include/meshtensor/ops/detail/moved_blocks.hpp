#pragma once
// Moving parts of blocks between processors, the one exchange behind relayout (a new layout) and
// reorient (flips, transposes, rotations: each output axis reads one input axis, forwards or
// reversed, so the elements of any box of the output lie in one box of the input).

#include <cstdint>
#include <vector>

#include "meshtensor/comm/request.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::detail {

// Output axis i holds input axis from[i], its order reversed where reversed[i].
struct Reorientation {
  std::vector<std::size_t> from;
  std::vector<bool> reversed;

  Reorientation inverse() const {
    Reorientation back{std::vector<std::size_t>(from.size()), std::vector<bool>(from.size())};
    for (std::size_t i = 0; i < from.size(); ++i) {
      back.from[from[i]] = i;
      back.reversed[from[i]] = reversed[i];
    }
    return back;
  }

  // The output box that input box `in` (of an input with sizes `input`) becomes.
  Block output_box(const Block& in, const std::vector<std::int64_t>& input) const {
    Block out{std::vector<Range>(from.size())};
    for (std::size_t i = 0; i < from.size(); ++i) {
      const Range r = in.ranges[from[i]];
      const std::int64_t n = input[from[i]];
      out.ranges[i] = reversed[i] ? Range{n - r.end, n - r.begin} : r;
    }
    return out;
  }

  // The input box whose elements output box `out` holds.
  Block input_box(const Block& out, const std::vector<std::int64_t>& input) const {
    Block in{std::vector<Range>(from.size())};
    for (std::size_t i = 0; i < from.size(); ++i) {
      const Range r = out.ranges[i];
      const std::int64_t n = input[from[i]];
      in.ranges[from[i]] = reversed[i] ? Range{n - r.end, n - r.begin} : r;
    }
    return in;
  }

  // Copies the input elements of `in_box` (inside `holder`, an input block with `strides`) to
  // `to`, row-major in the output's order of axes.
  template <class T>
  void copy(const Block& in_box, const T* holder_data, const Block& holder,
            const kernels::Strides& strides, const std::vector<std::int64_t>& input, T* to,
            const kernels::Strides& to_strides) const {
    const Block out = output_box(in_box, input);
    kernels::Strides from_strides(from.size());
    std::int64_t corner = 0;  // the input offset of the output box's first element
    for (std::size_t i = 0; i < from.size(); ++i) {
      const std::size_t a = from[i];
      const Range r = in_box.ranges[a];
      corner += ((reversed[i] ? r.end - 1 : r.begin) - holder.ranges[a].begin) * strides[a];
      from_strides[i] = reversed[i] ? -strides[a] : strides[a];
    }
    kernels::copy_box(out.sizes(), holder_data + corner, from_strides, to, to_strides);
  }
};

inline Reorientation identity_reorientation(std::size_t rank) {
  Reorientation how{std::vector<std::size_t>(rank), std::vector<bool>(rank, false)};
  for (std::size_t i = 0; i < rank; ++i) how.from[i] = i;
  return how;
}

/**
 * `tensor` moved to `target` (its shape's axes read from the source's as `how` says), each
 * processor receiving each part of its new block from the processor that holds that part *and*
 * shares its coordinates on the mesh axes the source layout leaves unused. Where that processor is
 * itself (the source replicates what the target splits), nothing moves. Messages carry `tag`.
 */
template <class T>
Tensor<T> move_blocks(const Tensor<T>& tensor, const TensorLayout& target, const Reorientation& how,
                      int tag) {
  Mesh& mesh = tensor.mesh();
  const MeshShape& mesh_shape = mesh.shape();
  const TensorLayout& source = tensor.layout();
  const MeshCoord& me = mesh.coord();
  const std::vector<std::int64_t> input = source.shape().sizes();

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
    Block box;  // in the output's coordinates
    Buffer<T> data;
  };
  std::vector<Piece> outgoing, incoming;
  outgoing.reserve(mesh_shape.num_processors());
  incoming.reserve(mesh_shape.num_processors());
  std::vector<Request> requests;
  Communicator& world = mesh.world();
  for (int p = 0; p < mesh_shape.num_processors(); ++p) {
    const MeshCoord other = mesh_shape.coord_of(p);
    if (!same_replica(other)) continue;
    const Block to_send = intersect(old_block, how.input_box(target.block(other), input));
    if (!to_send.empty()) {
      const Block out = how.output_box(to_send, input);
      if (p == mesh.processor()) {
        how.copy(to_send, tensor.array().data(), old_block, old_strides, input,
                 local.data() + kernels::offset_of_box(out, new_block, new_strides), new_strides);
      } else {
        auto& piece = outgoing.emplace_back(Piece{out, Buffer<T>(out.num_elements())});
        how.copy(to_send, tensor.array().data(), old_block, old_strides, input, piece.data.data(),
                 kernels::row_major_strides(out.sizes()));
        requests.push_back(world.isend(piece.data.data(), piece.data.size() * sizeof(T), p, tag,
                                       piece.data.space()));
      }
    }
    if (p == mesh.processor()) continue;
    const Block to_receive = intersect(how.output_box(source.block(other), input), new_block);
    if (!to_receive.empty()) {
      auto& piece = incoming.emplace_back(Piece{to_receive, Buffer<T>(to_receive.num_elements())});
      requests.push_back(world.irecv(piece.data.data(), piece.data.size() * sizeof(T), p, tag,
                                     piece.data.space()));
    }
  }
  wait_all(requests);
  for (const auto& piece : incoming)
    kernels::copy_box(
        piece.box.sizes(), piece.data.data(), kernels::row_major_strides(piece.box.sizes()),
        local.data() + kernels::offset_of_box(piece.box, new_block, new_strides), new_strides);
  return Tensor<T>(mesh, target, std::move(local));
}

}  // namespace meshtensor::detail
