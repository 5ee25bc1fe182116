#pragma once
// The one interface every transport implements (threads, MPI, NCCL). It works on bytes and counts
// so that transports stay non-templated; typed helpers live in collectives.hpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/comm/collective_call.hpp"
#include "meshtensor/comm/dtype.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/device/device.hpp"
#include "meshtensor/device/processor.hpp"
#include "meshtensor/memory/pool.hpp"

namespace meshtensor {

/**
 * A group of processors that can talk. Every collective must be called by every member, in the
 * same order (SPMD). Ranks are positions in the group, 0..size()-1.
 */
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "threads", "mpi" or "nccl".
  virtual std::string transport() const = 0;

  /// The device whose memory this transport carries messages from: the host's (threads, mpi) or
  /// this rank's GPU (nccl). A processor on its mesh computes there (Mesh checks).
  virtual Device device() const { return Device::cpu(); }
  /// Whether every processor of the run is a thread of this process (the threads transport), not
  /// one process of a launcher's job.
  virtual bool in_one_process() const { return false; }
  /// The processor (its rank in the run) that is rank `rank` of this group, for messages.
  virtual int processor_of(int rank) const { return rank; }
  /// Whether every rank must start its work on all of its groups in one order: NCCL's kernels
  /// wait for their peers, so two ranks that start messages on one group and a collective on
  /// another in opposite orders can deadlock. Nothing may then start on a message's arrival,
  /// which differs between ranks; threads and MPI progress each group's messages on their own.
  virtual bool starts_in_program_order() const { return false; }

  // Buffers are in `where`: the host's memory (a value, a vector), or the processor's device's (a
  // block, a message buffer: Array and Buffer say which). A transport that carries another kind
  // stages them (nccl copies host buffers to its GPU and back).

  /// Nonblocking send of `bytes` bytes to rank `dest`; the buffer must live until wait().
  Request isend(const void* data, std::size_t bytes, int dest, int tag,
                MemorySpace where = MemorySpace::host) {
    ++traffic_.messages;
    traffic_.bytes += bytes;
    return post_send(data, bytes, dest, tag, where);
  }
  /// Nonblocking receive of exactly `bytes` bytes from rank `source`.
  Request irecv(void* data, std::size_t bytes, int source, int tag,
                MemorySpace where = MemorySpace::host) {
    return post_receive(data, bytes, source, tag, where);
  }

  /// Called once the processor this communicator serves is current (the Mesh's world): a
  /// transport that queues work on the processor's device makes the host's waits for that device
  /// its own (nccl: polled, checked for errors, ended at the timeout).
  virtual void watch_waits() {}

  /// Starts the messages posted so far. Threads and MPI start each message when it is posted; a
  /// transport that queues them (nccl, which launches a step's messages together) starts them
  /// here, or at the first wait. Ops call it once a step is posted, before computing meanwhile.
  virtual void start_posted() {}

  /// What this rank has sent so far on this communicator: point-to-point messages and their bytes,
  /// and the collectives it joined with the bytes it contributed (all-reduce: the reduced data;
  /// all-gather: its part; reduce-scatter: all it reduces; all-to-all: all it sends; broadcast:
  /// the data, counted at every rank). Lets tests, benchmarks and plans hold communication to what
  /// an op needs.
  struct Traffic {
    std::uint64_t messages = 0;
    std::uint64_t bytes = 0;
    std::uint64_t collectives = 0;
    std::uint64_t collective_bytes = 0;

    Traffic& operator+=(const Traffic& o) {
      messages += o.messages;
      bytes += o.bytes;
      collectives += o.collectives;
      collective_bytes += o.collective_bytes;
      return *this;
    }
    Traffic& operator-=(const Traffic& o) {
      messages -= o.messages;
      bytes -= o.bytes;
      collectives -= o.collectives;
      collective_bytes -= o.collective_bytes;
      return *this;
    }
    friend bool operator==(const Traffic& a, const Traffic& b) {
      return a.messages == b.messages && a.bytes == b.bytes && a.collectives == b.collectives &&
             a.collective_bytes == b.collective_bytes;
    }
  };
  Traffic traffic() const { return traffic_; }

