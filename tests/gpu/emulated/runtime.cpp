// The emulated CUDA runtime (libcudart.so.13): the calls meshtensor makes, with their documented
// semantics, on the host.
//  - GPUs: MESHTENSOR_EMULATED_GPUS of them (8 unless set; 0 means none), each with its own UUID,
//    compute capability 9.0; the current one is per host thread. The driver supports this
//    runtime's CUDA version, or MESHTENSOR_EMULATED_DRIVER_VERSION (12080 for 12.8).
//  - Memory: device memory (cudaMalloc, cudaMallocAsync) starts as NaN bytes, so a read of
//    anything never written shows in results; managed memory is host memory that says it is
//    managed; pointers are looked up to tell device, managed and host memory apart.
//  - Streams run their work when the host waits for it (cudaStreamSynchronize, cudaStreamQuery,
//    cudaEventQuery on an event recorded after it, cudaFree), in order. A copy from pageable host
//    memory reads it at the call, as the driver's staging does; every other copy, memset and
//    kernel waits in its stream. The legacy default stream runs its work at once. A stream told to
//    wait for an event (cudaStreamWaitEvent) runs nothing after that point before the event's
//    stream has run what came before the event.
//  - Kernels come from NVRTC's emulation (nvrtc.cpp) as "PTX" naming them, and run as host code.
//  - Graphs: a stream being captured (cudaStreamBeginCapture) keeps its work, and that of the
//    streams that join it through an event, as the graph's nodes in the order they were queued, a
//    valid order of CUDA's graph; cudaGraphLaunch queues them on a stream, made afresh. What CUDA
//    refuses while a stream is captured is refused, and breaks the capture: a wait for it, a
//    dependency on work outside it, a copy from pageable host memory (a replay would read the
//    memory again, long after the call), and outside relaxed mode cudaMalloc, cudaFree and
//    cudaMemcpy.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "device.hpp"
#include "kernels.hpp"
#include "residency.hpp"

namespace emulated_gpu {
// A graph's node: makes the operation it stands for, afresh at each launch.
using Node = std::function<std::unique_ptr<Operation>()>;

// Device memory a graph's capture took (cudaMallocAsync while capturing): the graph's, for as long
// as it or an instance of it lives.
struct GraphMemory {
  std::vector<void*> blocks;
  ~GraphMemory();
};

// A capture sequence: the graph it builds, and whether a refused call broke it.
struct Capture {
  cudaGraph_t graph = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::string broken;  // empty: not broken
};
}  // namespace emulated_gpu

struct CUstream_st {
  std::deque<std::unique_ptr<emulated_gpu::Operation>> queue;
  std::uint64_t queued = 0;                        // operations ever queued
  std::uint64_t finished = 0;                      // of those, finished (in order)
  std::shared_ptr<emulated_gpu::Capture> capture;  // set while the stream is being captured
};

struct CUevent_st {
  CUstream_st* stream = nullptr;  // where it was last recorded; null: never, or its stream is gone
  std::uint64_t after = 0;        // it completes when the stream has finished this many
  // When the stream reached it (set by a stamp queued with the record), for cudaEventElapsedTime.
  std::shared_ptr<std::optional<std::chrono::steady_clock::time_point>> reached;
  std::weak_ptr<emulated_gpu::Capture> captured;  // the capture it was last recorded in
};

struct CUgraph_st {
  std::vector<emulated_gpu::Node> nodes;
  std::shared_ptr<emulated_gpu::GraphMemory> memory = std::make_shared<emulated_gpu::GraphMemory>();
};

struct CUgraphExec_st {
  std::vector<emulated_gpu::Node> nodes;
  std::shared_ptr<emulated_gpu::GraphMemory> memory;
};

struct CUlib_st {
  std::set<std::string> kernels;  // what the "PTX" names
};

