#pragma once
// The `threads` transport: N processors as N threads of one process. It needs no launcher and is
// the default, so tests and the quick start run anywhere. Collectives meet at a rendezvous where
// each thread publishes a pointer to its buffer and reads its peers' buffers directly. A send
// copies straight into its receive where that is posted already, and into a buffer otherwise, so
// a send never waits for its receive.

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

// A point-to-point message's address: (communicator context, source, destination, tag), ranks
// in the communicator.
using Key = std::tuple<std::uint64_t, int, int, int>;

// A sent message whose receive was not posted yet: a copy, so that the send completes at once.
struct Message {
  std::unique_ptr<std::byte[]> data;
  std::size_t bytes = 0;
};

// A receive posted before its message: the sender copies straight into its buffer.
struct PostedReceive {
  int receiver;  // world rank: whose condition variable a filling notifies
  void* data;
  std::size_t bytes;
  enum State { waiting, filling, done } state = waiting;
  std::string error;  // a size mismatch, thrown by the receiver
};

// State shared by all threads of one run.
class World {
 public:
  explicit World(int size) : size_(size), finished_(size, false), arrived_(size) {
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
    notify_everyone();
  }

  // Marks a processor whose function returned: whoever waits for it now waits forever.
  void finish(int processor) {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[processor] = true;
    notify_everyone();
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
    const Deadline deadline;  // only a member that has to wait reads the timeout
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

  // Delivers a message: straight into the receive posted for it where there is one (the
  // receiver's buffer), or else into a copy that waits in the mailbox for its receive.
  void send(const Key& key, const void* data, std::size_t bytes) {
    std::shared_ptr<PostedReceive> receive = claim_posted(key);
    if (!receive) {
      Message copy{std::unique_ptr<std::byte[]>(new std::byte[bytes]), bytes};
      if (bytes) std::memcpy(copy.data.get(), data, bytes);
      std::lock_guard<std::mutex> lock(mutex_);
      throw_if_failed();
      auto posted = posted_.find(key);
      if (posted == posted_.end() || posted->second.empty()) {
        mailbox_[key].push_back(std::move(copy));  // its receive, once posted, takes it
        return;
      }
      receive = pop_front(posted);  // posted while the copy was made
    }
    fill(*receive, key, data, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    receive->state = PostedReceive::done;
    arrived_[receive->receiver].notify_all();
  }

  // Posts a receive into `data`: filled at once from a message already in the mailbox, or else
  // kept for its sender to fill.
  std::shared_ptr<PostedReceive> post_receive(const Key& key, int receiver, void* data,
                                              std::size_t bytes) {
    auto receive = std::make_shared<PostedReceive>(
        PostedReceive{receiver, data, bytes, PostedReceive::waiting, {}});
    Message message;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      throw_if_failed();
      auto queue = mailbox_.find(key);
      if (queue == mailbox_.end() || queue->second.empty()) {
        posted_[key].push_back(receive);
        return receive;
      }
      message = std::move(queue->second.front());
      queue->second.pop_front();
    }
    fill(*receive, key, message.data.get(), message.bytes);
    receive->state = PostedReceive::done;
    return receive;
  }

  // Waits until `receive` is filled (or, unless `block`, tells whether it is). `sender` is the
  // source's world rank, watched so that a receive from a processor that has returned fails
  // instead of hanging.
  bool complete(PostedReceive& receive, const Key& key, int sender, bool block) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (block && receive.state != PostedReceive::done) {
      const Deadline deadline;
      const bool ended = arrived_[receive.receiver].wait_until(lock, deadline.when(), [&] {
        return receive.state == PostedReceive::done || failed_ || finished_[sender];
      });
      if (!ended)
        throw CommError("threads transport: a receive (tag " + std::to_string(std::get<3>(key)) +
                        ") waited " + deadline.describe() + " for a message from processor " +
                        std::to_string(sender) +
                        ", which did not send it; every processor must call the same ops in the "
                        "same order");
    }
    if (receive.state != PostedReceive::done) {
      throw_if_failed();
      // A processor that has returned sends nothing more: a receive from it would never end.
      if (finished_[sender])
        throw CommError("threads transport: a receive waits for a message from processor " +
                        std::to_string(sender) +
                        ", which has already returned; every processor must call the same ops in "
                        "the same order");
      return false;
    }
    if (!receive.error.empty()) throw CommError(receive.error);
    return true;
  }

