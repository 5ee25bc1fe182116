#pragma once
// Distributed NIfTI volumes (link meshtensor::nifti). Loading: every processor reads only its own
// block, in the canonical orientation (x, y, z nearest to R, A, S) or the file's, straight from the
// file — no processor holds the whole volume. Saving: one .nii or .nii.gz in the geometry of the
// volume it was computed from (axis order, directions, affine and header of the input), streamed
// through processor 0 a slab of planes at a time, so that processor 0 too holds only a slab.
// A failure on any processor is thrown on all; an output appears only once complete.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "meshtensor/comm/agree.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/io/nifti_file.hpp"
#include "meshtensor/io/orientation.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/// A NIfTI volume as a network sees it: the file, and how its axes map to the tensor's x, y, z.
struct NiftiVolume {
  nifti::File file;
  Orientation orientation;             // tensor axis d holds file axis orientation.axis[d]
  std::array<std::int64_t, 3> size{};  // voxels along x, y, z
  Affine affine = identity_affine();   // (x, y, z) index to world millimetres

  std::array<double, 3> spacing() const { return voxel_spacing(affine); }
  Shape shape(const std::array<std::string, 3>& dims = {"x", "y", "z"}) const {
    return Shape{Dim(dims[0], size[0]), Dim(dims[1], size[1]), Dim(dims[2], size[2])};
  }
};

/**
 * Opens `path` on every processor: each reads the header, and a problem on any is thrown on all.
 * `canonical`: the tensor's x, y, z are the voxel axes nearest to world R, A, S, increasing that
 * way (what nibabel's as_closest_canonical gives); otherwise they are the file's i, j, k.
 */
inline NiftiVolume open_nifti(Mesh& mesh, const std::string& path, bool canonical = true) {
  NiftiVolume v;
  agree_on(mesh, failure_of([&] { v.file = nifti::open(path); }));
  if (canonical) v.orientation = Orientation::closest_canonical(v.file.affine);
  v.size = v.orientation.canonical_size(v.file.size);
  v.affine = v.orientation.canonical_affine(v.file.affine, v.file.size);
  return v;
}

namespace detail {

// Where the voxels of a file box lie in a processor's row-major block of the tensor: the offset of
// the box's first voxel and the offset steps along the file's i, j, k (negative where flipped).
struct BoxInBlock {
  std::array<Range, 3> box;  // file ranges
  std::int64_t first = 0;
  std::array<std::int64_t, 3> step{};
};

// `block`'s ranges along the tensor's first three dims, clipped to `canonical` ranges, seen from
// the file; `strides` are the block's row-major strides.
inline BoxInBlock box_in_block(const NiftiVolume& v, const Block& block,
                               const std::vector<std::int64_t>& strides,
                               const std::array<Range, 3>& canonical) {
  BoxInBlock b;
  for (int d = 0; d < 3; ++d) {
    const int a = v.orientation.axis[d];
    const Range mine = intersect(block.ranges[d], canonical[d]);
    b.box[a] = v.orientation.file_range(d, mine, v.file.size[a]);
    const bool flip = v.orientation.flip[d];
    b.step[a] = flip ? -strides[d] : strides[d];
    // The box's first file index is the last canonical index of the range where flipped.
    b.first += ((flip ? mine.end - 1 : mine.begin) - block.ranges[d].begin) * strides[d];
  }
  return b;
}

// Calls f(j, k, at) for each row of the box in file order: `at` is the block offset of the row's
// first voxel; the row's voxels lie b.step[0] apart.
template <class F>
void for_each_row(const BoxInBlock& b, F&& f) {
  for (std::int64_t k = b.box[2].begin; k < b.box[2].end; ++k)
    for (std::int64_t j = b.box[1].begin; j < b.box[1].end; ++j)
      f(j, k, b.first + (j - b.box[1].begin) * b.step[1] + (k - b.box[2].begin) * b.step[2]);
}

inline std::array<Range, 3> whole(const std::array<std::int64_t, 3>& size) {
  return {Range{0, size[0]}, Range{0, size[1]}, Range{0, size[2]}};
}

}  // namespace detail

/**
 * Volume `volume` of a 4-D file (a channel, such as one MRI sequence of a BraTS case) as a tensor
 * of dims `dims` (x, y, z) on `layout`, values scaled by the file's slope and intercept and
 * converted to T. Each processor reads only its own block from the file.
 */