namespace emulated_gpu {
namespace {

struct Allocation {
  std::size_t bytes;
  Memory memory;
};

// The emulator's whole state, behind one lock: the programs that use it call CUDA from one thread
// per process, but nothing here should break if they do not.
std::recursive_mutex state_lock;
std::map<std::uintptr_t, Allocation> allocations;  // by first byte
std::set<CUstream_st*> streams;
CUstream_st legacy_stream;        // stream 0: runs its work at once
std::atomic<long> unfinished{0};  // operations queued on any stream, not finished yet
cudaError_t sticky = cudaSuccess;
std::map<std::string, long> calls;  // by library, for the summary
thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

using Lock = std::lock_guard<std::recursive_mutex>;

int driver_version() {
  const char* text = std::getenv("MESHTENSOR_EMULATED_DRIVER_VERSION");
  return text ? std::atoi(text) : CUDART_VERSION;
}

int gpu_count() {
  static const int count = [] {
    const char* text = std::getenv("MESHTENSOR_EMULATED_GPUS");
    return text ? std::max(0, std::atoi(text)) : 8;
  }();
  return count;
}

// Records `error` as the calling thread's last error and returns it.
cudaError_t report(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

// The sticky error if there is one, else `error`.
cudaError_t outcome(cudaError_t error = cudaSuccess) {
  return report(sticky != cudaSuccess ? sticky : error);
}

class Work final : public Operation {
 public:
  Work(std::function<void()> work, bool touches_memory)
      : work_(std::move(work)), touches_memory_(touches_memory) {}
  bool advance() override {
    work_();
    return true;
  }
  bool touches_memory() const override { return touches_memory_; }

 private:
  std::function<void()> work_;
  bool touches_memory_;
};

CUstream_st* stream_of(cudaStream_t stream) {
  // 0 is the legacy default stream, 0x1 and 0x2 its named handles (cudaStreamLegacy,
  // cudaStreamPerThread).
  if (reinterpret_cast<std::uintptr_t>(stream) <= 2) return &legacy_stream;
  return stream;
}

// Runs `stream`'s work until `until` operations have finished there; without `block` stops at
// the first that is not finished yet (a message whose peer has not done its part) and says so.
void advance_other_streams(CUstream_st* stream);

bool run_stream(CUstream_st* stream, std::uint64_t until, bool block) {
  while (stream->finished < until) {
    Operation& next = *stream->queue.front();
    residency::begin_gpu_work();
    const bool finished = next.advance();
    residency::end_gpu_work();
    if (!finished) {
      if (!block) return false;
      // A GPU runs its streams at once: while this one waits (a collective for its peers), the
      // others go on, or two processors could each wait for a collective the other has queued
      // behind it on another stream.
      advance_other_streams(stream);
      std::this_thread::yield();
      continue;
    }
    if (next.touches_memory()) --unfinished;
    stream->queue.pop_front();
    ++stream->finished;
  }
  return true;
}

// Page-locked host memory (cudaMallocHost) by first byte: bytes. Host memory to the GPU, but a
// graph may copy to and from it.
std::map<std::uintptr_t, std::size_t> pinned;

bool pageable(const void* p) {
  if (memory_of(p) != Memory::host) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto after = pinned.upper_bound(at);
  return after == pinned.begin() || at >= std::prev(after)->first + std::prev(after)->second;
}

// The captures under way; while one that is not relaxed is, calls that may wait (cudaMalloc,
// cudaFree, cudaMemcpy) are refused.
std::set<std::shared_ptr<Capture>> captures;

// Breaks `capture` because of `what`, as CUDA invalidates a capture sequence: its end reports it.
cudaError_t break_capture(Capture& capture, cudaError_t error, const std::string& what) {
  if (capture.broken.empty()) capture.broken = what;
  return error;
}

// A call that may wait for the GPU, refused while a capture that is not relaxed is under way.
cudaError_t refused_while_capturing(const char* call) {
  for (const auto& capture : captures)
    if (capture->mode != cudaStreamCaptureModeRelaxed)
      return break_capture(*capture, cudaErrorStreamCaptureUnsupported,
                           std::string(call) + " was called while a stream was being captured");
  return cudaSuccess;
}

void push(CUstream_st* stream, std::unique_ptr<Operation> operation) {
  if (operation->touches_memory()) ++unfinished;
  stream->queue.push_back(std::move(operation));
  ++stream->queued;
}

void advance_other_streams(CUstream_st* stream) {
  for (CUstream_st* s : streams)
    if (s != stream) run_stream(s, s->queued, /*block=*/false);
}

void run_all_streams() {
  for (bool done = false; !done; std::this_thread::yield()) {
    done = true;
    for (CUstream_st* s : streams) done = run_stream(s, s->queued, /*block=*/false) && done;
  }
}

// The device memory a process may hold (MESHTENSOR_EMULATED_GPU_MEMORY bytes; unlimited unless
// set), and what it holds: a card's capacity, for the errors of a program that asks for more.
std::size_t device_memory_limit() {
  static const std::size_t limit = [] {
    const char* text = std::getenv("MESHTENSOR_EMULATED_GPU_MEMORY");
    return text ? std::size_t(std::strtoull(text, nullptr, 10)) : ~std::size_t{0};
  }();
  return limit;
}
std::size_t device_bytes = 0;

void* allocate(std::size_t bytes, Memory memory) {
  void* p = nullptr;
  if (memory != Memory::host && bytes > device_memory_limit() - device_bytes) return nullptr;
  if (memory == Memory::managed) {
    p = residency::map_managed(bytes);  // whole pages
  } else if (residency::tracking()) {
    p = residency::map_device(bytes);  // whole pages, out of the host's reach
  } else {
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
    p = std::aligned_alloc(256, rounded);  // cudaMalloc's alignment
    if (p) std::memset(p, 0xFF, rounded);  // NaN floats and doubles
  }
  if (p) {
    allocations[reinterpret_cast<std::uintptr_t>(p)] = {bytes, memory};
    device_bytes += bytes;
  }
  return p;
}

bool release(void* p) {
  const auto found = allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (found == allocations.end()) return false;
  if (found->second.memory == Memory::managed ||
      (found->second.memory == Memory::device && residency::tracking()))
    residency::unmap_managed(p, found->second.bytes);
  else
    std::free(p);
  device_bytes -= found->second.bytes;
  allocations.erase(found);
  return true;
}

bool valid_device(int device) { return device >= 0 && device < gpu_count(); }

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;  // CUDA's own
};

// The errors the emulator returns, named as CUDA names them.
const ErrorText& describe(cudaError_t code) {
  static const ErrorText known[] = {
      {cudaSuccess, "cudaSuccess", "no error"},
      {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
      {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
      {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
      {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
      {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
       "CUDA driver version is insufficient for CUDA runtime version"},
      {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
      {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
       "an illegal memory access was encountered"},
      {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
      {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
      {cudaErrorIllegalState, "cudaErrorIllegalState",
       "the operation cannot be performed in the "
       "present state"},
      {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
       "operation not permitted when stream is capturing"},
      {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
       "operation failed due to a previous error during capture"},
      {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
       "capture was not initiated in this stream"},
      {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
       "dependency created on uncaptured work in another stream"},
      {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
       "operation would make the legacy stream depend on a capturing blocking stream"},
      {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
       "operation not permitted on an event last recorded in a capturing stream"},
  };
  static const ErrorText unknown{cudaErrorUnknown, "cudaErrorUnknown", "unknown error"};
  for (const auto& e : known)
    if (e.code == code) return e;
  return unknown;
}

}  // namespace

Memory memory_of(const void* p) {
  Lock lock(state_lock);
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto after = allocations.upper_bound(at);
  if (!p || after == allocations.begin()) return Memory::host;
  const auto& [first, allocation] = *std::prev(after);
  return at < first + std::max<std::size_t>(allocation.bytes, 1) ? allocation.memory : Memory::host;
}

namespace {
void enqueue_work(cudaStream_t handle, std::function<void()> work, bool touches_memory) {
  Lock lock(state_lock);
  CUstream_st* stream = stream_of(handle);
  if (stream->capture) {
    stream->capture->graph->nodes.push_back(
        [work, touches_memory] { return std::make_unique<Work>(work, touches_memory); });
    return;
  }
  push(stream, std::make_unique<Work>(std::move(work), touches_memory));
  if (stream == &legacy_stream) run_stream(stream, stream->queued, /*block=*/true);
}

void enqueue_now(CUstream_st* stream, std::unique_ptr<Operation> operation) {
  const bool idle = stream->queue.empty();
  push(stream, std::move(operation));
  if (idle || stream == &legacy_stream)
    run_stream(stream, stream->queued, /*block=*/stream == &legacy_stream);
}
}  // namespace

GraphMemory::~GraphMemory() {
  Lock lock(state_lock);
  run_all_streams();  // a launch may still use them
  for (void* p : blocks) release(p);
}

void enqueue(cudaStream_t handle, std::function<void()> work) {
  enqueue_work(handle, std::move(work), /*touches_memory=*/true);
}

void enqueue_bookkeeping(cudaStream_t handle, std::function<void()> work) {
  enqueue_work(handle, std::move(work), /*touches_memory=*/false);
}

void enqueue_operation(cudaStream_t handle, std::function<std::unique_ptr<Operation>()> make) {
  Lock lock(state_lock);
  CUstream_st* stream = stream_of(handle);
  if (stream->capture)
    stream->capture->graph->nodes.push_back(std::move(make));
  else
    enqueue_now(stream, make());
}

bool work_queued() { return unfinished.load() > 0; }

void count(const char* library) {
  Lock lock(state_lock);
  ++calls[library];
}

namespace {
// Prints the summary when the process ends.
struct Summary {
  ~Summary() {
    if (std::getenv("MESHTENSOR_EMULATED_GPU_SUMMARY")) {
      std::string text = "emulated GPU summary:";
      for (const char* library : {"kernel", "cudnn", "cublas", "nccl", "graphs", "waits"})
        text += std::string(" ") + library + "=" + std::to_string(calls[library]);
      std::fprintf(stderr, "%s\n", text.c_str());
    }
    residency::print_summary();  // when pages are tracked
  }
} summary;
}  // namespace

void fail(cudaError_t error, const std::string& what) {
  Lock lock(state_lock);
  std::fprintf(stderr, "emulated GPU: %s\n", what.c_str());
  if (sticky == cudaSuccess) sticky = error;
}

}  // namespace emulated_gpu

using namespace emulated_gpu;

extern "C" {

// --- errors and versions -----------------------------------------------------------------------
const char* CUDARTAPI cudaGetErrorName(cudaError_t error) { return describe(error).name; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t error) { return describe(error).text; }
cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t error = sticky != cudaSuccess ? sticky : last_error;
  last_error = cudaSuccess;
  return error;
}
cudaError_t CUDARTAPI cudaDriverGetVersion(int* version) {
  *version = driver_version();
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// --- devices -----------------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 0;
  if (driver_version() < CUDART_VERSION) return report(cudaErrorInsufficientDriver);
  *count = gpu_count();
  return report(*count ? cudaSuccess : cudaErrorNoDevice);
}
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (!valid_device(device)) return report(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (!valid_device(device)) return report(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  std::snprintf(properties->name, sizeof properties->name, "meshtensor emulated GPU");
  std::memcpy(properties->uuid.bytes, "emulated-gpu", 12);  // then the ordinal: 16 bytes
  std::memcpy(properties->uuid.bytes + 12, &device, sizeof device);
  properties->pciBusID = device + 1;
  properties->major = 9;
  properties->minor = 0;
  properties->totalGlobalMem = std::size_t(80) << 30;
  properties->multiProcessorCount = 1;
  properties->warpSize = 32;
  properties->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!valid_device(device)) return report(cudaErrorInvalidDevice);
  switch (attribute) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    default:
      return report(cudaErrorInvalidValue);
  }
}
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  Lock lock(state_lock);
  if (const auto refused = refused_while_capturing("cudaDeviceSynchronize")) return report(refused);
  run_all_streams();
  return outcome();
}

// --- memory ------------------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaMalloc(void** p, size_t bytes) {
  Lock lock(state_lock);
  *p = nullptr;
  if (const auto refused = refused_while_capturing("cudaMalloc")) return report(refused);
  *p = allocate(bytes, Memory::device);
  return outcome(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}
cudaError_t CUDARTAPI cudaMallocManaged(void** p, size_t bytes, unsigned int) {
  Lock lock(state_lock);
  *p = allocate(bytes, Memory::managed);
  return outcome(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}
cudaError_t CUDARTAPI cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  Lock lock(state_lock);
  *p = allocate(bytes, Memory::device);  // usable in the stream's order, so at once here
  // Taken while capturing: the graph's, at the same address at every launch.
  if (*p && stream_of(stream)->capture)
    stream_of(stream)->capture->graph->memory->blocks.push_back(*p);
  return outcome(*p ? cudaSuccess : cudaErrorMemoryAllocation);
}
// Page-locked host memory: host memory to the emulator (copies into it run in stream order, as a
// GPU's copy engine fills it; the host reading it before waiting reads stale bytes).
cudaError_t CUDARTAPI cudaMallocHost(void** p, size_t bytes) {
  *p = bytes ? std::malloc(bytes) : nullptr;
  Lock lock(state_lock);
  if (*p) pinned[reinterpret_cast<std::uintptr_t>(*p)] = bytes;
  return outcome(*p || !bytes ? cudaSuccess : cudaErrorMemoryAllocation);
}
cudaError_t CUDARTAPI cudaFreeHost(void* p) {
  {
    Lock lock(state_lock);
    run_all_streams();  // as cudaFree: no queued copy still writes it
    pinned.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::free(p);
  return outcome();
}
cudaError_t CUDARTAPI cudaFree(void* p) {
  Lock lock(state_lock);
  if (!p) return outcome();
  if (const auto refused = refused_while_capturing("cudaFree")) return report(refused);
  if (unfinished > 0) count("waits");  // the host stops until the GPU catches up
  run_all_streams();  // cudaFree waits for the device, so no queued work still uses p
  return outcome(release(p) ? cudaSuccess : cudaErrorInvalidValue);
}
cudaError_t CUDARTAPI cudaFreeAsync(void* p, cudaStream_t stream) {
  Lock lock(state_lock);
  if (!p) return outcome();
  if (memory_of(p) != Memory::device) return report(cudaErrorInvalidValue);
  if (const auto& capture = stream_of(stream)->capture) {
    // Memory the capture took stays the graph's; other memory would be freed at every launch.
    const auto& own = capture->graph->memory->blocks;
    if (std::find(own.begin(), own.end(), p) != own.end()) return outcome();
    return report(break_capture(*capture, cudaErrorStreamCaptureUnsupported,
                                "cudaFreeAsync of memory allocated outside the capture"));
  }
  enqueue_bookkeeping(stream, [p] { release(p); });
  return outcome();
}
cudaError_t CUDARTAPI cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  *attributes = cudaPointerAttributes{};
  switch (memory_of(p)) {
    case Memory::host:
      attributes->type = cudaMemoryTypeUnregistered;
      break;
    case Memory::device:
      attributes->type = cudaMemoryTypeDevice;
      break;
    case Memory::managed:
      attributes->type = cudaMemoryTypeManaged;
      break;
  }
  if (attributes->type != cudaMemoryTypeUnregistered) {
    attributes->device = current_device;
    attributes->devicePointer = const_cast<void*>(p);
    if (attributes->type == cudaMemoryTypeManaged)
      attributes->hostPointer = attributes->devicePointer;
  }
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void* p, size_t bytes, cudaMemLocation,
                                           unsigned int, cudaStream_t stream) {
  if (bytes && memory_of(p) != Memory::managed) return report(cudaErrorInvalidValue);
  // The pages are the GPU's from now: host code touching them before it waits for the stream
  // races with the work queued on it, and is reported.
  residency::to_gpu(p, bytes);
  enqueue_bookkeeping(stream, [p, bytes] { residency::to_gpu(p, bytes); });
  return outcome();
}

cudaError_t CUDARTAPI cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind) {
  Lock lock(state_lock);
  if (const auto refused = refused_while_capturing("cudaMemcpy")) return report(refused);
  // The legacy stream waits for blocking streams only; meshtensor's are all non-blocking.
  residency::begin_gpu_work();  // a copy engine's, not the host's
  std::memcpy(to, from, bytes);
  residency::end_gpu_work();
  return outcome();
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void* to, const void* from, size_t bytes, cudaMemcpyKind,
                                      cudaStream_t stream) {
  Lock lock(state_lock);
  if (bytes == 0) return outcome();
  if (const auto& capture = stream_of(stream)->capture; capture && (pageable(from) || pageable(to)))
    return report(break_capture(*capture, cudaErrorStreamCaptureUnsupported,
                                "cudaMemcpyAsync between the GPU and pageable host memory was "
                                "captured: each launch of the graph would touch that memory "
                                "again, long after the call"));
  if (memory_of(from) == Memory::host) {
    // The driver stages pageable memory before returning: the caller may reuse it at once.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(from),
                                                      static_cast<const char*>(from) + bytes);
    enqueue(stream, [to, staged] { std::memcpy(to, staged->data(), staged->size()); });
  } else {
    enqueue(stream, [to, from, bytes] { std::memcpy(to, from, bytes); });
  }
  return outcome();
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  Lock lock(state_lock);
  if (bytes && memory_of(p) == Memory::host) {
    fail(cudaErrorIllegalAddress, "cudaMemsetAsync on host memory");
    return outcome();
  }
  enqueue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
  return outcome();
}

// --- streams and events ------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  Lock lock(state_lock);
  *stream = new CUstream_st;
  streams.insert(*stream);
  return outcome();
}
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  Lock lock(state_lock);
  if (!streams.count(stream)) return report(cudaErrorInvalidResourceHandle);
  run_stream(stream, stream->queued, /*block=*/true);  // queued work still runs, as on a GPU
  streams.erase(stream);
  delete stream;
  return outcome();
}
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  Lock lock(state_lock);
  CUstream_st* s = stream_of(stream);
  if (s->capture)
    return report(break_capture(*s->capture, cudaErrorStreamCaptureUnsupported,
                                "cudaStreamSynchronize of a stream being captured"));
  if (s->finished < s->queued) count("waits");  // the host stops until the GPU catches up
  run_stream(s, s->queued, /*block=*/true);
  return outcome();
}
cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  Lock lock(state_lock);
  CUstream_st* s = stream_of(stream);
  if (s->capture)
    return report(break_capture(*s->capture, cudaErrorStreamCaptureUnsupported,
                                "cudaStreamQuery of a stream being captured"));
  if (run_stream(s, s->queued, /*block=*/false)) return outcome();
  advance_other_streams(s);  // the GPU runs every stream while the host polls one
  return outcome(run_stream(s, s->queued, /*block=*/false) ? cudaSuccess : cudaErrorNotReady);
}
cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Lock lock(state_lock);
  if (const auto& capture = stream_of(stream)->capture) {
    // A point of the capture, which other streams may wait for (joining it); no node of its own.
    event->captured = capture;
    event->stream = nullptr;
    event->reached = nullptr;
    return outcome();
  }
  event->captured.reset();
  auto reached = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
  enqueue_bookkeeping(stream, [reached] { *reached = std::chrono::steady_clock::now(); });
  event->reached = reached;
  event->stream = stream_of(stream);
  event->after = event->stream->queued;
  return outcome();
}
cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Lock lock(state_lock);
  if (!start->reached || !end->reached) return outcome(cudaErrorInvalidResourceHandle);
  if (!*start->reached || !*end->reached) return outcome(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(**end->reached - **start->reached).count();
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  Lock lock(state_lock);
  if (const auto capture = event->captured.lock())
    return report(break_capture(*capture, cudaErrorCapturedEvent,
                                "cudaEventQuery of an event recorded in the capture"));
  if (!event->stream || !streams.count(event->stream)) return outcome();
  if (run_stream(event->stream, event->after, /*block=*/false)) return outcome();
  advance_other_streams(event->stream);  // the GPU runs every stream while the host polls one
  return outcome(run_stream(event->stream, event->after, /*block=*/false) ? cudaSuccess
                                                                          : cudaErrorNotReady);
}
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Lock lock(state_lock);
  CUstream_st* waiting = stream_of(stream);
  if (const auto captured = event->captured.lock(); captured && captures.count(captured)) {
    // The stream joins the capture: its work from here is the graph's, after the event's.
    if (waiting->capture && waiting->capture != captured)
      return report(break_capture(*captured, cudaErrorStreamCaptureMerge,
                                  "cudaStreamWaitEvent would merge two captures"));
    if (waiting == &legacy_stream) return report(cudaErrorStreamCaptureImplicit);
    waiting->capture = captured;
    return outcome();
  }
  if (waiting->capture)
    return report(break_capture(*waiting->capture, cudaErrorStreamCaptureIsolation,
                                "cudaStreamWaitEvent in a capture, for work outside it"));
  // What the event marks now: later records of it do not change what this wait waits for.
  CUstream_st* other = event->stream;
  const std::uint64_t after = event->after;
  if (!other || !streams.count(other)) return outcome();
  class Wait final : public Operation {
   public:
    Wait(CUstream_st* other, std::uint64_t after) : other_(other), after_(after) {}
    bool advance() override {
      return !streams.count(other_) || run_stream(other_, after_, /*block=*/false);
    }
    bool touches_memory() const override { return false; }

   private:
    CUstream_st* other_;
    std::uint64_t after_;
  };
  enqueue_now(waiting, std::make_unique<Wait>(other, after));
  return outcome();
}
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  Lock lock(state_lock);
  if (const auto capture = event->captured.lock())
    return report(break_capture(*capture, cudaErrorCapturedEvent,
                                "cudaEventSynchronize of an event recorded in the capture"));
  if (event->stream && streams.count(event->stream) && event->stream->finished < event->after)
    count("waits");
  if (event->stream && streams.count(event->stream))
    run_stream(event->stream, event->after, /*block=*/true);
  return outcome();
}

