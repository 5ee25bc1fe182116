#pragma once
// The `mpi` transport: one processor per MPI rank, over Boost.MPI and Open MPI. Boost.MPI owns the
// environment and the communicators; the byte-level calls go straight to the MPI C API, which has
// the variable-count collectives Boost.MPI lacks. Messages above MPI's int count limit are split.
// No wait hangs (mpi_watch.hpp): messages are polled until MESHTENSOR_TIMEOUT, and each collective
// starts with a non-blocking barrier polled the same way, so the blocking call after it runs only
// once every member is there.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/mpi_watch.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor::mpi {
namespace detail {

// Largest piece sent in one MPI call; a multiple of every element size.
constexpr std::size_t max_chunk_bytes = std::size_t{1} << 30;

inline MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::bf16:
      return MPI_UINT16_T;  // the bits; bf16_op() combines them as values
  }
  return MPI_BYTE;
}

// MPI has no bfloat16: its reductions are user ops over the 16-bit words, combined in float and
// rounded once per pair, as the threads transport combines them.
template <ReduceOp op>
void combine_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const bfloat16*>(in);
  auto* b = static_cast<bfloat16*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = meshtensor::detail::combine(op, b[i], a[i]);
}

inline MPI_Op bf16_op(ReduceOp op) {
  // Created once per process, on first use (after MPI_Init), and left for MPI_Finalize.
  static const std::array<MPI_Op, 3> ops = [] {
    std::array<MPI_Op, 3> made{};
    MPI_Op_create(&combine_bf16<ReduceOp::sum>, /*commute=*/1, &made[0]);
    MPI_Op_create(&combine_bf16<ReduceOp::max>, 1, &made[1]);
    MPI_Op_create(&combine_bf16<ReduceOp::min>, 1, &made[2]);
    return made;
  }();
  return ops[static_cast<std::size_t>(op)];
}

