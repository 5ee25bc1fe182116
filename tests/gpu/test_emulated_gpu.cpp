// The emulated GPU (emulated/) behaves as the tests that run on it rely on: work in a stream runs
// only when the host waits for it, so a result read too early is stale; a stream told to wait for
// an event waits for it; device memory starts as NaN; a copy from pageable memory reads it at the
// call; managed, device and host memory are told apart; a kernel given host memory is an illegal
// address. Were the emulator to run work at once, or take any pointer, the tests on it could not
// catch what they are there to catch. Runs with the emulated libraries first on LD_LIBRARY_PATH
// (ctest sets it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/device/cuda.hpp>
#include <meshtensor/device/memory.hpp>
#include <meshtensor/device/runtime_compiler.hpp>
#include <meshtensor/kernels/cuda/elementwise.hpp>

using namespace meshtensor;

namespace {

// What CUDA says `data` is (meshtensor itself never asks: a block's memory space says): device,
// managed or pinned host memory, or unregistered for ordinary host memory.
cudaMemoryType memory_type(const void* data) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return attributes.type;
}

// `n` floats of managed memory, freed at the end.
struct Managed {
  explicit Managed(std::size_t n) : size(n) {
    cuda::check(
        cudaMallocManaged(reinterpret_cast<void**>(&data), n * sizeof(float), cudaMemAttachGlobal),
        "cudaMallocManaged");
  }
  ~Managed() { (void)cudaFree(data); }
  float* data = nullptr;
  std::size_t size;
};

