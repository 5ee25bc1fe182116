#pragma once
// The `threads` transport: N processors as N threads of one process. It needs no launcher and is
// the default, so tests and the quick start run anywhere. Collectives meet at a rendezvous where
// each thread publishes a pointer to its buffer and reads its peers' buffers directly; sends are
// buffered, so a send never waits for its receive.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/deadline.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor::threads {
namespace detail {

// The processors of one communicator, and the rendezvous state of its collectives.
struct Group {
  std::uint64_t context = 0;  // separates the messages of different communicators
  std::vector<int> members;   // world ranks, in group-rank order
  int arrived = 0;
  std::vector<bool> present;  // per member: arrived at the current rendezvous
  std::uint64_t generation = 0;
  std::vector<const void*> slots;  // per member: what it published for the current collective
};

// State shared by all threads of one run.
class World {
 public:
  explicit World(int size) : size_(size), finished_(size, false) {
    auto group = std::make_shared<Group>();
    group->context = next_context_++;
    for (int r = 0; r < size; ++r) group->members.push_back(r);
    group->slots.resize(size);
    group->present.resize(size);
    root_ = group;
  }

  int size() const { return size_; }
  std::shared_ptr<Group> root() const { return root_; }

  // Ends every wait in the run with PeerFailure. The first failure is the one reported.
  void fail(int processor, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_) {
      failed_ = true;
      failure_ = "processor " + std::to_string(processor) + " failed: " + what;
    }
    changed_.notify_all();
  }

  // Marks a processor whose function returned: whoever waits for it now waits forever.
  void finish(int processor) {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[processor] = true;
    changed_.notify_all();
  }

  // Waits until every member of `group` has arrived; `rank` is the caller's rank in it.
  void barrier(Group& group, int rank) {
    std::unique_lock<std::mutex> lock(mutex_);
    throw_if_failed();
    const auto generation = group.generation;
    if (++group.arrived == static_cast<int>(group.members.size())) {
      group.arrived = 0;
      group.present.assign(group.present.size(), false);
      ++group.generation;
      changed_.notify_all();
      return;
    }
    group.present[rank] = true;
    const Deadline deadline;  // only a member that has to wait reads MESHTENSOR_TIMEOUT
    // A member that has returned cannot be among those who arrived (the last arrival releases
    // everyone), so it will never come.
    int gone = -1;
    const bool released = changed_.wait_until(lock, deadline.when(), [&] {
      for (int member : group.members)
        if (finished_[member]) gone = member;
      return group.generation != generation || failed_ || gone >= 0;
    });
    if (group.generation != generation) return;
    throw_if_failed();
    if (!released) {
      std::string missing;
      for (std::size_t m = 0; m < group.members.size(); ++m)
        if (!group.present[m])
          missing += (missing.empty() ? "" : ", ") + std::to_string(group.members[m]);
      throw CommError("threads transport: processor " + std::to_string(group.members[rank]) +
                      " waited " + deadline.describe() + " in a collective op for processor(s) " +
                      missing +
                      ", which did not reach it; every processor must call the same collective "
                      "ops in the same order");
    }
    throw CommError("threads transport: a collective op waits for processor " +
                    std::to_string(gone) +
                    ", which has already returned; every processor must call the same "
                    "collective ops in the same order");
  }

  void post(std::uint64_t context, int source, int dest, int tag, std::vector<std::byte> message) {
    std::lock_guard<std::mutex> lock(mutex_);
    throw_if_failed();
    mailbox_[{context, source, dest, tag}].push_back(std::move(message));
    changed_.notify_all();
  }