  // Withdraws a receive that is being abandoned (its request destroyed unfinished, as an error
  // unwinds): no sender may write into its buffer afterwards.
  void withdraw(const std::shared_ptr<PostedReceive>& receive, const Key& key) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (receive->state == PostedReceive::waiting) {
      auto& queue = posted_[key];
      queue.erase(std::find(queue.begin(), queue.end(), receive));
      receive->state = PostedReceive::done;
      return;
    }
    arrived_[receive->receiver].wait(lock, [&] { return receive->state == PostedReceive::done; });
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
  void notify_everyone() {
    changed_.notify_all();
    for (auto& arrived : arrived_) arrived.notify_all();
  }

  void throw_if_failed() const {
    if (failed_) throw PeerFailure("stopped because " + failure_);
  }

  // The oldest receive posted for `key`, taken for filling; null where none waits.
  std::shared_ptr<PostedReceive> claim_posted(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    throw_if_failed();
    auto posted = posted_.find(key);
    if (posted == posted_.end() || posted->second.empty()) return nullptr;
    return pop_front(posted);
  }
  template <class Iterator>
  static std::shared_ptr<PostedReceive> pop_front(Iterator posted) {
    std::shared_ptr<PostedReceive> receive = std::move(posted->second.front());
    posted->second.pop_front();
    receive->state = PostedReceive::filling;
    return receive;
  }

  // Copies a message into its receive, outside the lock: the receive is claimed, so nothing else
  // touches it until it is marked done.
  static void fill(PostedReceive& receive, const Key& key, const void* data, std::size_t bytes) {
    if (bytes != receive.bytes) {
      receive.error = "threads transport: rank " + std::to_string(std::get<2>(key)) + " expected " +
                      std::to_string(receive.bytes) + " bytes from rank " +
                      std::to_string(std::get<1>(key)) + " (tag " +
                      std::to_string(std::get<3>(key)) + ") but " + std::to_string(bytes) +
                      " bytes arrived";
      return;
    }
    if (bytes) std::memcpy(receive.data, data, bytes);
  }

  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool failed_ = false;
  std::string failure_;
  std::uint64_t next_context_ = 0;
  std::shared_ptr<Group> root_;
  std::vector<bool> finished_;
  std::vector<std::condition_variable> arrived_;  // per processor: a receive of its was filled
  std::map<Key, std::deque<Message>> mailbox_;    // sent before their receives were posted
  std::map<Key, std::deque<std::shared_ptr<PostedReceive>>> posted_;  // posted before their sends
  std::map<std::tuple<std::uint64_t, std::uint64_t, int>, std::shared_ptr<Group>> groups_;
};

// A receive in flight: done once its sender has filled it; withdrawn if abandoned unfinished.
class ReceiveRequest : public meshtensor::detail::RequestImpl {
 public:
  ReceiveRequest(World& world, Key key, int sender, std::shared_ptr<PostedReceive> receive)
      : world_(world), key_(key), sender_(sender), receive_(std::move(receive)) {}
  ~ReceiveRequest() override {
    if (!finished_) world_.withdraw(receive_, key_);
  }

  void wait() override { finished_ = world_.complete(*receive_, key_, sender_, true); }
  bool test() override { return finished_ = world_.complete(*receive_, key_, sender_, false); }

 private:
  World& world_;
  Key key_;
  int sender_;  // the source's world rank
  std::shared_ptr<PostedReceive> receive_;
  bool finished_ = false;
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
    world_->send({group_->context, rank_, dest, tag}, data, bytes);
    return Request();  // delivered or buffered: complete at once
  }

  Request post_receive(void* data, std::size_t bytes, int source, int tag, MemorySpace) override {
    check_rank(source, "receive from");
    const detail::Key key{group_->context, source, rank_, tag};
    auto receive = world_->post_receive(key, group_->members[rank_], data, bytes);
    return Request(
        std::make_unique<detail::ReceiveRequest>(*world_, key, group_->members[source], receive));
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
