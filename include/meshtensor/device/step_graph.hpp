#pragma once
// A step a program repeats (a training step) run as one CUDA graph once its work repeats: the host
// then launches the whole step with one call, where it queued hundreds of kernels and library
// calls. On a processor that computes on a CPU the step simply runs.
//
// The first calls run as they are (they choose algorithms, compile kernels, grow the pool); the
// next is captured: its GPU work becomes the graph, the blocks it allocates come from a pool of the
// graph's own (so that no block the program allocates between launches is one the graph writes),
// and the graph is launched. Every later call launches the graph and runs none of the step's host
// code. So a captured step must queue the same work at every call: the same shapes, reading and
// writing the same tensors (inputs written in place before each call, parameters updated in place),
// with the same host values (a learning rate, a step count) in its kernels' arguments. It may not
// wait for its GPU: its results (tensors it assigned while captured, which every launch writes
// again) are read after run() returns. What a capture cannot take is an Error naming it (that
// call's GPU work does not run).
//
//   StepGraph graph;
//   for (int step = 0; step < steps; ++step) {
//     write_batch_into(x);                 // in place
//     graph.run([&] { loss = train_step(x); });
//     losses.push_back(read_later(loss));  // outside the step
//   }

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/activity.hpp"
#include "meshtensor/device/processor.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/device/cuda.hpp"
#endif

namespace meshtensor {

class StepGraph {
 public:
  /// Runs the first `eager_calls` (at least 1) calls as they are, then captures.
  explicit StepGraph(int eager_calls = 1) : eager_calls_(eager_calls < 1 ? 1 : eager_calls) {}
  ~StepGraph() { drop(); }
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Runs `step` once: as it is, or captured and launched, or by launching the graph.
  template <class Step>
  void run(Step&& step) {
#if defined(MESHTENSOR_WITH_CUDA)
    if (cuda::computes_on_gpu() && ++calls_ > eager_calls_) {
      if (!graph_) capture(step);
      launch();
      return;
    }
#endif
    step();
  }

  /// Whether the step runs as a graph from now on.
  bool captured() const { return graph_ != nullptr; }

 private:
#if defined(MESHTENSOR_WITH_CUDA)
  // While it lives the processor allocates from the graph's pool, keeps the host values it copies
  // for the graph and leaves out collective checks, and its compute stream is captured.
  class Capturing {
   public:
    Capturing(Processor& processor, MemoryPool& pool, std::vector<std::shared_ptr<void>>& staged)
        : processor_(processor), own_(pool) {
      // Relaxed: the pool may take memory from the GPU while the step is captured.
      cuda::check(cudaStreamBeginCapture(cuda::compute_stream(), cudaStreamCaptureModeRelaxed),
                  "cudaStreamBeginCapture");
      cuda::graph_capture().staged = &staged;
      processor_.set_capturing(true);
    }
    ~Capturing() {
      stop();
      cudaGraph_t graph = nullptr;  // a capture left by an exception: ended, its graph dropped
      if (!ended_ && cudaStreamEndCapture(cuda::compute_stream(), &graph) == cudaSuccess && graph)
        (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
    }
    Capturing(const Capturing&) = delete;
    Capturing& operator=(const Capturing&) = delete;

    // The graph captured; an Error where a call broke the capture.
    cudaGraph_t end() {
      stop();
      ended_ = true;
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(cuda::compute_stream(), &graph);
      if (ended == cudaSuccess) return graph;
      (void)cudaGetLastError();
      throw Error(std::string("the step could not be captured as a CUDA graph: ") +
                  cudaGetErrorName(ended) + " (" + cudaGetErrorString(ended) +
                  "); a call it made cannot be captured (a wait, a copy to the host, work on "
                  "another stream outside the capture); run the step without StepGraph");
    }

   private:
    void stop() {
      cuda::graph_capture().staged = nullptr;
      processor_.set_capturing(false);
    }

    Processor& processor_;
    const AllocatingFrom own_;
    bool ended_ = false;
  };

  // Captures the step into a graph; throws, leaving no graph, where it cannot.
  template <class Step>
  void capture(Step& step) {
    Processor& processor = current_processor();
    pool_ = MemoryPool::create(processor.pool().source());
    cudaGraph_t graph = nullptr;
    try {
      Capturing capturing(processor, *pool_, staged_);
      step();
      graph = capturing.end();
    } catch (...) {
      drop();
      throw;
    }
    const cudaError_t made = cudaGraphInstantiate(&graph_, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (made != cudaSuccess) {
      graph_ = nullptr;
      drop();
      cuda::check(made, "cudaGraphInstantiate");
    }
    // The eager calls' blocks, cached for steps that now take the graph's: given back.
    processor.own_pool().trim();
  }

  void launch() {
    cuda::check(cudaGraphLaunch(graph_, cuda::compute_stream()), "cudaGraphLaunch");
    ++device_activity().graph_launches;
    // What the graph's pool holds counts in the processor's memory, as if all in use at once.
    current_processor().own_pool().count_scratch(pool_->stats().peak_held);
  }
#endif

  // Gives back the graph, its staged host values and its pool (once its blocks are freed).
  void drop() {
#if defined(MESHTENSOR_WITH_CUDA)
    if (graph_) (void)cudaGraphExecDestroy(graph_);
    graph_ = nullptr;
#endif
    staged_.clear();
    if (pool_) pool_->release();
    pool_ = nullptr;
  }

  int eager_calls_;
  int calls_ = 0;
#if defined(MESHTENSOR_WITH_CUDA)
  cudaGraphExec_t graph_ = nullptr;
#else
  void* graph_ = nullptr;
#endif
  MemoryPool* pool_ = nullptr;
  std::vector<std::shared_ptr<void>> staged_;
};

}  // namespace meshtensor