  // Takes the oldest matching message; blocks unless `block` is false. `sender` is the source's
  // world rank, watched so that a receive from a processor that has returned fails instead of
  // hanging.
  bool take(std::uint64_t context, int source, int sender, int dest, int tag,
            std::vector<std::byte>& message, bool block) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& queue = mailbox_[{context, source, dest, tag}];
    if (block) {
      const Deadline deadline;
      const bool ended = changed_.wait_until(
          lock, deadline.when(), [&] { return !queue.empty() || failed_ || finished_[sender]; });
      if (!ended)
        throw CommError("threads transport: a receive (tag " + std::to_string(tag) + ") waited " +
                        deadline.describe() + " for a message from processor " +
                        std::to_string(sender) +
                        ", which did not send it; every processor must call the same ops in the "
                        "same order");
    }
    if (queue.empty()) {
      throw_if_failed();
      // A processor that has returned sends nothing more: a receive from it would never end.
      if (finished_[sender])
        throw CommError("threads transport: a receive waits for a message from processor " +
                        std::to_string(sender) +
                        ", which has already returned; every processor must call the same ops in "
                        "the same order");
      return false;
    }
    message = std::move(queue.front());
    queue.pop_front();
    return true;
  }

  // The group for (parent, split number, color): made by the first member that asks.
  std::shared_ptr<Group> group_for(std::uint64_t parent, std::uint64_t split_number, int color,
                                   const std::vector<int>& members) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& group = groups_[{parent, split_number, color}];
    if (!group) {
      group = std::make_shared<Group>();
      group->context = next_context_++;
      group->members = members;
      group->slots.resize(members.size());
      group->present.resize(members.size());
    }
    return group;
  }

 private:
  void throw_if_failed() const {
    if (failed_) throw PeerFailure("stopped because " + failure_);
  }

  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool failed_ = false;
  std::string failure_;
  std::uint64_t next_context_ = 0;
  std::shared_ptr<Group> root_;
  std::vector<bool> finished_;
  std::map<std::tuple<std::uint64_t, int, int, int>, std::deque<std::vector<std::byte>>> mailbox_;
  std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::shared_ptr<Group>> groups_;
};

class ReceiveRequest : public meshtensor::detail::RequestImpl {
 public:
  ReceiveRequest(World& world, std::uint64_t context, int source, int sender, int dest, int tag,
                 void* data, std::size_t bytes)
      : world_(world),
        context_(context),
        source_(source),
        sender_(sender),
        dest_(dest),
        tag_(tag),
        data_(data),
        bytes_(bytes) {}

  void wait() override { complete(true); }
  bool test() override { return complete(false); }

 private:
  bool complete(bool block) {
    std::vector<std::byte> message;
    if (!world_.take(context_, source_, sender_, dest_, tag_, message, block)) return false;
    if (message.size() != bytes_)
      throw CommError("threads transport: rank " + std::to_string(dest_) + " expected " +
                      std::to_string(bytes_) + " bytes from rank " + std::to_string(source_) +
                      " (tag " + std::to_string(tag_) + ") but " + std::to_string(message.size()) +
                      " bytes arrived");
    if (bytes_) std::memcpy(data_, message.data(), bytes_);
    return true;
  }

  World& world_;
  std::uint64_t context_;
  int source_, sender_, dest_, tag_;
  void* data_;
  std::size_t bytes_;
};

}  // namespace detail