  /// In place: every rank ends with the element-wise reduction of all ranks' `count` elements.
  /// Every rank gets bitwise the same result.
  void all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                  MemorySpace where = MemorySpace::host) {
    count_collective(count * dtype_size(type));
    enter(typed(CollectiveOp::all_reduce, count * dtype_size(type), type, op));
    run_all_reduce(data, count, type, op, where);
  }
  /// Rank r contributes `send_bytes` (== recv_bytes[r]); every rank receives all contributions
  /// concatenated in rank order.
  void all_gather(const void* send, std::size_t send_bytes, void* recv,
                  const std::vector<std::size_t>& recv_bytes,
                  MemorySpace where = MemorySpace::host) {
    count_collective(send_bytes);
    CollectiveCall call = untyped(CollectiveOp::all_gather, sum(recv_bytes));
    call.blocks_hash = detail::hash_sizes(recv_bytes);
    enter(
        call, [&](int) { return send_bytes; }, [&](int q) { return at(recv_bytes, q); });
    run_all_gather(send, send_bytes, recv, recv_bytes, where);
  }
  /// Reduces `send` (the sum of counts elements) over all ranks; rank r keeps the counts[r]
  /// elements starting at the sum of counts[0..r).
  void reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                      DType type, ReduceOp op, MemorySpace where = MemorySpace::host) {
    const std::size_t total = sum(counts);
    count_collective(total * dtype_size(type));
    CollectiveCall call = typed(CollectiveOp::reduce_scatter, total * dtype_size(type), type, op);
    call.blocks_hash = detail::hash_sizes(counts);
    enter(call);
    run_reduce_scatter(send, recv, counts, type, op, where);
  }
  /// Rank r sends send_bytes[q] bytes (consecutive in `send`) to each rank q, and receives
  /// recv_bytes[q] bytes from each rank q (consecutive in `recv`).
  void all_to_all(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                  const std::vector<std::size_t>& recv_bytes,
                  MemorySpace where = MemorySpace::host) {
    count_collective(sum(send_bytes));
    enter(
        untyped(CollectiveOp::all_to_all, 0), [&](int q) { return at(send_bytes, q); },
        [&](int q) { return at(recv_bytes, q); });
    run_all_to_all(send, send_bytes, recv, recv_bytes, where);
  }
  /// Rank `root`'s `bytes` bytes reach every rank.
  void broadcast(void* data, std::size_t bytes, int root, MemorySpace where = MemorySpace::host) {
    count_collective(bytes);
    CollectiveCall call = untyped(CollectiveOp::broadcast, bytes);
    call.root = root;
    enter(call);
    run_broadcast(data, bytes, root, where);
  }
  void barrier() {
    count_collective(0);
    enter(untyped(CollectiveOp::barrier, 0));
    run_barrier();
  }

  /// Collective: ranks with the same `color` form a new group, ordered by `key` (then by rank).
  /// A negative color leaves this rank out; it gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// split() by a caller that knows how many ranks share its color (the Mesh does): a transport
  /// whose ranks never meet (the plan's, comm/counting.hpp) takes the size from here; the others
  /// check it.
  virtual std::unique_ptr<Communicator> split_known(int color, int key, int group_size) {
    auto group = split(color, key);
    if (group && group->size() != group_size)
      throw CommError(transport() + " transport: a split was to make a group of " +
                      std::to_string(group_size) + " ranks but " + std::to_string(group->size()) +
                      " share its color");
    return group;
  }

 protected:
  /// Whether this transport's processors meet: the plan's (comm/counting.hpp) never do, so the
  /// checking mode has nobody to compare with there.
  virtual bool meets_peers() const { return true; }

  // What each transport does; the calls above count and forward.
  virtual Request post_send(const void* data, std::size_t bytes, int dest, int tag,
                            MemorySpace where) = 0;
  virtual Request post_receive(void* data, std::size_t bytes, int source, int tag,
                               MemorySpace where) = 0;
  virtual void run_all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                              MemorySpace where) = 0;
  virtual void run_all_gather(const void* send, std::size_t send_bytes, void* recv,
                              const std::vector<std::size_t>& recv_bytes, MemorySpace where) = 0;
  virtual void run_reduce_scatter(const void* send, void* recv,
                                  const std::vector<std::size_t>& counts, DType type, ReduceOp op,
                                  MemorySpace where) = 0;
  virtual void run_all_to_all(const void* send, const std::vector<std::size_t>& send_bytes,
                              void* recv, const std::vector<std::size_t>& recv_bytes,
                              MemorySpace where) = 0;
  virtual void run_broadcast(void* data, std::size_t bytes, int root, MemorySpace where) = 0;
  virtual void run_barrier() = 0;

 private:
  // sizes[q], or 0 for a list too short (the transport reports that; the check must not read past)
  static std::size_t at(const std::vector<std::size_t>& sizes, int q) {
    return q < int(sizes.size()) ? sizes[q] : 0;
  }
  static std::size_t sum(const std::vector<std::size_t>& sizes) {
    std::size_t total = 0;
    for (auto size : sizes) total += size;
    return total;
  }
  CollectiveCall untyped(CollectiveOp op, std::size_t total_bytes) const {
    CollectiveCall call;
    call.op = op;
    call.sequence = sequence_;
    call.total_bytes = total_bytes;
    return call;
  }
  CollectiveCall typed(CollectiveOp op, std::size_t total_bytes, DType type,
                       ReduceOp reduce) const {
    CollectiveCall call = untyped(op, total_bytes);
    call.type = type;
    call.reduce = reduce;
    call.typed = true;
    return call;
  }

  void enter(const CollectiveCall& call) {
    auto none = [](int) { return std::size_t{0}; };
    enter(call, none, none);
  }

  // The checking mode: every member sends its call to every other before any data moves
  // (sent_pair(q): what it sends q; expected_pair(q): what it expects from q). Waiting for the
  // peers' calls is where a processor that stopped or returned is found.
  template <class SentPair, class ExpectedPair>
  void enter(CollectiveCall call, SentPair&& sent_pair, ExpectedPair&& expected_pair) {
    ++sequence_;
    // A call captured into a graph (StepGraph) was checked at the step's eager calls, and its
    // launches run no host code: the check's messages and wait cannot be captured.
    const Processor& processor = current_processor();
    if (!processor.settings().check_collectives || !meets_peers() || size() == 1 ||
        processor.capturing())
      return;
    const int n = size(), me = rank();
    std::vector<CollectiveCall> sent(n, call), theirs(n);
    std::vector<Request> requests;
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      sent[q].pair_bytes = sent_pair(q);
      requests.push_back(post_receive(&theirs[q], sizeof(CollectiveCall), q, tags::collective_check,
                                      MemorySpace::host));
      requests.push_back(post_send(&sent[q], sizeof(CollectiveCall), q, tags::collective_check,
                                   MemorySpace::host));
    }
    start_posted();
    try {
      wait_all(requests);
    } catch (const PeerFailure&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError("processor " + std::to_string(processor_of(me)) + ", entering " +
                      describe(call) + ": " + e.what());
    }
    for (int q = 0; q < n; ++q)
      if (q != me && !same_call(call, theirs[q], expected_pair(q)))
        throw CommError(disagreement(call, theirs[q], q, expected_pair(q)));
  }

  std::string disagreement(const CollectiveCall& mine, const CollectiveCall& theirs, int q,
                           std::uint64_t expected) const {
    const std::string me = "processor " + std::to_string(processor_of(rank()));
    const std::string peer = "processor " + std::to_string(processor_of(q));
    std::string what;
    if (mine.op == theirs.op && mine.sequence == theirs.sequence && theirs.pair_bytes != expected &&
        mine.blocks_hash == theirs.blocks_hash)
      what = peer + "'s " + describe(theirs) + " sends " + std::to_string(theirs.pair_bytes) +
             " bytes to " + me + ", which expects " + std::to_string(expected);
    else
      what = me + " calls " + describe(mine) + " but " + peer + " calls " + describe(theirs);
    return transport() + " transport: the collective ops of a group of " + std::to_string(size()) +
           " disagree: " + what +
           "; every processor must call the same collective ops in the same order, with the "
           "same sizes (MESHTENSOR_CHECK_COLLECTIVES=1 found this)";
  }

  void count_collective(std::size_t bytes) {
    ++traffic_.collectives;
    traffic_.collective_bytes += bytes;
  }

  Traffic traffic_;
  std::uint64_t sequence_ = 0;  // collectives called on this communicator so far
};

}  // namespace meshtensor