template <class T>
Tensor<T> load_nifti_volume(Mesh& mesh, const NiftiVolume& v, std::int64_t volume,
                            const Layout& layout,
                            const std::array<std::string, 3>& dims = {"x", "y", "z"}) {
  nifti::check_volume(v.file, volume);  // before any block is allocated
  TensorLayout tensor_layout(v.shape(dims), mesh.shape(), layout);
  const Block block = tensor_layout.block(mesh.coord());
  Array<T> local = meshtensor::detail::new_block<T>(mesh, tensor_layout, block);
  const auto b = detail::box_in_block(v, block, kernels::row_major_strides(block.sizes()),
                                      detail::whole(v.size));
  std::vector<T> staging;  // the host reads the file: see writable_on_host
  T* into = writable_on_host(local, staging);
  agree_on(mesh, failure_of([&] {
             if (!into) return;  // a plan's block: no values to read
             nifti::read_box<T>(
                 v.file, b.box,
                 [&](std::int64_t j, std::int64_t k, const T* values) {
                   T* out = into + b.first + (j - b.box[1].begin) * b.step[1] +
                            (k - b.box[2].begin) * b.step[2];
                   for (std::int64_t i = 0; i < b.box[0].size(); ++i)
                     out[i * b.step[0]] = values[i];
                 },
                 volume);
           }));
  written_on_host(staging, local);
  return Tensor<T>(mesh, std::move(tensor_layout), std::move(local));
}

/**
 * The volume of a 3-D file as a tensor of dims `dims` (x, y, z) on `layout`, as
 * load_nifti_volume reads one; a 4-D file of several volumes is refused, naming their count.
 */
template <class T>
Tensor<T> load_nifti(Mesh& mesh, const NiftiVolume& v, const Layout& layout,
                     const std::array<std::string, 3>& dims = {"x", "y", "z"}) {
  if (v.file.volumes > 1)
    throw IoError(v.file.path + ": a 4-D image with " + std::to_string(v.file.volumes) +
                  " entries along dim 4 (volumes or channels) where one 3-D volume was expected");
  return load_nifti_volume<T>(mesh, v, 0, layout, dims);
}

namespace detail {

inline void check_volume_fits(const Shape& shape, const std::string& path,
                              const NiftiVolume& like) {
  if (shape.rank() != 3 && shape.rank() != 4)
    throw ShapeError("save_nifti " + path + ": a tensor of shape " + shape.to_string() +
                     "; a volume has 3 dims (x, y, z) and optionally a 4th (volumes)");
  for (int d = 0; d < 3; ++d)
    if (shape[d].size != like.size[d])
      throw ShapeError("save_nifti " + path + ": dim " + quote(shape[d].name) + " has " +
                       std::to_string(shape[d].size) + " voxels but " + like.file.path + " has " +
                       std::to_string(like.size[d]) + " along that axis");
}

// Each block is written once, by its first replica: coordinate 0 on mesh axes that split no dim.
inline bool first_replica(const MeshShape& mesh, const TensorLayout& layout, int processor) {
  const MeshCoord coord = mesh.coord_of(processor);
  for (std::size_t a = 0; a < mesh.rank(); ++a)
    if (!layout.dim_on_axis(a) && coord[a] != 0) return false;
  return true;
}

// The pieces of a tensor's blocks in one slab of whole file planes (one volume, planes from k0):
// where each processor's piece lies, packed in file order (i fastest), and placed into the slab.
template <class T>
struct SlabPieces {
  SlabPieces(const TensorLayout& tensor_layout, const NiftiVolume& volume, const T* block)
      : layout(tensor_layout), like(volume), block_data(block) {}

  const TensorLayout& layout;
  const NiftiVolume& like;
  const T* block_data;  // this processor's block, readable on the host
  std::int64_t volume = 0, k0 = 0;
  std::array<Range, 3> canonical{};  // the slab's x, y, z ranges
  std::vector<T> piece;

