#pragma once
// The `nccl` transport: one processor per MPI rank, each on its own GPU, talking through NCCL.
// Buffers may live in device memory (NCCL reads them in place) or on the host (they travel through
// a stream-ordered device copy), so every op works on it whatever memory its blocks are in. Each
// communicator has its own stream; its work waits there for the kernels queued before it on the
// processor's compute stream, so the host queues them and goes on without waiting.
//
// NCCL matches point-to-point messages by their order between two processors, not by tag.
// Sends and receives are therefore queued as they are posted and launched together, as one NCCL
// group, when the first of them is waited for (or tested), or before the next collective: each
// op posts all the messages of a step before waiting, as MPI allows too, so both sides put the same
// messages in the same order into their groups. Every wait polls NCCL for errors and gives up
// after MESHTENSOR_TIMEOUT seconds, so a processor whose peer died does not hang.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/deadline.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/device/cuda.hpp"

namespace meshtensor::nccl {
namespace detail {

inline ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
    case DType::bf16:
      return ncclBfloat16;
  }
  return ncclUint8;
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

/// NCCL's last message about `comm`, as " (message)", or nothing.
inline std::string last_error(ncclComm_t comm) {
  const char* text = ncclGetLastError(comm);
  return text && *text ? std::string(" (") + text + ")" : std::string();
}

/// The outcome of `call` on a non-blocking communicator: ncclInProgress until NCCL has done its
/// part, polled here until then; throws CommError on failure or after MESHTENSOR_TIMEOUT. A call
/// may answer ncclSuccess while its work still runs (NCCL 2.28's ncclCommSplit does: the parent
/// reports ncclInProgress until the new communicator exists), so the communicator is asked as well.
inline void settle(ncclComm_t comm, ncclResult_t result, const char* call) {
  if (result == ncclSuccess && comm && ncclCommGetAsyncError(comm, &result) != ncclSuccess)
    result = ncclSuccess;  // nothing more to learn
  if (result == ncclInProgress) {
    const Deadline deadline;
    do {
      if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) break;
      if (deadline.passed())
        throw CommError(std::string("nccl transport: ") + call + " did not finish within " +
                        deadline.describe() +
                        "; another processor probably failed before reaching it");
      std::this_thread::yield();
    } while (result == ncclInProgress);
  }
  if (result != ncclSuccess)
    throw CommError(std::string("nccl transport: ") + call +
                    " failed: " + ncclGetErrorString(result) + last_error(comm));
}

/// A device address for a caller's buffer of `bytes` bytes: the buffer itself when NCCL can use
/// it, else a device copy ordered on `stream` (filled from the buffer when `copy_in`, and copied
/// back by copy_out() once the stream is done with it). The copy is released in stream order, so
/// it may outlive this object in flight.
class DeviceView {
 public:
  DeviceView(const void* data, std::size_t bytes, MemorySpace where, cudaStream_t stream,
             bool copy_in)
      : host_(const_cast<void*>(data)), bytes_(bytes), stream_(stream) {
    if (bytes == 0 || where == MemorySpace::device) {
      device_ = const_cast<void*>(data);
      return;
    }
    cuda::check(cudaMallocAsync(&staged_, bytes, stream), "cudaMallocAsync");
    device_ = staged_;
    if (copy_in)
      cuda::check(cudaMemcpyAsync(staged_, data, bytes, cudaMemcpyHostToDevice, stream),
                  "cudaMemcpyAsync (host to device)");
  }
  DeviceView(const DeviceView&) = delete;
  DeviceView& operator=(const DeviceView&) = delete;
  ~DeviceView() {
    if (staged_) (void)cudaFreeAsync(staged_, stream_);
  }

  void* get() const { return device_; }
  char* bytes() const { return static_cast<char*>(device_); }
  /// Copies the result back into the caller's host buffer (nothing when it was used in place).
  /// Call it after the stream's work is done: a copy into pageable memory waits for the stream
  /// without the timeout that guards every other wait.
  void copy_out() const {
    if (staged_)
      cuda::check(cudaMemcpy(host_, staged_, bytes_, cudaMemcpyDeviceToHost),
                  "cudaMemcpy (device to host)");
  }