// --- kernels -----------------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption*,
                                          void**, unsigned int, cudaLibraryOption*, void**,
                                          unsigned int) {
  // The "PTX" of the emulated NVRTC: a line per kernel, "kernel <name>".
  const std::string text(static_cast<const char*>(code));
  if (text.rfind("// meshtensor emulated PTX", 0) != 0) return report(cudaErrorInvalidValue);
  auto loaded = std::make_unique<CUlib_st>();
  std::istringstream lines(text);
  std::string word, name;
  while (lines >> word)
    if (word == "kernel" && lines >> name) loaded->kernels.insert(name);
  *library = loaded.release();  // kept for the process, as meshtensor keeps its libraries
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library,
                                           const char* name) {
  const Kernel* found = library->kernels.count(name) ? find_kernel(name) : nullptr;
  if (!found) return report(cudaErrorSymbolNotFound);
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<Kernel*>(found));
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaLaunchKernel(const void* function, dim3 grid, dim3 block,
                                       void** arguments, size_t, cudaStream_t stream) {
  Lock lock(state_lock);
  if (grid.x * grid.y * grid.z == 0 || block.x * block.y * block.z == 0 ||
      block.x * block.y * block.z > 1024)
    return report(cudaErrorInvalidValue);  // cudaErrorInvalidConfiguration on a GPU
  const auto* kernel = static_cast<const Kernel*>(function);
  std::string error;
  Launch launch = kernel->bind(arguments, grid, &error);
  if (!launch) {
    fail(cudaErrorIllegalAddress, error);
    return outcome();
  }
  count("kernel");
  enqueue(stream, std::move(launch));
  return outcome();
}