/// A communicator over threads of one process; one object per thread and group.
class ThreadsCommunicator final : public Communicator {
 public:
  ThreadsCommunicator(std::shared_ptr<detail::World> world, std::shared_ptr<detail::Group> group,
                      int rank)
      : world_(std::move(world)), group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->members.size()); }
  std::string transport() const override { return "threads"; }
  bool in_one_process() const override { return true; }
  int processor_of(int rank) const override { return group_->members.at(rank); }

 private:
  Request post_send(const void* data, std::size_t bytes, int dest, int tag, MemorySpace) override {
    check_rank(dest, "send to");
    std::vector<std::byte> message(bytes);
    if (bytes) std::memcpy(message.data(), data, bytes);
    world_->post(group_->context, rank_, dest, tag, std::move(message));
    return Request();  // buffered: complete at once
  }

  Request post_receive(void* data, std::size_t bytes, int source, int tag, MemorySpace) override {
    check_rank(source, "receive from");
    return Request(std::make_unique<detail::ReceiveRequest>(
        *world_, group_->context, source, group_->members[source], rank_, tag, data, bytes));
  }

 public:
  void run_all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                      MemorySpace) override {
    meshtensor::detail::visit_dtype(type, [&](auto zero) {
      using T = decltype(zero);
      auto peers = publish(data);
      // Every rank reduces in rank order, so every rank gets bitwise the same result.
      std::vector<T> result(static_cast<const T*>(peers[0]),
                            static_cast<const T*>(peers[0]) + count);
      for (std::size_t r = 1; r < peers.size(); ++r) {
        const T* other = static_cast<const T*>(peers[r]);
        for (std::size_t i = 0; i < count; ++i)
          result[i] = meshtensor::detail::combine(op, result[i], other[i]);
      }
      world_->barrier(*group_, rank_);
      if (count) std::memcpy(data, result.data(), count * sizeof(T));
    });
  }

  void run_all_gather(const void* send, std::size_t send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace) override {
    check_counts(recv_bytes, "all_gather");
    check_equal(send_bytes, recv_bytes[rank_], "all_gather: this rank's contribution");
    auto peers = publish(send);
    auto* out = static_cast<std::byte*>(recv);
    for (std::size_t r = 0; r < peers.size(); ++r) {
      if (recv_bytes[r]) std::memcpy(out, peers[r], recv_bytes[r]);
      out += recv_bytes[r];
    }
    world_->barrier(*group_, rank_);
  }

  void run_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                          DType type, ReduceOp op, MemorySpace) override {
    check_counts(counts, "reduce_scatter");
    meshtensor::detail::visit_dtype(type, [&](auto zero) {
      using T = decltype(zero);
      auto peers = publish(send);
      std::size_t begin = 0;
      for (int r = 0; r < rank_; ++r) begin += counts[r];
      T* out = static_cast<T*>(recv);
      for (std::size_t i = 0; i < counts[rank_]; ++i) {
        T value = static_cast<const T*>(peers[0])[begin + i];
        for (std::size_t r = 1; r < peers.size(); ++r)
          value =
              meshtensor::detail::combine(op, value, static_cast<const T*>(peers[r])[begin + i]);
        out[i] = value;
      }
      world_->barrier(*group_, rank_);
    });
  }

  void run_all_to_all(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace) override {
    check_counts(send_bytes, "all_to_all");
    check_counts(recv_bytes, "all_to_all");
    struct Offer {
      const std::byte* data;
      const std::vector<std::size_t>* bytes;
    } mine{static_cast<const std::byte*>(send), &send_bytes};
    auto peers = publish(&mine);
    auto* out = static_cast<std::byte*>(recv);
    for (std::size_t q = 0; q < peers.size(); ++q) {
      const auto& offer = *static_cast<const Offer*>(peers[q]);
      std::size_t offset = 0;
      for (int r = 0; r < rank_; ++r) offset += (*offer.bytes)[r];
      check_equal((*offer.bytes)[rank_], recv_bytes[q],
                  "all_to_all: bytes from rank " + std::to_string(q));
      if (recv_bytes[q]) std::memcpy(out, offer.data + offset, recv_bytes[q]);
      out += recv_bytes[q];
    }
    world_->barrier(*group_, rank_);
  }

  void run_broadcast(void* data, std::size_t bytes, int root, MemorySpace) override {
    check_rank(root, "broadcast from");
    auto peers = publish(data);
    if (rank_ != root && bytes) std::memcpy(data, peers[root], bytes);
    world_->barrier(*group_, rank_);
  }

  void run_barrier() override { world_->barrier(*group_, rank_); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    struct Choice {
      int color, key;
    } mine{color, key};
    auto peers = publish(&mine);
    std::vector<std::tuple<int, int, int>> chosen;  // (key, rank in this group, world rank)
    for (std::size_t r = 0; r < peers.size(); ++r) {
      const auto& choice = *static_cast<const Choice*>(peers[r]);
      if (color >= 0 && choice.color == color)
        chosen.emplace_back(choice.key, static_cast<int>(r), group_->members[r]);
    }
    world_->barrier(*group_, rank_);
    const auto split_number = splits_++;
    if (color < 0) return nullptr;
    std::sort(chosen.begin(), chosen.end());
    std::vector<int> members;
    int new_rank = 0;
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      members.push_back(std::get<2>(chosen[i]));
      if (std::get<1>(chosen[i]) == rank_) new_rank = static_cast<int>(i);
    }
    auto group = world_->group_for(group_->context, split_number, color, members);
    return std::make_unique<ThreadsCommunicator>(world_, std::move(group), new_rank);
  }

 private:
  // Publishes this rank's pointer, waits for every member, and returns all members' pointers.
  // The caller reads them and then calls barrier() before any member may reuse its buffer.
  std::vector<const void*> publish(const void* mine) {
    group_->slots[rank_] = mine;
    world_->barrier(*group_, rank_);
    return group_->slots;
  }

  void check_rank(int rank, const char* what) const {
    if (rank < 0 || rank >= size())
      throw CommError(std::string("threads transport: cannot ") + what + " rank " +
                      std::to_string(rank) + " in a group of " + std::to_string(size()));
  }
  void check_counts(const std::vector<std::size_t>& counts, const char* what) const {
    if (counts.size() != group_->members.size())
      throw CommError(std::string("threads transport: ") + what + " needs one count per rank (" +
                      std::to_string(size()) + "), got " + std::to_string(counts.size()));
  }
  static void check_equal(std::size_t a, std::size_t b, const std::string& what) {
    if (a != b)
      throw CommError("threads transport: " + what + " is " + std::to_string(a) +
                      " bytes but the receiver expects " + std::to_string(b));
  }

  std::shared_ptr<detail::World> world_;
  std::shared_ptr<detail::Group> group_;
  int rank_;
  std::uint64_t splits_ = 0;
};

