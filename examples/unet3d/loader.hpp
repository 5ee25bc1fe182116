#pragma once
// The training batches of a phantom run, each drawn by a worker thread while the step before it
// trains, as a data loader's workers do: a step waits for its data only where drawing it takes
// longer than a step. The worker draws this processor's blocks into the host's memory and touches
// no mesh; the tensors are made on the step's own thread.

#include <array>
#include <cstdint>
#include <future>
#include <string>

#include <meshtensor/meshtensor.hpp>

#include "phantom.hpp"

namespace unet3d {

class PhantomLoader {
 public:
  /// Batches of `batch` volumes of `size` from the stream "train" of `seed`, for steps before
  /// `end`.
  PhantomLoader(mt::Mesh& mesh, const mt::Layout& layout, std::uint64_t seed, std::int64_t batch,
                const std::array<std::int64_t, 3>& size, std::int64_t end)
      : mesh_(mesh),
        layouts_(mesh.shape(), layout, batch, size),
        me_(mesh.coord()),
        seed_(seed),
        end_(end) {
    layouts_.check_fits(mesh);
  }

  PhantomLoader(const PhantomLoader&) = delete;
  PhantomLoader& operator=(const PhantomLoader&) = delete;

  /// Step `step`'s batch (volumes step * batch onwards); the next step's starts drawing.
  Batch batch(std::int64_t step) {
    // The first step, or one after a resume, draws in line.
    BatchBlocks blocks = next_.valid() && next_step_ == step ? next_.get() : draw(step);
    if (step + 1 < end_) {
      next_step_ = step + 1;
      next_ = std::async(std::launch::async, [this, next = step + 1] { return draw(next); });
    }
    return to_batch(mesh_, blocks);
  }

 private:
  BatchBlocks draw(std::int64_t step) const {
    const std::int64_t batch = layouts_.input.shape()[0].size;
    return draw_batch_blocks(layouts_, me_, seed_, "train", step * batch);
  }

  mt::Mesh& mesh_;
  const BatchLayouts layouts_;  // copies: the worker reads them while the step runs
  const mt::MeshCoord me_;
  const std::uint64_t seed_;
  const std::int64_t end_;
  std::future<BatchBlocks> next_;
  std::int64_t next_step_ = -1;
};

}  // namespace unet3d
