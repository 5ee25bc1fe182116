#pragma once
// A MeshShape bound to a communicator: this processor's place in the mesh, one communicator per
// set of mesh axes, so that ops can reduce or gather along exactly the axes a layout splits, and
// the processor's context (device/processor.hpp), current on the thread that built the mesh.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/transport_choice.hpp"
#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/core/settings.hpp"
#include "meshtensor/device/processor.hpp"

namespace meshtensor {

/// A set of mesh axes, as a bit mask over axis positions.
using AxisSet = std::uint32_t;

inline AxisSet axis_set(std::initializer_list<std::size_t> positions) {
  AxisSet set = 0;
  for (auto p : positions) set |= AxisSet{1} << p;
  return set;
}

/**
 * The processors of a run, arranged as a mesh. Built collectively by every processor.
 *
 * ```cpp
 * // on 8 processors, mesh "rows:2; cols:4": processor 6 is at rows=1, cols=2
 * mesh.group(axis_set({1}))   // the 4 processors of this row, ranked by their column
 * ```
 */
class Mesh {
 public:
  static constexpr std::size_t max_axes = 8;

  /// The mesh of the processors `world` connects; this processor computes on `device` (by
  /// default the transport's: the host's cores, or a GPU under nccl), which must be one the
  /// transport can carry messages from, and runs with `settings` (by default the calling
  /// thread's processor's: outside a run, the environment's).
  Mesh(MeshShape shape, std::unique_ptr<Communicator> world, std::optional<Device> device = {},
       const Settings& settings = current_processor().settings())
      : shape_(std::move(shape)),
        processor_(checked_device(*world, device), kernel_threads(*world, settings),
                   memory_for(checked_device(*world, device)), settings),
        current_(processor_),
        world_(std::move(world)) {
    if (shape_.num_processors() != world_->size())
      throw MeshError("mesh " + shape_.to_string() + " needs " +
                      std::to_string(shape_.num_processors()) + " processors but the run has " +
                      std::to_string(world_->size()) + " (" + world_->transport() +
                      " transport); make the product of the mesh axis sizes equal the number of "
                      "processors");
    if (shape_.rank() > max_axes)
      throw MeshError("mesh " + shape_.to_string() + " has " + std::to_string(shape_.rank()) +
                      " axes; at most " + std::to_string(max_axes) + " are supported");
    coord_ = shape_.coord_of(world_->rank());
    world_->watch_waits();  // the processor is current now: its waits go through the transport
    processor_.set_label("processor " + std::to_string(world_->rank()) + " of " +
                         std::to_string(world_->size()));
    // Every subset of axes gets its communicator now, while all processors are known to be here:
    // the members of a group share the coordinates outside the set and are ranked by those inside.
    const AxisSet all = (AxisSet{1} << shape_.rank()) - 1;
    for (AxisSet set = 0; set <= all; ++set) {
      int color = 0, key = 0, members = 1;
      for (std::size_t a = 0; a < shape_.rank(); ++a) {
        int& target = (set >> a & 1) ? key : color;
        target = target * shape_[a].size + coord_[a];
        if (set >> a & 1) members *= shape_[a].size;
      }
      groups_.push_back(world_->split_known(color, key, members));
    }
  }

  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int processor() const { return world_->rank(); }
  int num_processors() const { return world_->size(); }
  const MeshCoord& coord() const { return coord_; }
  std::string transport() const { return world_->transport(); }
  /// This processor's context: its device, memory, compute threads and backend state.
  Processor& processor_context() { return processor_; }
  const Device& device() const { return processor_.device(); }

  /// Position of a mesh axis; throws naming the axis and the axes there are.
  std::size_t axis(std::string_view name) const {
    if (auto position = shape_.find(name)) return *position;
    throw MeshError("mesh " + shape_.to_string() + " has no axis " + detail::quote(name) +
                    "; its axes are " + detail::quote_list(shape_.names()));
  }
  int coord(std::string_view axis_name) const { return coord_[axis(axis_name)]; }

  /// Per-processor state that higher layers keep with the mesh (the autodiff tape, profiles):
  /// one default-constructed T per processor, made on first use.
  template <class T>
  T& context() {
    return processor_.state<T>();
  }

  Communicator& world() { return *world_; }

  /// The traffic this processor has sent so far, over the world and every group.
  Communicator::Traffic traffic() const {
    Communicator::Traffic total = world_->traffic();
    for (const auto& group : groups_) total += group->traffic();
    return total;
  }
  /// The communicators of every set of axes (all of them: AxisSet values 0 .. 2^rank - 1).
  std::size_t num_groups() const { return groups_.size(); }
  /// The processors that differ from this one only along the axes in `axes`.
  Communicator& group(AxisSet axes) {
    if (axes >= groups_.size())
      throw MeshError("axis set " + std::to_string(axes) + " names axes outside mesh " +
                      shape_.to_string());
    return *groups_[axes];
  }

 private:
  static Device checked_device(const Communicator& world, const std::optional<Device>& asked) {
    const Device carried = world.device();
    if (!asked || *asked == carried) return carried;
    throw MeshError("the " + world.transport() + " transport carries messages from " +
                    (carried.is_cuda() ? "GPU memory (" + carried.to_string() + ")"
                                       : carried.to_string() + " memory") +
                    ", so its processors cannot compute on device " + asked->to_string() +
                    "; valid pairs are threads or mpi with cpu, and nccl with cuda");
  }
  // Where the processor's blocks come from: its device's memory; for a plan, addresses counted as
  // the pool of the run it stands for would hold them.
  static MemorySource memory_for(const Device& device) {
    if (device.is_plan()) return MemoryPool::address_space_only(device.for_gpus);
    return detail::memory_of(device);
  }
  // The processors of a threads run share this process's cores; an MPI rank shares its node's
  // with the other ranks there.
  static int kernel_threads(const Communicator& world, const Settings& settings) {
    return world.in_one_process() ? threads_per_processor(world.size(), settings)
                                  : threads_per_process(settings);
  }

  MeshShape shape_;
  Processor processor_;  // destroyed last: the communicators and tape may use its memory
  ProcessorScope current_;
  std::unique_ptr<Communicator> world_;
  MeshCoord coord_;
  std::vector<std::unique_ptr<Communicator>> groups_;
};

}  // namespace meshtensor