// Device memory of `bytes`, straight from the runtime.
struct DeviceBytes {
  explicit DeviceBytes(std::size_t bytes) { cuda::check(cudaMalloc(&data, bytes), "cudaMalloc"); }
  ~DeviceBytes() { (void)cudaFree(data); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
  void* data = nullptr;
};

// A stream of the GPU's beside the compute stream, destroyed with the object.
struct OtherStream {
  OtherStream() {
    cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~OtherStream() { (void)cudaStreamDestroy(stream); }
  cudaStream_t stream = nullptr;
};

// An event without timing, destroyed with the object.
struct Event {
  Event() {
    cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Event() { (void)cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

// Queues out = 2 x on the calling thread's compute stream, without waiting.
void queue_doubling(const float* x, float* out, long long n) {
  cuda::launch(cuda::kernel(kernels::gpu::elementwise_source(), "map_f32"), n,
               cuda::compute_stream(), int(kernels::UnaryOp::times_scalar), 2.0f, x, out, n);
}

bool all_equal(const float* values, std::size_t n, float expected) {
  for (std::size_t i = 0; i < n; ++i)
    if (values[i] != expected) return false;
  return true;
}

}  // namespace

TEST_CASE("the emulated GPU is the one in use") {
  const cuda::GpuIdentity gpu = cuda::identify_gpu(0);
  CHECK(gpu.description.find("meshtensor emulated GPU") != std::string::npos);
}

TEST_CASE("work in a stream runs when the host waits for it, not before") {
  const std::size_t n = 1000;
  Managed x(n), y(n);
  std::fill(x.data, x.data + n, 1.0f);
  std::fill(y.data, y.data + n, 7.0f);

  queue_doubling(x.data, y.data, n);
  CHECK(all_equal(y.data, n, 7.0f));  // not run yet: a result read without waiting is stale
  cuda::check(cudaStreamSynchronize(cuda::compute_stream()), "cudaStreamSynchronize");
  CHECK(all_equal(y.data, n, 2.0f));

  // An event recorded after the work completes once the work has run.
  queue_doubling(y.data, x.data, n);
  cudaEvent_t done = nullptr;
  cuda::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  cuda::check(cudaEventRecord(done, cuda::compute_stream()), "cudaEventRecord");
  CHECK(all_equal(x.data, n, 1.0f));
  CHECK(cudaEventQuery(done) == cudaSuccess);
  CHECK(all_equal(x.data, n, 4.0f));
  cuda::check(cudaEventDestroy(done), "cudaEventDestroy");
}

TEST_CASE("a stream told to wait for an event runs its later work after the event's stream") {
  // As the nccl transport's stream follows the compute stream: it sends what kernels computed.
  const std::size_t n = 256;
  Managed x(n), y(n), copy(n);
  std::fill(x.data, x.data + n, 1.0f);
  std::fill(y.data, y.data + n, 7.0f);
  std::fill(copy.data, copy.data + n, 0.0f);
  const OtherStream side;
  const Event recorded;
  const cudaStream_t other = side.stream;
  const cudaEvent_t computed = recorded.event;

  queue_doubling(x.data, y.data, n);
  cuda::check(cudaEventRecord(computed, cuda::compute_stream()), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(other, computed, 0), "cudaStreamWaitEvent");
  cuda::check(cudaMemcpyAsync(copy.data, y.data, n * sizeof(float), cudaMemcpyDefault, other),
              "cudaMemcpyAsync");
  queue_doubling(y.data, x.data, n);  // after the event: the other stream need not wait for it
  cuda::check(cudaEventRecord(computed, cuda::compute_stream()), "cudaEventRecord");  // again
  CHECK(all_equal(copy.data, n, 0.0f));
  cuda::check(cudaStreamSynchronize(other), "cudaStreamSynchronize");
  CHECK(all_equal(copy.data, n, 2.0f));  // the doubling ran first, as the wait asked
  CHECK(all_equal(x.data, n, 1.0f));     // what came after the recorded point has not run
  cuda::check(cudaStreamSynchronize(cuda::compute_stream()), "cudaStreamSynchronize");
  CHECK(all_equal(x.data, n, 4.0f));
}

TEST_CASE("device memory starts as NaN, and copies from pageable memory read it at the call") {
  const std::size_t n = 64;
  const cudaStream_t stream = cuda::compute_stream();
  DeviceBytes device(n * sizeof(float));
  std::vector<float> host(n, 0.0f);
  cuda::check(
      cudaMemcpy(host.data(), device.as<float>(), n * sizeof(float), cudaMemcpyDeviceToHost),
      "cudaMemcpy");
  for (float v : host) CHECK(std::isnan(v));

  std::vector<float> source(n, 3.0f);
  cuda::check(cudaMemcpyAsync(device.as<float>(), source.data(), n * sizeof(float),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync");
  std::fill(source.begin(), source.end(), 5.0f);  // after the call: the copy has its own
  cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda::check(
      cudaMemcpy(host.data(), device.as<float>(), n * sizeof(float), cudaMemcpyDeviceToHost),
      "cudaMemcpy");
  CHECK(all_equal(host.data(), n, 3.0f));
}

TEST_CASE("managed, device and host memory are told apart, inside an allocation too") {
  Managed managed(16);
  DeviceBytes device(16 * sizeof(float));
  std::vector<float> host(16);
  CHECK(memory_type(managed.data + 5) == cudaMemoryTypeManaged);
  CHECK(memory_type(device.as<float>() + 5) == cudaMemoryTypeDevice);
  CHECK(memory_type(host.data()) == cudaMemoryTypeUnregistered);
}

// Last, and alone in its process (ctest runs it by its tag): the error stays, as on a GPU.
TEST_CASE("a kernel given host memory is an illegal address", "[sticky]") {
  std::vector<float> x(10, 1.0f);
  Managed y(10);
  // A GPU reports it when the kernel runs; the emulator as early as the launch.
  CHECK_THROWS_WITH(queue_doubling(x.data(), y.data, 10),
                    Catch::Contains("an illegal memory access was encountered"));
  CHECK(cudaStreamSynchronize(cuda::compute_stream()) == cudaErrorIllegalAddress);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);
}

TEST_CASE("work captured from a stream runs only when the graph is launched, at every launch") {
  // Two streams, as the nccl transport uses them: the other joins the capture through an event
  // and is joined back before it ends.
  const std::size_t n = 128;
  Managed x(n), y(n), copy(n);
  std::fill(x.data, x.data + n, 1.0f);
  std::fill(y.data, y.data + n, 0.0f);
  std::fill(copy.data, copy.data + n, 0.0f);
  const cudaStream_t stream = cuda::compute_stream();
  const OtherStream side;
  const Event fork, join;
  const cudaStream_t other = side.stream;
  const cudaEvent_t forked = fork.event, joined = join.event;

  cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin");
  queue_doubling(x.data, y.data, n);  // y = 2x
  cuda::check(cudaEventRecord(forked, stream), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(other, forked, 0), "cudaStreamWaitEvent");
  cuda::check(cudaMemcpyAsync(copy.data, y.data, n * sizeof(float), cudaMemcpyDefault, other),
              "cudaMemcpyAsync");
  cuda::check(cudaEventRecord(joined, other), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(stream, joined, 0), "cudaStreamWaitEvent");
  queue_doubling(y.data, x.data, n);  // x = 2y
  cudaStreamCaptureStatus status{};
  cuda::check(cudaStreamIsCapturing(other, &status), "cudaStreamIsCapturing");
  CHECK(status == cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  cuda::check(cudaStreamEndCapture(stream, &graph), "end");
  cuda::check(cudaStreamIsCapturing(other, &status), "cudaStreamIsCapturing");
  CHECK(status == cudaStreamCaptureStatusNone);
  cudaGraphExec_t exec = nullptr;
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  CHECK(all_equal(y.data, n, 0.0f));  // captured, not run
  CHECK(all_equal(x.data, n, 1.0f));

  for (const float expected : {4.0f, 16.0f}) {  // each launch doubles twice
    cuda::check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    CHECK(all_equal(x.data, n, expected));
    CHECK(all_equal(copy.data, n, expected / 2));
  }
  cuda::check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  cuda::check(cudaGraphDestroy(graph), "cudaGraphDestroy");
}

TEST_CASE("what CUDA refuses while a stream is captured breaks the capture") {
  const cudaStream_t stream = cuda::compute_stream();
  Managed x(16), y(16);
  std::vector<float> pageable(16, 1.0f);
  // Each refused call answers its own error, and the capture's end reports it broken.
  auto refused_in_capture = [&](auto&& call) {
    cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin");
    queue_doubling(x.data, y.data, 16);
    const cudaError_t error = call();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    (void)cudaGetLastError();
    CHECK((graph != nullptr) == (end == cudaSuccess));  // a broken capture gives no graph
    if (graph) cuda::check(cudaGraphDestroy(graph), "cudaGraphDestroy");
    return std::pair(error, end);
  };
  const auto invalidated = cudaErrorStreamCaptureInvalidated;
  CHECK(refused_in_capture([&] { return cudaStreamSynchronize(stream); }) ==
        std::pair(cudaErrorStreamCaptureUnsupported, invalidated));
  CHECK(refused_in_capture([&] {
          return cudaMemcpyAsync(x.data, pageable.data(), 16 * sizeof(float), cudaMemcpyDefault,
                                 stream);
        }) == std::pair(cudaErrorStreamCaptureUnsupported, invalidated));
  CHECK(refused_in_capture([&] {
          void* p = nullptr;
          return cudaMalloc(&p, 256);
        }) == std::pair(cudaErrorStreamCaptureUnsupported, invalidated));
  {
    const OtherStream other;
    const Event outside;
    cuda::check(cudaEventRecord(outside.event, other.stream), "cudaEventRecord");
    CHECK(refused_in_capture([&] { return cudaStreamWaitEvent(stream, outside.event, 0); }) ==
          std::pair(cudaErrorStreamCaptureIsolation, invalidated));
  }
  // Page-locked memory may be copied in a graph.
  float* pinned = nullptr;
  cuda::check(cudaMallocHost(reinterpret_cast<void**>(&pinned), 16 * sizeof(float)),
              "cudaMallocHost");
  CHECK(refused_in_capture([&] {
          return cudaMemcpyAsync(pinned, y.data, 16 * sizeof(float), cudaMemcpyDefault, stream);
        }) == std::pair(cudaSuccess, cudaSuccess));
  cuda::check(cudaFreeHost(pinned), "cudaFreeHost");
}
