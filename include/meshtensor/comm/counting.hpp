#pragma once
// The planning transport: it carries nothing and waits for nobody. Each send and each collective
// is recorded (peer, bytes, tag; kind and bytes) and returns at once, so one processor of a plan
// runs on its own, and a plan of thousands of processors runs them one after another in one
// process. Its processors compute on the plan device (blocks without data), so no value a message
// would have carried is ever read; where a collective's result sizes what comes next (an
// all-gather of lengths), every rank is taken to have contributed what this one did.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/transport_choice.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// What one processor's communicators of a plan recorded.
struct CountedTraffic {
  struct Count {
    std::uint64_t calls = 0;
    std::uint64_t bytes = 0;  // as Communicator::Traffic counts them: the buffer's
    // What a processor would send and the rounds of latency it would wait for, with the usual
    // algorithms (a ring for volume, a tree or recursive doubling for latency): a network model's
    // input (plan/predict.hpp).
    double wire_bytes = 0, rounds = 0;
    void add(std::size_t b) { add(b, double(b), 1); }
    void add(std::size_t b, double wire, double r) {
      ++calls;
      bytes += b;
      wire_bytes += wire;
      rounds += r;
    }
  };
  enum Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier, kinds };

  std::map<int, Count> sent_by_tag;      // point-to-point sends, by message tag
  std::map<int, Count> received_by_tag;  // the receives posted, by tag
  std::array<Count, kinds> collectives;  // bytes as Communicator::Traffic counts them

  CountedTraffic& operator+=(const CountedTraffic& other) { return combine(other, 1); }
  CountedTraffic& operator-=(const CountedTraffic& other) { return combine(other, -1); }

 private:
  CountedTraffic& combine(const CountedTraffic& other, int sign) {
    for (const auto& [tag, c] : other.sent_by_tag) add(sent_by_tag[tag], c, sign);
    for (const auto& [tag, c] : other.received_by_tag) add(received_by_tag[tag], c, sign);
    for (std::size_t k = 0; k < kinds; ++k) add(collectives[k], other.collectives[k], sign);
    return *this;
  }
  static void add(Count& to, const Count& from, int sign) {
    to.calls += sign * from.calls;
    to.bytes += sign * from.bytes;
    to.wire_bytes += sign * from.wire_bytes;
    to.rounds += sign * from.rounds;
  }
};

/// A communicator of `size` ranks, seen from rank `rank`, that records instead of sending.
class CountingCommunicator final : public Communicator {
 public:
  /// `for_gpus`: the plan stands for a run on GPUs (by default, where run() would compute here).
  CountingCommunicator(int rank, int size, bool for_gpus = plans_stand_for_devices())
      : rank_(rank), size_(size), for_gpus_(for_gpus) {
    if (size < 1 || rank < 0 || rank >= size)
      throw CommError("plan transport: rank " + std::to_string(rank) + " of a group of " +
                      std::to_string(size) + " does not exist");
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return "plan"; }
  Device device() const override { return Device::plan(for_gpus_); }

  const CountedTraffic& counted() const { return counted_; }

  /// The plan's processors never meet, so a group's size cannot be agreed on: use split_known.
  std::unique_ptr<Communicator> split(int, int) override {
    throw CommError(
        "plan transport: a split needs the size of the new group, which a plan's processor "
        "cannot learn from the others; call split_known(color, key, size)");
  }
  std::unique_ptr<Communicator> split_known(int color, int key, int group_size) override {
    if (color < 0) return nullptr;
    return std::make_unique<CountingCommunicator>(key, group_size, for_gpus_);
  }

 protected:
  bool meets_peers() const override { return false; }

  Request post_send(const void*, std::size_t bytes, int dest, int tag, MemorySpace) override {
    check_rank(dest, "send to");
    counted_.sent_by_tag[tag].add(bytes);
    return Request();
  }
  Request post_receive(void*, std::size_t bytes, int source, int tag, MemorySpace) override {
    check_rank(source, "receive from");
    counted_.received_by_tag[tag].add(bytes);
    return Request();
  }
  void run_all_reduce(void*, std::size_t count, DType type, ReduceOp, MemorySpace) override {
    const double bytes = double(count * dtype_size(type));
    counted_.collectives[CountedTraffic::all_reduce].add(count * dtype_size(type),
                                                         2 * bytes * others() / size_, 2 * tree());
  }
  void run_all_gather(const void* send, std::size_t send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace where) override {
    counted_.collectives[CountedTraffic::all_gather].add(send_bytes, double(send_bytes) * others(),
                                                         tree());
    std::size_t offset = 0;
    for (std::size_t q = 0; q < recv_bytes.size(); offset += recv_bytes[q++])
      copy_on_host(static_cast<char*>(recv) + offset, send, std::min(send_bytes, recv_bytes[q]),
                   where);
  }
  void run_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                          DType type, ReduceOp, MemorySpace where) override {
    std::size_t total = 0, before = 0;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      if (int(q) < rank_) before += counts[q];
      total += counts[q];
    }
    const double bytes = double(total * dtype_size(type));
    counted_.collectives[CountedTraffic::reduce_scatter].add(total * dtype_size(type),
                                                             bytes * others() / size_, tree());
    copy_on_host(recv, static_cast<const char*>(send) + before * dtype_size(type),
                 counts.at(std::size_t(rank_)) * dtype_size(type), where);
  }
  void run_all_to_all(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace where) override {
    std::size_t total = 0, sent = 0, received = 0;
    for (auto b : send_bytes) total += b;
    const double own = rank_ < int(send_bytes.size()) ? double(send_bytes[rank_]) : 0;
    counted_.collectives[CountedTraffic::all_to_all].add(total, double(total) - own, others());
    // Each rank is taken to send here what this one sends there.
    for (std::size_t q = 0; q < send_bytes.size() && q < recv_bytes.size(); ++q) {
      copy_on_host(static_cast<char*>(recv) + received, static_cast<const char*>(send) + sent,
                   std::min(send_bytes[q], recv_bytes[q]), where);
      sent += send_bytes[q];
      received += recv_bytes[q];
    }
  }
  void run_broadcast(void*, std::size_t bytes, int root, MemorySpace) override {
    check_rank(root, "broadcast from");
    counted_.collectives[CountedTraffic::broadcast].add(bytes, size_ > 1 ? double(bytes) : 0,
                                                        tree());
  }
  void run_barrier() override { counted_.collectives[CountedTraffic::barrier].add(0, 0, tree()); }

 private:
  // Values in the host's memory are copied; a plan's blocks have none.
  static void copy_on_host(void* to, const void* from, std::size_t bytes, MemorySpace where) {
    if (where == MemorySpace::host && bytes && to != from) std::memmove(to, from, bytes);
  }
  void check_rank(int rank, const char* what) const {
    if (rank < 0 || rank >= size_)
      throw CommError(std::string("plan transport: cannot ") + what + " rank " +
                      std::to_string(rank) + " in a group of " + std::to_string(size_));
  }

  double others() const { return double(size_ - 1); }
  // Rounds of a tree or recursive doubling over the group: ceil(log2(size)).
  double tree() const {
    int rounds = 0;
    while ((1 << rounds) < size_) ++rounds;
    return rounds;
  }

  int rank_, size_;
  bool for_gpus_;
  CountedTraffic counted_;
};

}  // namespace meshtensor
