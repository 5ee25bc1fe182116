#pragma once
// The emulated GPU's inner interface, shared by the libraries that stand in for CUDA's (runtime,
// cuDNN, cuBLAS, NCCL; see README.md beside this file): what memory a pointer is, and the streams,
// whose work runs on the host in stream order, no earlier than CUDA allows and as late as it
// allows: when the host waits for it. A program that reads a result before waiting for it reads
// what was there before, as it might on a GPU, and its tests fail.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>

namespace emulated_gpu {

/// Where a pointer points, as the GPU sees it.
enum class Memory {
  host,     // pageable host memory: no kernel or library call may touch it
  device,   // cudaMalloc / cudaMallocAsync
  managed,  // cudaMallocManaged: the host and the GPU share it
};

/// What `p` points into (host for null and for memory the emulated runtime did not allocate).
Memory memory_of(const void* p);

/// Whether a GPU call may read or write `p`: null, device or managed memory.
inline bool device_accessible(const void* p) { return !p || memory_of(p) != Memory::host; }

/// Work on a stream that may take several steps: a message in flight finishes when its peer has
/// done its part. `advance` does what it can and says whether the work is finished.
class Operation {
 public:
  virtual ~Operation() = default;
  virtual bool advance() = 0;
  /// Whether it reads or writes memory the host may use: what work_queued() counts.
  virtual bool touches_memory() const { return true; }
};

/// Queues `work` on `stream`, to run once everything queued before it on that stream has run (or,
/// on a stream being captured into a graph, at each launch of the graph: `work` runs again).
void enqueue(cudaStream_t stream, std::function<void()> work);

/// The same for work that touches no memory the host may use (a free, a prefetch): the host does
/// not race with it.
void enqueue_bookkeeping(cudaStream_t stream, std::function<void()> work);

/// Queues the operation `make` makes on `stream`; it starts at once when nothing is queued before
/// it there (a GPU would start it then too), which is how messages between processes make progress
/// while each process waits for something else. A stream being captured into a graph keeps `make`,
/// which makes a fresh operation at each launch of the graph.
void enqueue_operation(cudaStream_t stream, std::function<std::unique_ptr<Operation>()> make);

/// Whether any stream has work queued that has not finished and touches memory: the host touching
/// the GPU's memory now, without waiting, races with it.
bool work_queued();

/// Counts a call of `library` ("kernel", "cudnn", "cublas", "nccl"), "graphs" (a graph launched),
/// or "waits" (the host waiting for a stream or event with work still to run), for the summary that
/// a process prints on stderr at its end when MESHTENSOR_EMULATED_GPU_SUMMARY is set, so a test can
/// tell that its program computed and communicated on the GPU rather than on the host, and how
/// often it waited.
void count(const char* library);

/// Reports an error that a GPU would raise while running a stream's work (a kernel reading host
/// memory): printed with `what`, and returned by every later call, as CUDA's sticky errors are.
void fail(cudaError_t error, const std::string& what);

}  // namespace emulated_gpu
