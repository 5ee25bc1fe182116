#pragma once
// One oneDNN pass of a kernel run on meshtensor's plain (channels-last) arrays: its primitive, the
// two tensors it reads and the one it writes, each reordered to and from the format the primitive
// chose where that differs.

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <numeric>
#include <utility>
#include <vector>

#include "meshtensor/kernels/cpu/onednn/context.hpp"

namespace meshtensor::kernels::onednn::detail {

// A tensor an op reads or writes: meshtensor's plain layout and the format the primitive wants.
struct Operand {
  memory::desc plain, chosen;
  bool reordered() const { return chosen != plain; }
};

// One pass (forward, backward data or backward weights): its primitive, the two tensors it reads
// and the one it writes.
struct Pass {
  Step step;
  Operand first, second, result;
  // False where oneDNN has no kernel optimised() accepts for this pass on any format (on AVX2,
  // oneDNN 2.6 has only im2col + gemm for a 3-D convolution's weight gradient): the pass runs
  // another way (weight_planes.hpp, meshtensor's blocked kernels).
  bool optimised = false;
};

// The memory a primitive reads for `o`: the user's data, reordered if the primitive wants another
// format.
inline memory read(CallMemory& call, const Operand& o, const void* data) {
  memory user = call.wrap(o.plain, data);
  if (!o.reordered()) return user;
  memory chosen = call.fresh(o.chosen);
  dnnl::reorder(user, chosen).execute(context().stream, user, chosen);
  return chosen;
}

// The memory a primitive writes for `o`; finish() copies a reordered result back.
inline memory write(CallMemory& call, const Operand& o, void* data) {
  return o.reordered() ? call.fresh(o.chosen) : call.wrap(o.plain, data);
}

inline void finish(CallMemory& call, const Operand& o, memory written, void* data) {
  if (!o.reordered()) return;
  memory user = call.wrap(o.plain, data);
  dnnl::reorder(written, user).execute(context().stream, written, user);
}

// Runs a pass on the caller's plain arrays (of the element types the pass was built for): reads
// `first` and `second`, writes `result`.
inline void run(const Pass& pass, const std::array<int, 3>& args, const void* first,
                const void* second, void* result) {
  CallMemory call;
  auto written = write(call, pass.result, result);
  execute(pass.step, call,
          {{args[0], read(call, pass.first, first)},
           {args[1], read(call, pass.second, second)},
           {args[2], written}});
  finish(call, pass.result, written, result);
  context().stream.wait();
}

// The blocks (bytes each) a call of `pass` takes from the pool beside its operands, in the order
// run() takes them: the result's and the operands' copies in the formats the primitive chose, and
// its scratchpad (each a whole number of floats, as CallMemory holds them).
inline std::vector<std::size_t> call_blocks(const Pass& pass) {
  std::vector<std::size_t> blocks;
  const auto take = [&](std::size_t bytes) {
    if (bytes > 0) blocks.push_back((bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float));
  };
  if (pass.result.reordered()) take(pass.result.chosen.get_size());
  for (const Operand* o : {&pass.first, &pass.second})
    if (o->reordered()) take(o->chosen.get_size());
  take(pass.step.scratchpad.get_size());
  return blocks;
}

// Keeps in `largest` whichever of it and `blocks` holds more bytes in all (a plan holds the
// largest of a call's slabs or taps).
inline void keep_largest(std::vector<std::size_t>& largest, std::vector<std::size_t> blocks) {
  const auto total = [](const std::vector<std::size_t>& b) {
    return std::accumulate(b.begin(), b.end(), std::size_t{0});
  };
  if (total(blocks) > total(largest)) largest = std::move(blocks);
}

constexpr std::array<int, 3> forward_args{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
constexpr std::array<int, 3> backward_data_args{DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS,
                                                DNNL_ARG_DIFF_SRC};
constexpr std::array<int, 3> backward_weights_args{DNNL_ARG_SRC, DNNL_ARG_DIFF_DST,
                                                   DNNL_ARG_DIFF_WEIGHTS};

}  // namespace meshtensor::kernels::onednn::detail