// --- graphs ------------------------------------------------------------------------------------
cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Lock lock(state_lock);
  CUstream_st* s = stream_of(stream);
  if (s == &legacy_stream) return report(cudaErrorStreamCaptureUnsupported);
  if (s->capture) return report(cudaErrorIllegalState);
  auto capture = std::make_shared<Capture>();
  capture->graph = new CUgraph_st;
  capture->mode = mode;
  captures.insert(capture);
  s->capture = capture;
  return outcome();
}
cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Lock lock(state_lock);
  *graph = nullptr;
  CUstream_st* s = stream_of(stream);
  if (!s->capture) return report(cudaErrorIllegalState);
  const std::shared_ptr<Capture> capture = s->capture;
  for (CUstream_st* other : streams)
    if (other->capture == capture) other->capture = nullptr;
  captures.erase(capture);
  if (!capture->broken.empty()) {
    std::fprintf(stderr, "emulated GPU: the capture was invalidated: %s\n",
                 capture->broken.c_str());
    delete capture->graph;
    return report(cudaErrorStreamCaptureInvalidated);
  }
  *graph = capture->graph;
  return outcome();
}
cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  Lock lock(state_lock);
  const auto& capture = stream_of(stream)->capture;
  *status = !capture                  ? cudaStreamCaptureStatusNone
            : capture->broken.empty() ? cudaStreamCaptureStatusActive
                                      : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           unsigned long long) {
  Lock lock(state_lock);
  if (!graph) return report(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes, graph->memory};
  return outcome();
}
cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  Lock lock(state_lock);
  CUstream_st* s = stream_of(stream);
  if (!exec) return report(cudaErrorInvalidValue);
  if (s->capture) {  // a graph launched while capturing: its nodes join the capture
    for (const Node& node : exec->nodes) s->capture->graph->nodes.push_back(node);
    return outcome();
  }
  count("graphs");
  for (const Node& node : exec->nodes) push(s, node());
  if (s == &legacy_stream) run_stream(s, s->queued, /*block=*/true);
  return outcome();
}
cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Lock lock(state_lock);
  delete exec;
  return outcome();
}
cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
  Lock lock(state_lock);
  delete graph;
  return outcome();
}

}  // extern "C"
