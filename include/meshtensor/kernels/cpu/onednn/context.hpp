#pragma once
// What every oneDNN kernel of a processor shares: the engine and stream of the calling processor,
// its share of the cores, its primitives per shape, and the buffers of one call, taken from the
// processor's pool so that they count in its memory and are reused.

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor::kernels::onednn::detail {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

inline Context& context() {
  Processor& processor = current_processor();
  // oneDNN runs on OpenMP, whose thread count belongs to the calling thread: give the processor's
  // kernels its share of the cores, not all of them.
  if (omp_get_max_threads() != processor.compute_threads())
    omp_set_num_threads(processor.compute_threads());
  return processor.state<Context>();
}

// A processor's primitives of one kind (`Tag` tells the kinds apart), per shape: built at a
// shape's first use, kept for the processor's life.
template <class Primitive, class Tag = Primitive>
std::map<std::vector<std::int64_t>, std::unique_ptr<Primitive>>& cache_of() {
  struct Cache {
    std::map<std::vector<std::int64_t>, std::unique_ptr<Primitive>> by_shape;
  };
  return current_processor().state<Cache>().by_shape;
}

// Held while a convolution's primitives are created: the processors of a process (threads) take
// turns. oneDNN 2.6 sizes a brgemm convolution's blocking through a static that every thread shares
// (brg_blocking_t::last_ic_block_size, set while the primitive descriptor is made): a processor
// creating a bfloat16 convolution while another created a float one could build its kernel on
// the other's blocking and compute a wrong block (test_kernels: "convolution primitives made on
// many processors at once"). Each shape is created once per processor, so the wait is short.
inline std::unique_lock<std::mutex> convolution_creation_lock() {
  static std::mutex creating;
  return std::unique_lock<std::mutex>(creating);
}

// Whether to run `pd` on the formats asked for, or let oneDNN choose. Its reference kernels are a
// hundred times slower than its optimised ones. Its im2col + sgemm kernels ("gemm:jit", what it
// picks on AVX2 machines for channels-last transposed convolutions) split their sums by the
// block's size there: a 2-processor prediction then differed from the 1-processor one in the last
// bits. On the formats oneDNN prefers, the split runs equal the whole one bit for bit again
// (tests/unet3d predict_equal), as they do with its direct and brgemm kernels.
template <class PrimitiveDesc>
bool optimised(const PrimitiveDesc& pd) {
  const std::string name = pd.impl_info_str();
  const bool im2col_gemm =
      name.find("gemm:") != std::string::npos && name.find("brgemm") == std::string::npos;
  return name.rfind("ref", 0) != 0 && !im2col_gemm;
}

// A primitive and the scratchpad it needs per call (primitives are built with
// scratchpad_mode::user, so the scratchpad comes from the pool too).
struct Step {
  dnnl::primitive primitive;
  memory::desc scratchpad;
};

// The buffers of one call, from the processor's pool: freed (back to the pool) when it returns.
class CallMemory {
 public:
  memory wrap(const memory::desc& desc, const void* data) {
    return memory(desc, context().engine, const_cast<void*>(data));
  }
  memory fresh(const memory::desc& desc) {
    buffers_.emplace_back((desc.get_size() + sizeof(float) - 1) / sizeof(float));
    return wrap(desc, buffers_.back().data());
  }

 private:
  std::vector<Buffer<float>> buffers_;
};

inline void execute(const Step& step, CallMemory& call, std::unordered_map<int, memory> args) {
  if (step.scratchpad.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = call.fresh(step.scratchpad);
  step.primitive.execute(context().stream, args);
}

}  // namespace meshtensor::kernels::onednn::detail
