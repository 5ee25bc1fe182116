#pragma once
// Distributed tensors to and from .npy files without gathering them: every processor reads only its
// own block, and writes only its own block into a file processor 0 has laid out, at its offsets. A
// file appears under its name only once it is complete (written to a temporary name, then renamed);
// a failure on any processor is reported on all of them.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meshtensor/comm/agree.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/io/durable_file.hpp"
#include "meshtensor/io/npy.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/tensor/new_block.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/**
 * Reads `path` into a tensor of `shape` on `layout`; each processor reads only its block. The file
 * must hold an array of exactly that shape and element type, with finite values where they are
 * floats; otherwise every processor throws an IoError naming the file (and the element).
 */
template <class T>
Tensor<T> load_npy(Mesh& mesh, const std::string& path, const Shape& shape, const Layout& layout) {
  TensorLayout tensor_layout(shape, mesh.shape(), layout);
  const npy::Header header = npy::read_header(path);
  npy::check_type<T>(header, path);
  if (header.shape != shape.sizes())
    throw IoError(path + ": holds an array of shape " + npy::shape_text(header.shape) + " but " +
                  shape.to_string() + " was expected");
  const Block block = tensor_layout.block(mesh.coord());
  meshtensor::detail::check_block_fits<T>(mesh, tensor_layout, block);
  Array<T> local;
  agree_on(mesh, failure_of([&] { local = npy::read_block<T>(path, block); }));
  return Tensor<T>(mesh, tensor_layout, std::move(local));
}

/**
 * Writes the global tensor to `path` (a plain .npy numpy can read). Collective: processor 0 lays
 * the file out under a temporary name, each block is written once (by the first of its replicas),
 * and processor 0 renames the finished file into place.
 */
template <class T>
void save_npy(const Tensor<T>& tensor, const std::string& path) {
  Mesh& mesh = tensor.mesh();
  const std::string temporary = path + ".partial";
  const auto& shape = tensor.shape();
  std::string failure;
  if (mesh.processor() == 0)
    failure = failure_of([&] {
      // The header, then the file extended to its full size for the blocks to be written into;
      // created exclusively, never through a link (io/durable_file.hpp).
      const std::string head = npy::header<T>(shape.sizes());
      const int fd = io::create_temporary(temporary, path);
      const auto total = static_cast<off_t>(head.size() + shape.num_elements() * sizeof(T));
      const bool written =
          io::write_all(fd, head.data(), head.size()) && ::ftruncate(fd, total) == 0;
      io::finish_temporary(fd, written, temporary, path);
    });
  agree_on(mesh, failure);

  // Each block is written by one replica: the processor at coordinate 0 on the unused mesh axes.
  bool writer = true;
  for (std::size_t a = 0; a < mesh.shape().rank(); ++a)
    if (!tensor.layout().dim_on_axis(a) && mesh.coord()[a] != 0) writer = false;
  failure.clear();
  if (writer && !tensor.block().empty()) {
    const npy::Header header = npy::read_header(temporary);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      failure = path + ": cannot open the partial file to write processor " +
                std::to_string(mesh.processor()) + "'s block";
    } else {
      const Block& block = tensor.block();
      const std::size_t rank = shape.rank();
      std::vector<std::int64_t> strides(rank, 1);
      for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * shape[d].size;
      const std::int64_t row = rank ? block.ranges[rank - 1].size() : 1;
      const std::int64_t rows = block.num_elements() / row;
      std::vector<T> staging;  // the host writes the file: see readable_on_host
      const T* data = readable_on_host(tensor.array(), staging);
      for (std::int64_t r = 0; r < rows && failure.empty(); ++r) {
        std::int64_t offset = rank ? block.ranges[rank - 1].begin : 0, rest = r;
        for (std::size_t d = rank ? rank - 1 : 0; d-- > 0;) {
          offset += (block.ranges[d].begin + rest % block.ranges[d].size()) * strides[d];
          rest /= block.ranges[d].size();
        }
        const auto bytes = static_cast<std::size_t>(row) * sizeof(T);
        if (::pwrite(fd, data + r * row, bytes,
                     static_cast<off_t>(header.data_offset + offset * sizeof(T))) !=
            static_cast<ssize_t>(bytes))
          failure =
              path + ": writing processor " + std::to_string(mesh.processor()) + "'s block failed";
      }
      // On the disk before processor 0 renames the file into place.
      if (failure.empty() && ::fsync(fd) != 0)
        failure = path + ": flushing processor " + std::to_string(mesh.processor()) +
                  "'s block to the disk failed";
      if (::close(fd) != 0 && failure.empty()) failure = path + ": closing the partial file failed";
    }
  }
  agree_on(mesh, failure);
  failure.clear();
  if (mesh.processor() == 0) failure = failure_of([&] { io::publish(temporary, path); });
  agree_on(mesh, failure);
}

}  // namespace meshtensor