 private:
  void* host_;
  std::size_t bytes_;
  cudaStream_t stream_;
  void* device_ = nullptr;
  void* staged_ = nullptr;
};

/// Point-to-point messages posted since the last launch, and, once launched, the event that
/// marks their completion.
struct Batch {
  struct Message {
    bool send = false;
    void* data = nullptr;
    std::size_t bytes = 0;
    int peer = 0;
    MemorySpace where = MemorySpace::device;
    std::unique_ptr<DeviceView> view;  // made at launch
  };
  std::vector<Message> messages;
  cudaEvent_t done = nullptr;
  bool launched = false;
  bool finished = false;
  std::string failure;  // why the launch failed, if it did
  std::string what;     // the peers, for messages

  ~Batch() {
    messages.clear();  // release the device copies (stream-ordered) before the event
    if (done) (void)cudaEventDestroy(done);
  }
};

}  // namespace detail

/**
 * A communicator over NCCL. The world one comes from nccl::start() (nccl_start.hpp), the groups
 * of mesh axes from split() (ncclCommSplit, sharing the parent's resources). All calls are made
 * from the processor's own thread, with its GPU current.
 */
class NcclCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm`, a communicator created non-blocking on `device`.
  NcclCommunicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {
    cuda::check(cudaSetDevice(device_), "cudaSetDevice");
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
    cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda::check(cudaEventCreateWithFlags(&compute_queued_, cudaEventDisableTiming),
                "cudaEventCreate");
    cuda::check(cudaEventCreateWithFlags(&done_here_, cudaEventDisableTiming), "cudaEventCreate");
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ~NcclCommunicator() override {
    if (watches_waits_) cuda::gpu_wait().poll = nullptr;
    pending_.reset();
    if (comm_) {
      // Collectives queued on the GPU may still run (the host did not wait for them): they finish
      // first, their buffers still held. While an exception unwinds, or where they do not finish
      // in time, peers may never do their side: abort (local, does not wait) rather than destroy
      // (which flushes outstanding work with the peers).
      if (std::uncaught_exceptions() == 0 && finishes_queued_work())
        (void)ncclCommDestroy(comm_);
      else if (comm_)
        (void)ncclCommAbort(comm_);
    }
    if (stream_) (void)cudaStreamDestroy(stream_);
    if (compute_queued_) (void)cudaEventDestroy(compute_queued_);
    if (done_here_) (void)cudaEventDestroy(done_here_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "nccl"; }
  bool starts_in_program_order() const override { return true; }
  ncclComm_t native() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  /// This rank's GPU.
  int gpu() const { return device_; }
  Device device() const override { return Device::cuda(device_); }

  void run_all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                      MemorySpace where) override {
    launch_pending();
    if (count == 0 || size_ == 1) return;  // one rank: already its own reduction
    follow_compute();
    detail::DeviceView view(data, count * dtype_size(type), where, stream_, /*copy_in=*/true);
    check(ncclAllReduce(view.get(), view.get(), count, detail::nccl_type(type), detail::nccl_op(op),
                        comm_, stream_),
          "ncclAllReduce");
    finish("all_reduce", where);
    view.copy_out();
  }

  void run_all_gather(const void* send, std::size_t send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace where) override {
    const auto offsets = offsets_of(recv_bytes, "all_gather", send_bytes);
    launch_pending();
    if (offsets.back() == 0) return;
    if (size_ == 1) return copy_alone(recv, send, send_bytes, where);
    follow_compute();
    detail::DeviceView in(send, send_bytes, where, stream_, true);
    detail::DeviceView out(recv, offsets.back(), where, stream_, false);
    if (all_equal(recv_bytes)) {
      check(ncclAllGather(in.get(), out.get(), send_bytes, ncclUint8, comm_, stream_),
            "ncclAllGather");
    } else {
      // Uneven contributions: NCCL's all-gather takes one count, so each block travels alone.
      group([&] {
        for (int q = 0; q < size_; ++q) {
          if (q == rank_) continue;
          if (send_bytes)
            check(ncclSend(in.get(), send_bytes, ncclUint8, q, comm_, stream_), "ncclSend");
          if (recv_bytes[q])
            check(ncclRecv(out.bytes() + offsets[q], recv_bytes[q], ncclUint8, q, comm_, stream_),
                  "ncclRecv");
        }
      });
      copy_on_device(out.bytes() + offsets[rank_], in.get(), send_bytes);
    }
    finish("all_gather", where);
    out.copy_out();
  }

  void run_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                          DType type, ReduceOp op, MemorySpace where) override {
    const std::size_t element = dtype_size(type);
    std::vector<std::size_t> bytes;
    for (auto n : counts) bytes.push_back(n * element);
    const auto offsets = offsets_of(bytes, "reduce_scatter", bytes.at(rank_));
    launch_pending();
    if (offsets.back() == 0) return;
    if (size_ == 1) return copy_alone(recv, send, bytes[0], where);
    follow_compute();
    if (all_equal(bytes)) {
      detail::DeviceView in(send, offsets.back(), where, stream_, true);
      detail::DeviceView out(recv, bytes[rank_], where, stream_, false);
      check(ncclReduceScatter(in.get(), out.get(), counts[rank_], detail::nccl_type(type),
                              detail::nccl_op(op), comm_, stream_),
            "ncclReduceScatter");
      finish("reduce_scatter", where);
      out.copy_out();
      return;
    }
    // Uneven blocks: NCCL's reduce-scatter takes one count; reduce everything, keep this block.
    detail::DeviceView in(send, offsets.back(), where, stream_, true);
    detail::DeviceView out(recv, bytes[rank_], where, stream_, false);
    void* whole = nullptr;
    cuda::check(cudaMallocAsync(&whole, offsets.back(), stream_), "cudaMallocAsync");
    check(ncclAllReduce(in.get(), whole, offsets.back() / element, detail::nccl_type(type),
                        detail::nccl_op(op), comm_, stream_),
          "ncclAllReduce");
    copy_on_device(out.get(), static_cast<char*>(whole) + offsets[rank_], bytes[rank_]);
    cuda::check(cudaFreeAsync(whole, stream_), "cudaFreeAsync");
    finish("reduce_scatter", where);
    out.copy_out();
  }

  void run_all_to_all(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace where) override {
    const auto send_offsets = offsets_of(send_bytes, "all_to_all (send)", send_bytes.at(rank_));
    const auto recv_offsets = offsets_of(recv_bytes, "all_to_all (receive)", send_bytes[rank_]);
    launch_pending();
    if (send_offsets.back() == 0 && recv_offsets.back() == 0) return;
    if (size_ == 1) return copy_alone(recv, send, send_bytes[0], where);
    follow_compute();
    detail::DeviceView in(send, send_offsets.back(), where, stream_, true);
    detail::DeviceView out(recv, recv_offsets.back(), where, stream_, false);
    group([&] {
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        if (send_bytes[q])
          check(ncclSend(in.bytes() + send_offsets[q], send_bytes[q], ncclUint8, q, comm_, stream_),
                "ncclSend");
        if (recv_bytes[q])
          check(
              ncclRecv(out.bytes() + recv_offsets[q], recv_bytes[q], ncclUint8, q, comm_, stream_),
              "ncclRecv");
      }
    });
    copy_on_device(out.bytes() + recv_offsets[rank_], in.bytes() + send_offsets[rank_],
                   send_bytes[rank_]);
    finish("all_to_all", where);
    out.copy_out();
  }

  void run_broadcast(void* data, std::size_t bytes, int root, MemorySpace where) override {
    if (root < 0 || root >= size_)
      throw CommError("nccl transport: broadcast from rank " + std::to_string(root) +
                      " in a group of " + std::to_string(size_));
    launch_pending();
    if (bytes == 0 || size_ == 1) return;
    follow_compute();
    detail::DeviceView view(data, bytes, where, stream_, /*copy_in=*/rank_ == root);
    check(ncclBroadcast(view.get(), view.get(), bytes, ncclUint8, root, comm_, stream_),
          "ncclBroadcast");
    finish("broadcast", where);
    view.copy_out();
  }

  void start_posted() override { launch_pending(); }

  /// Makes this communicator (the processor's world) the one its host waits for the GPU through
  /// (cuda::gpu_wait): each wait polls, checks NCCL for errors and gives up after the timeout, as
  /// this transport's own waits do, now that collectives on the GPU's memory leave the host free.
  void watch_waits() override {
    watches_waits_ = true;
    cuda::gpu_wait().poll = [this](const std::function<cudaError_t()>& done, const char* what) {
      wait_for(done, what, /*block=*/true);
    };
  }

  void run_barrier() override {
    if (size_ == 1) return;
    std::int32_t token = 0;
    run_all_reduce(&token, 1, DType::i32, ReduceOp::sum, MemorySpace::host);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    launch_pending();
    synchronize("split");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.splitShare = 1;  // and groups split from this one share its resources in turn
    ncclComm_t part = nullptr;
    // Settles on the parent, which runs the split; NCCL writes `part` once it is done.
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &part, &config),
          "ncclCommSplit");
    if (!part) {
      if (color < 0) return nullptr;
      throw CommError("nccl transport: ncclCommSplit on rank " + std::to_string(rank_) + " of " +
                      std::to_string(size_) + " finished without making the group of color " +
                      std::to_string(color));
    }
    detail::settle(part, ncclInProgress, "ncclCommSplit (new communicator)");
    return std::make_unique<NcclCommunicator>(part, device_);
  }

  /// Waits for everything queued on this communicator's stream, polling NCCL for errors; gives
  /// up (aborting the communicator) after MESHTENSOR_TIMEOUT seconds. `what` names the
  /// operation in messages.
  void synchronize(const char* what) {
    wait_for([this] { return cudaStreamQuery(stream_); }, what, /*block=*/true);
  }

 private:
  class Request final : public meshtensor::detail::RequestImpl {
   public:
    Request(NcclCommunicator& owner, std::shared_ptr<detail::Batch> batch)
        : owner_(owner), batch_(std::move(batch)) {}
    void wait() override { owner_.complete(*batch_, /*block=*/true); }
    bool test() override { return owner_.complete(*batch_, /*block=*/false); }

   private:
    NcclCommunicator& owner_;
    std::shared_ptr<detail::Batch> batch_;
  };

  meshtensor::Request post_send(const void* data, std::size_t bytes, int dest, int,
                                MemorySpace where) override {
    return post(true, const_cast<void*>(data), bytes, dest, where);
  }
  meshtensor::Request post_receive(void* data, std::size_t bytes, int source, int,
                                   MemorySpace where) override {
    return post(false, data, bytes, source, where);
  }

  meshtensor::Request post(bool send, void* data, std::size_t bytes, int peer, MemorySpace where) {
    if (peer < 0 || peer >= size_)
      throw CommError("nccl transport: message " + std::string(send ? "to" : "from") + " rank " +
                      std::to_string(peer) + " on rank " + std::to_string(rank_) + " of " +
                      std::to_string(size_) + "; ranks are 0 to " + std::to_string(size_ - 1));
    if (!pending_) pending_ = std::make_shared<detail::Batch>();
    detail::Batch::Message message;
    message.send = send;
    message.data = data;
    message.bytes = bytes;
    message.peer = peer;
    message.where = where;
    pending_->messages.push_back(std::move(message));
    return meshtensor::Request(std::make_unique<Request>(*this, pending_));
  }

  // Launches the queued messages as one NCCL group; sends from host memory are copied to the
  // device first, receives into host memory land in a device copy until complete().
  void launch_pending() {
    if (!pending_) return;
    auto batch = std::move(pending_);
    pending_.reset();
    batch->launched = true;  // failed, if what follows throws: its requests report that
    batch->what = peers_of(*batch);
    try {
      follow_compute();
      for (auto& m : batch->messages)
        m.view = std::make_unique<detail::DeviceView>(m.data, m.bytes, m.where, stream_, m.send);
      group([&] {
        for (auto& m : batch->messages) {
          if (m.bytes == 0) continue;
          if (m.send)
            check(ncclSend(m.view->get(), m.bytes, ncclUint8, m.peer, comm_, stream_), "ncclSend");
          else
            check(ncclRecv(m.view->get(), m.bytes, ncclUint8, m.peer, comm_, stream_), "ncclRecv");
        }
      });
      cuda::check(cudaEventCreateWithFlags(&batch->done, cudaEventDisableTiming),
                  "cudaEventCreate");
      cuda::check(cudaEventRecord(batch->done, stream_), "cudaEventRecord");
    } catch (const std::exception& e) {
      batch->failure = e.what();
      throw;
    }
  }

  // Waits for (block) or polls a batch; true once its messages are delivered.
  bool complete(detail::Batch& batch, bool block) {
    if (batch.finished) return true;
    if (!batch.launched) launch_pending();
    if (!batch.failure.empty())
      throw CommError("nccl transport: messages on rank " + std::to_string(rank_) +
                      " could not start: " + batch.failure);
    // Messages in the GPU's memory alone: the compute stream waits for them there.
    if (on_device(batch) && cuda::computes_on_gpu()) {
      cuda::check(cudaStreamWaitEvent(cuda::compute_stream(), batch.done, 0),
                  "cudaStreamWaitEvent");
    } else if (!wait_for([&batch] { return cudaEventQuery(batch.done); }, batch.what.c_str(),
                         block)) {
      return false;
    }
    for (auto& m : batch.messages)
      if (!m.send && m.view) m.view->copy_out();
    batch.finished = true;
    batch.messages.clear();  // device copies go back to the pool
    return true;
  }

  static bool on_device(const detail::Batch& batch) {
    for (const auto& m : batch.messages)
      if (m.where != MemorySpace::device) return false;
    return true;
  }

  // "messages with rank(s) 1, 2": what a wait for a batch waits for, in messages.
  static std::string peers_of(const detail::Batch& batch) {
    std::set<int> peers;
    for (const auto& m : batch.messages) peers.insert(m.peer);
    std::string text;
    for (int peer : peers) text += (text.empty() ? "" : ", ") + std::to_string(peer);
    return "messages with rank(s) " + text;
  }

  // Polls `query` (a CUDA stream or event query) until its work is done, checking NCCL for
  // errors; without `block`, polls once. Gives up, aborting the communicator, after the timeout.
  template <class Query>
  bool wait_for(Query&& query, const char* what, bool block) {
    if (block) ++device_activity().waits;
    const Deadline deadline;
    for (int spins = 0;; ++spins) {
      const cudaError_t state = query();
      if (state == cudaSuccess) return true;
      if (state != cudaErrorNotReady) cuda::check(state, "cudaStreamQuery / cudaEventQuery");
      check_async(what);
      if (!block) return false;
      if (deadline.passed()) give_up(what, deadline);
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Orders this communicator's stream after the work queued so far on the processor's compute
  // stream: the kernels that wrote what it is about to send, and those still reading a buffer it
  // is about to receive into (the memory pool hands out a block as soon as the host is done
  // with it). GPU calls return without waiting for their work (device/host_access.hpp); the
  // host waits for this stream's, so the compute stream's later work follows it in turn.
  void follow_compute() {
    if (!cuda::computes_on_gpu()) return;
    cuda::check(cudaEventRecord(compute_queued_, cuda::compute_stream()), "cudaEventRecord");
    cuda::check(cudaStreamWaitEvent(stream_, compute_queued_, 0), "cudaStreamWaitEvent");
  }

  // Runs `calls` (NCCL calls on this communicator) as one group.
  template <class Calls>
  void group(Calls&& calls) {
    check(ncclGroupStart(), "ncclGroupStart");
    try {
      calls();
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  // A collective of one rank: its own block from `from` to `to`, in the order of the processor's
  // compute stream where they are the GPU's, without NCCL and without a wait.
  static void copy_alone(void* to, const void* from, std::size_t bytes, MemorySpace where) {
    if (bytes == 0 || to == from) return;
    if (where == MemorySpace::host) {
      std::memcpy(to, from, bytes);
      return;
    }
    cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, cuda::compute_stream()),
                "cudaMemcpyAsync (device to device)");
  }

  // Waits for the work queued on this communicator's stream; false where it failed or did not end
  // in time (the wait then aborted the communicator: comm_ is null).
  bool finishes_queued_work() noexcept {
    try {
      synchronize("the communicator's last work");
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // The end of a collective on this communicator's stream: where its buffers are the GPU's, the
  // processor's compute stream waits for it there (the kernels queued next read its result) and
  // the host goes on; else the host waits for it, to copy its result out.
  void finish(const char* what, MemorySpace where) {
    if (where == MemorySpace::device && cuda::computes_on_gpu()) return compute_follows();
    synchronize(what);
  }

  // Orders the processor's compute stream after the work queued so far on this one.
  void compute_follows() {
    cuda::check(cudaEventRecord(done_here_, stream_), "cudaEventRecord");
    cuda::check(cudaStreamWaitEvent(cuda::compute_stream(), done_here_, 0), "cudaStreamWaitEvent");
  }

  void copy_on_device(void* to, const void* from, std::size_t bytes) {
    if (bytes)
      cuda::check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream_),
                  "cudaMemcpyAsync (device to device)");
  }

  // Byte offsets of consecutive blocks, with their total last; checks this rank's block.
  std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& bytes, const char* what,
                                      std::size_t own) const {
    if (static_cast<int>(bytes.size()) != size_)
      throw CommError(std::string("nccl transport: ") + what + " got " +
                      std::to_string(bytes.size()) + " block sizes for a group of " +
                      std::to_string(size_));
    if (bytes[rank_] != own)
      throw CommError(std::string("nccl transport: ") + what + " on rank " + std::to_string(rank_) +
                      " contributes " + std::to_string(own) + " bytes but its block is " +
                      std::to_string(bytes[rank_]));
    std::vector<std::size_t> offsets{0};
    for (auto b : bytes) offsets.push_back(offsets.back() + b);
    return offsets;
  }

  static bool all_equal(const std::vector<std::size_t>& sizes) {
    for (auto s : sizes)
      if (s != sizes.front()) return false;
    return true;
  }

  // A non-blocking communicator answers ncclInProgress until its work is set up.
  void check(ncclResult_t result, const char* call) { detail::settle(comm_, result, call); }

  void check_async(const char* what) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return;
    if (state == ncclSuccess || state == ncclInProgress) return;
    const std::string reason = ncclGetErrorString(state) + detail::last_error(comm_);
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    throw CommError("nccl transport: " + std::string(what) + " on rank " + std::to_string(rank_) +
                    " of " + std::to_string(size_) + " failed: " + reason);
  }

  [[noreturn]] void give_up(const char* what, const Deadline& deadline) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    throw CommError("nccl transport: " + std::string(what) + " on rank " + std::to_string(rank_) +
                    " of " + std::to_string(size_) + " did not complete within " +
                    deadline.describe() +
                    "; another processor probably failed or stopped, or calls other operations "
                    "than this one");
  }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_here_ = nullptr;  // this stream's work so far, for the compute stream to wait
  bool watches_waits_ = false;
  cudaEvent_t compute_queued_ = nullptr;    // follow_compute()'s mark on the compute stream
  std::shared_ptr<detail::Batch> pending_;  // posted, not yet launched
};

}  // namespace meshtensor::nccl