  // Processor p's piece of the slab, if any: its block seen from the file.
  bool piece_of(int p, BoxInBlock& b) const {
    const Block block = layout.block(p);
    const bool volumes = layout.shape().rank() == 4;
    if (volumes && !block.ranges[3].contains(volume)) return false;
    const auto strides = kernels::row_major_strides(block.sizes());
    b = box_in_block(like, block, strides, canonical);
    if (volumes) b.first += (volume - block.ranges[3].begin) * strides[3];
    return !b.box[0].empty() && !b.box[1].empty() && !b.box[2].empty();
  }
  static std::size_t size_of(const BoxInBlock& b) {
    return std::size_t(b.box[0].size() * b.box[1].size() * b.box[2].size());
  }
  // This processor's piece, into `piece`.
  void pack(const BoxInBlock& b) {
    piece.resize(size_of(b));
    T* out = piece.data();
    for_each_row(b, [&](std::int64_t, std::int64_t, std::int64_t at) {
      for (std::int64_t i = 0; i < b.box[0].size(); ++i) *out++ = block_data[at + i * b.step[0]];
    });
  }
  // `piece` (a piece at `b`) into the slab.
  void place(const BoxInBlock& b, std::vector<T>& slab) const {
    const T* in = piece.data();
    for_each_row(b, [&](std::int64_t j, std::int64_t k, std::int64_t) {
      std::copy(
          in, in + b.box[0].size(),
          slab.data() + ((k - k0) * like.file.size[1] + j) * like.file.size[0] + b.box[0].begin);
      in += b.box[0].size();
    });
  }
};

// Planes of the file per slab: about 16 MiB.
inline std::int64_t planes_per_slab(const NiftiVolume& like, std::size_t bytes_per_voxel) {
  const std::int64_t plane = like.file.size[0] * like.file.size[1];
  return std::max<std::int64_t>(
      1,
      (std::int64_t(16) << 20) / std::max<std::int64_t>(1, plane * std::int64_t(bytes_per_voxel)));
}

// The dim of x, y, z that reads the file's k axis.
inline int dim_along_file_k(const NiftiVolume& like) {
  for (int d = 0; d < 3; ++d)
    if (like.orientation.axis[d] == 2) return d;
  return 2;
}

}  // namespace detail

/**
 * Writes `t` into `path` (.nii or .nii.gz) in the file geometry of `like`: the tensor's first three
 * dims are like's x, y, z (their sizes must match); a fourth dim, if any, becomes NIfTI dim 4 (one
 * 3-D volume per entry, e.g. class probabilities). Voxels are stored as T. Collective: processor 0
 * writes, slab by slab, what every block's first replica sends it.
 */
template <class T>
void save_nifti(const Tensor<T>& t, const std::string& path, const NiftiVolume& like,
                const nifti::Description& description = {}) {
  Mesh& mesh = t.mesh();
  detail::check_volume_fits(t.shape(), path, like);
  const std::int64_t volumes = t.shape().rank() == 4 ? t.shape()[3].size : 1;
  std::unique_ptr<nifti::Writer> writer;
  if (mesh.processor() == 0)
    agree_on(mesh, failure_of([&] {
               writer = std::make_unique<nifti::Writer>(like.file, path, nifti::datatype_of<T>(),
                                                        volumes, description);
             }));
  else
    agree_on(mesh, {});

  const std::int64_t planes = detail::planes_per_slab(like, sizeof(T));
  const int k_dim = detail::dim_along_file_k(like);
  Communicator& world = mesh.world();
  std::string failure;
  std::vector<T> slab, staging;  // the host packs the block: see readable_on_host
  detail::SlabPieces<T> pieces(t.layout(), like, readable_on_host(t.array(), staging));
  detail::BoxInBlock b;
  for (pieces.volume = 0; pieces.volume < volumes; ++pieces.volume)
    for (pieces.k0 = 0; pieces.k0 < like.file.size[2]; pieces.k0 += planes) {
      const Range k_slab{pieces.k0, std::min(like.file.size[2], pieces.k0 + planes)};
      pieces.canonical = detail::whole(like.size);
      pieces.canonical[k_dim] = like.orientation.file_range(k_dim, k_slab, like.file.size[2]);
      if (mesh.processor() != 0) {
        if (detail::first_replica(mesh.shape(), t.layout(), mesh.processor()) &&
            pieces.piece_of(mesh.processor(), b)) {
          pieces.pack(b);
          world.isend(pieces.piece.data(), pieces.piece.size() * sizeof(T), 0, tags::volume_io)
              .wait();
        }
        continue;
      }
      // Processor 0 places every piece (its own too) into the slab, then appends the slab.
      slab.assign(std::size_t(like.file.size[0] * like.file.size[1] * k_slab.size()), T{});
      for (int p = 0; p < mesh.num_processors(); ++p) {
        if (!detail::first_replica(mesh.shape(), t.layout(), p) || !pieces.piece_of(p, b)) continue;
        if (p == 0) {
          pieces.pack(b);
        } else {
          pieces.piece.resize(pieces.size_of(b));
          world.irecv(pieces.piece.data(), pieces.piece.size() * sizeof(T), p, tags::volume_io)
              .wait();
        }
        pieces.place(b, slab);
      }
      // After a failure processor 0 still takes every piece, so no sender waits forever.
      if (failure.empty())
        failure =
            failure_of([&] { writer->write(slab.data(), std::int64_t(slab.size() * sizeof(T))); });
    }
  if (mesh.processor() == 0 && failure.empty()) failure = failure_of([&] { writer->commit(); });
  writer.reset();
  agree_on(mesh, failure);
}

}  // namespace meshtensor