inline MPI_Op mpi_op(ReduceOp op, DType type) {
  if (type == DType::bf16) return bf16_op(op);
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

// What a message is, for the messages of a wait that never ends; put into words only then.
struct MessageInfo {
  const char* kind;       // "a send", "a receive"
  const char* direction;  // "to", "from"
  std::size_t bytes;
  int processor;  // the peer, a rank of the watch
  int tag;

  std::string describe() const {
    return std::string(kind) + " of " + std::to_string(bytes) + " bytes " + direction +
           " processor " + std::to_string(processor) + " (tag " + std::to_string(tag) + ")";
  }
};

// A message posted in pieces; waited for through the watch, which names it if it never ends.
class MpiRequest : public meshtensor::detail::RequestImpl {
 public:
  MpiRequest(std::vector<MPI_Request> requests, std::shared_ptr<Watch> watch, MessageInfo info)
      : requests_(std::move(requests)), watch_(std::move(watch)), info_(info) {}
  ~MpiRequest() override {
    // A request abandoned by an exception must not be left pending inside MPI.
    for (auto& r : requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  void wait() override {
    watch_->wait([this] { return test(); }, {info_.processor}, [this] { return info_.describe(); });
  }
  bool test() override {
    int done = 0;
    check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
    return done != 0;
  }

 private:
  std::vector<MPI_Request> requests_;
  std::shared_ptr<Watch> watch_;
  MessageInfo info_;
};

inline int as_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw CommError(std::string("mpi transport: ") + what + " of " + std::to_string(n) +
                    " exceeds MPI's int count limit");
  return static_cast<int>(n);
}

}  // namespace detail

/// A communicator over MPI ranks.
class MpiCommunicator final : public Communicator {
 public:
  /// Over the ranks of `comm`; the communicators split from it share its watch.
  explicit MpiCommunicator(boost::mpi::communicator comm)
      : MpiCommunicator(comm, std::make_shared<Watch>(static_cast<MPI_Comm>(comm))) {}
  MpiCommunicator(boost::mpi::communicator comm, std::shared_ptr<Watch> watch)
      : comm_(std::move(comm)), watch_(std::move(watch)), members_(watched_ranks()) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::string transport() const override { return "mpi"; }
  int processor_of(int rank) const override { return members_.at(rank); }
  MPI_Comm native() const { return static_cast<MPI_Comm>(comm_); }
  /// The watch over the run's ranks: finish() it when this rank returns from the run.
  const std::shared_ptr<Watch>& watch() const { return watch_; }

 private:
  // Large messages travel as consecutive pieces with one tag; MPI keeps their order.
  Request post_send(const void* data, std::size_t bytes, int dest, int tag, MemorySpace) override {
    check_peer(dest, "a send to");
    std::vector<MPI_Request> requests;
    auto* p = static_cast<const char*>(data);
    for_each_chunk(bytes, [&](std::size_t offset, int n) {
      requests.emplace_back();
      detail::check(MPI_Isend(p + offset, n, MPI_BYTE, dest, tag, native(), &requests.back()),
                    "MPI_Isend");
    });
    return message(std::move(requests), "a send", bytes, "to", dest, tag);
  }

  Request post_receive(void* data, std::size_t bytes, int source, int tag, MemorySpace) override {
    check_peer(source, "a receive from");
    std::vector<MPI_Request> requests;
    auto* p = static_cast<char*>(data);
    for_each_chunk(bytes, [&](std::size_t offset, int n) {
      requests.emplace_back();
      detail::check(MPI_Irecv(p + offset, n, MPI_BYTE, source, tag, native(), &requests.back()),
                    "MPI_Irecv");
    });
    return message(std::move(requests), "a receive", bytes, "from", source, tag);
  }

  Request message(std::vector<MPI_Request> requests, const char* kind, std::size_t bytes,
                  const char* direction, int peer, int tag) {
    return Request(std::make_unique<detail::MpiRequest>(
        std::move(requests), watch_,
        detail::MessageInfo{kind, direction, bytes, processor_of(peer), tag}));
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw CommError("mpi transport: " + std::string(what) + " rank " + std::to_string(peer) +
                      " in a group of " + std::to_string(size()) + "; ranks are 0 to " +
                      std::to_string(size() - 1));
  }

  // Every member reaches a non-blocking barrier, polled through the watch, before a blocking
  // collective starts: a member that stopped or returned is found there, not inside MPI.
  template <class What>
  void arrive(What&& what) {
    if (size() == 1) return;
    MPI_Request request = MPI_REQUEST_NULL;
    detail::check(MPI_Ibarrier(native(), &request), "MPI_Ibarrier");
    auto arrived = [&] {
      int done = 0;
      detail::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    };
    watch_->wait(arrived, members_, [&] {
      return std::string(what()) + " with the other processors of its group (" +
             detail::list(members_) + ") to arrive";
    });
  }

  std::vector<int> watched_ranks() const {
    MPI_Group mine, watched;
    MPI_Comm_group(native(), &mine);
    MPI_Comm_group(watch_->ranks(), &watched);
    std::vector<int> ranks(size()), result(size());
    for (int r = 0; r < size(); ++r) ranks[r] = r;
    MPI_Group_translate_ranks(mine, size(), ranks.data(), watched, result.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&watched);
    return result;
  }

 public:
  void run_all_reduce(void* data, std::size_t count, DType type, ReduceOp op,
                      MemorySpace) override {
    arrive([&] {
      return "all_reduce of " + std::to_string(count) + " " + to_string(type) + " elements (" +
             to_string(op) + ")";
    });
    const std::size_t element = dtype_size(type);
    auto* p = static_cast<char*>(data);
    for_each_chunk(count * element, [&](std::size_t offset, int n) {
      detail::check(MPI_Allreduce(MPI_IN_PLACE, p + offset, n / static_cast<int>(element),
                                  detail::mpi_type(type), detail::mpi_op(op, type), native()),
                    "MPI_Allreduce");
    });
  }

  void run_all_gather(const void* send, std::size_t send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace) override {
    arrive([&] { return "all_gather of " + std::to_string(send_bytes) + " bytes"; });
    std::vector<int> counts, displacements;
    std::size_t offset = 0;
    for (auto bytes : recv_bytes) {
      counts.push_back(detail::as_int(bytes, "an all_gather contribution"));
      displacements.push_back(detail::as_int(offset, "an all_gather result"));
      offset += bytes;
    }
    detail::check(
        MPI_Allgatherv(send, detail::as_int(send_bytes, "an all_gather contribution"), MPI_BYTE,
                       recv, counts.data(), displacements.data(), MPI_BYTE, native()),
        "MPI_Allgatherv");
  }

  void run_reduce_scatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                          DType type, ReduceOp op, MemorySpace) override {
    arrive([&] {
      return "reduce_scatter of " + to_string(type) + " elements (" + to_string(op) + ")";
    });
    std::vector<int> int_counts;
    for (auto n : counts) int_counts.push_back(detail::as_int(n, "a reduce_scatter block"));
    detail::check(MPI_Reduce_scatter(send, recv, int_counts.data(), detail::mpi_type(type),
                                     detail::mpi_op(op, type), native()),
                  "MPI_Reduce_scatter");
  }

  void run_all_to_all(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                      const std::vector<std::size_t>& recv_bytes, MemorySpace) override {
    arrive([] { return "all_to_all"; });
    auto layout = [](const std::vector<std::size_t>& bytes, std::vector<int>& counts,
                     std::vector<int>& displacements) {
      std::size_t offset = 0;
      for (auto n : bytes) {
        counts.push_back(detail::as_int(n, "an all_to_all block"));
        displacements.push_back(detail::as_int(offset, "an all_to_all buffer"));
        offset += n;
      }
    };
    std::vector<int> send_counts, send_displacements, recv_counts, recv_displacements;
    layout(send_bytes, send_counts, send_displacements);
    layout(recv_bytes, recv_counts, recv_displacements);
    detail::check(MPI_Alltoallv(send, send_counts.data(), send_displacements.data(), MPI_BYTE, recv,
                                recv_counts.data(), recv_displacements.data(), MPI_BYTE, native()),
                  "MPI_Alltoallv");
  }

  void run_broadcast(void* data, std::size_t bytes, int root, MemorySpace) override {
    arrive([&] {
      return "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
    });
    auto* p = static_cast<char*>(data);
    for_each_chunk(bytes, [&](std::size_t offset, int n) {
      detail::check(MPI_Bcast(p + offset, n, MPI_BYTE, root, native()), "MPI_Bcast");
    });
  }

  void run_barrier() override {
    arrive([] { return "barrier"; });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    arrive([] { return "split"; });
    MPI_Comm part = MPI_COMM_NULL;
    detail::check(MPI_Comm_split(native(), color < 0 ? MPI_UNDEFINED : color, key, &part),
                  "MPI_Comm_split");
    if (part == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(
        boost::mpi::communicator(part, boost::mpi::comm_take_ownership), watch_);
  }

 private:
  // Calls f(offset, n) for consecutive pieces of at most max_chunk_bytes; once for 0 bytes, so that
  // an empty message still matches an empty receive.
  template <class F>
  static void for_each_chunk(std::size_t bytes, F&& f) {
    std::size_t offset = 0;
    do {
      const std::size_t n = std::min(detail::max_chunk_bytes, bytes - offset);
      f(offset, static_cast<int>(n));
      offset += n;
    } while (offset < bytes);
  }

  boost::mpi::communicator comm_;
  std::shared_ptr<Watch> watch_;
  std::vector<int> members_;  // each rank's rank in the watch
};

}  // namespace meshtensor::mpi