/**
 * Runs `body(std::unique_ptr<Communicator>)` on `processors` threads and waits for all of them.
 * If any thread throws, the others stop at their next wait with PeerFailure, and the first
 * exception that was not a PeerFailure is rethrown here.
 */
template <class Body>
void spawn(int processors, Body&& body) {
  if (processors <= 0)
    throw MeshError("threads transport: cannot run on " + std::to_string(processors) +
                    " processors; at least 1 is needed");
  auto world = std::make_shared<detail::World>(processors);
  std::mutex errors_mutex;
  std::exception_ptr first_error, first_peer_failure;
  auto thread_main = [&](int rank) {
    try {
      body(std::unique_ptr<Communicator>(
          std::make_unique<ThreadsCommunicator>(world, world->root(), rank)));
      world->finish(rank);
    } catch (const PeerFailure&) {
      std::lock_guard<std::mutex> lock(errors_mutex);
      if (!first_peer_failure) first_peer_failure = std::current_exception();
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(errors_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      world->fail(rank, e.what());
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(errors_mutex);
        if (!first_error) first_error = std::current_exception();
      }
      world->fail(rank, "unknown exception");
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int rank = 1; rank < processors; ++rank) threads.emplace_back(thread_main, rank);
  } catch (const std::system_error& e) {
    // The threads started stop at their next wait and are joined: one left joinable would end the
    // program (std::terminate) instead of this error.
    const int rank = static_cast<int>(threads.size()) + 1;
    const std::string why = "threads transport: could not start the thread of processor " +
                            std::to_string(rank) + " of " + std::to_string(processors) + " (" +
                            e.what() + "); run on fewer processors";
    world->fail(rank, why);
    for (auto& thread : threads) thread.join();
    throw Error(why);
  }
  thread_main(0);  // the calling thread is processor 0
  for (auto& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (first_peer_failure) std::rethrow_exception(first_peer_failure);
}

}  // namespace meshtensor::threads
