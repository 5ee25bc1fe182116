#pragma once
// How the mpi transport's ranks wait for each other without hanging: every wait polls its MPI
// requests until a deadline (MESHTENSOR_TIMEOUT), and each rank that returns from the run tells
// the others on a communicator of their own, so a rank still waiting for it fails at once with a
// message instead of waiting forever.

#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "meshtensor/comm/deadline.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor::mpi {
namespace detail {

inline void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw CommError(std::string("mpi transport: ") + call + " failed: " + std::string(text, length));
}

inline std::string list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace detail

/// The ranks of one run (an MPI communicator, usually MPI_COMM_WORLD), as its waits see them.
class Watch {
 public:
  explicit Watch(MPI_Comm ranks) {
    detail::check(MPI_Comm_dup(ranks, &notices_), "MPI_Comm_dup");
    MPI_Comm_rank(notices_, &rank_);
    MPI_Comm_size(notices_, &size_);
    returned_.assign(size_, false);
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  ~Watch() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& r : sent_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    MPI_Comm_free(&notices_);
  }

  int rank() const { return rank_; }
  /// The communicator whose ranks the waits name: a group's ranks are translated to these.
  MPI_Comm ranks() const { return notices_; }

  /**
   * Polls `done()` until it answers true. Fails with CommError once one of `peers` (ranks of
   * ranks()) has returned from the run, or after the deadline; `what()` says what was waited for
   * ("a receive of 64 bytes from processor 2 (tag 101)").
   */
  template <class Done, class What>
  void wait(Done&& done, const std::vector<int>& peers, What&& what) {
    if (done()) return;
    const Deadline deadline;
    PollPause pause;
    for (long polls = 0;; ++polls) {
      if (done()) return;
      if (polls % 64 == 0) throw_if_returned(peers, what);
      if (deadline.passed())
        throw CommError("mpi transport: processor " + std::to_string(rank_) + " waited " +
                        deadline.describe() + " for " + what() + "; " + roll_call(peers) +
                        " (every processor must call the same ops in the same order)");
      pause();
    }
  }

  /// Waits until every rank has come here (a barrier that ends like every other wait): blocking
  /// MPI calls after it start with every rank present. `what` names the place in messages.
  void meet(const std::string& what) {
    MPI_Request request = MPI_REQUEST_NULL;
    detail::check(MPI_Ibarrier(notices_, &request), "MPI_Ibarrier");
    std::vector<int> everyone(size_);
    for (int q = 0; q < size_; ++q) everyone[q] = q;
    wait(
        [&] {
          int done = 0;
          detail::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
          return done != 0;
        },
        everyone, [&] { return "every processor to reach " + what; });
  }

  /// Tells every other rank that this one has returned from the run, then waits until each has
  /// returned too, so that none is still waiting for this one when MPI ends.
  void finish() {
    for (int q = 0; q < size_; ++q)
      if (q != rank_) send(q, returned_tag);
    returned_[rank_] = true;
    const Deadline deadline;
    PollPause pause;
    for (receive_notices(); !not_returned().empty(); receive_notices()) {
      if (deadline.passed())
        throw CommError("mpi transport: processor " + std::to_string(rank_) +
                        " returned from the run and waited " + deadline.describe() +
                        " for the others to return too; " + roll_call(not_returned()));
      pause();
    }
    wait(
        [&] {
          receive_notices();  // answers probes of ranks that are still waiting
          int done = 0;
          MPI_Testall(static_cast<int>(sent_.size()), sent_.data(), &done, MPI_STATUSES_IGNORE);
          return done != 0;
        },
        {}, [] { return std::string("its notices to reach the other processors"); });
  }

 private:
  // Tags on the watch's own communicator.
  static constexpr int returned_tag = 1;  // "I have returned from the run"
  static constexpr int probe_tag = 2;     // "are you there?", asked after a timeout
  static constexpr int answer_tag = 3;    // "yes", from a rank in any wait

  // Takes every notice that has arrived, and answers probes.
  void receive_notices() {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      detail::check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, notices_, &arrived, &status),
                    "MPI_Iprobe");
      if (!arrived) return;
      const int from = status.MPI_SOURCE;
      detail::check(
          MPI_Recv(nullptr, 0, MPI_BYTE, from, status.MPI_TAG, notices_, MPI_STATUS_IGNORE),
          "MPI_Recv");
      if (status.MPI_TAG == returned_tag) returned_[from] = true;
      if (status.MPI_TAG == answer_tag) answered_[from] = true;
      if (status.MPI_TAG == probe_tag) send(from, answer_tag);
    }
  }

  void send(int to, int tag) {
    sent_.emplace_back();
    detail::check(MPI_Isend(nullptr, 0, MPI_BYTE, to, tag, notices_, &sent_.back()), "MPI_Isend");
  }

  template <class What>
  void throw_if_returned(const std::vector<int>& peers, What&& what) {
    receive_notices();
    for (int peer : peers)
      if (returned_[peer])
        throw CommError("mpi transport: processor " + std::to_string(rank_) + " waits for " +
                        what() + ", but processor " + std::to_string(peer) +
                        " has already returned from the run; every processor must call the same "
                        "ops in the same order");
  }

  // After a timeout: asks `peers` whether they are there (a rank answers from within any wait),
  // so the message can name the ones that stopped.
  std::string roll_call(const std::vector<int>& peers) {
    std::vector<int> asked;
    for (int peer : peers)
      if (peer != rank_ && peer >= 0) asked.push_back(peer);
    if (asked.empty()) return "nobody else is involved";
    answered_.assign(size_, false);
    for (int peer : asked) send(peer, probe_tag);
    const auto grace = std::chrono::seconds(2);
    const auto start = std::chrono::steady_clock::now();
    std::vector<int> silent;
    do {
      receive_notices();
      silent.clear();
      for (int peer : asked)
        if (!answered_[peer]) silent.push_back(peer);
      if (silent.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } while (std::chrono::steady_clock::now() - start < grace);
    if (silent.empty())
      return "processor(s) " + detail::list(asked) +
             " answered from waits of their own, so they are in other ops than this one";
    return "processor(s) " + detail::list(silent) +
           " did not answer within 2 s: stopped, or busy outside any wait";
  }

  std::vector<int> not_returned() const {
    std::vector<int> ranks;
    for (int q = 0; q < size_; ++q)
      if (!returned_[q]) ranks.push_back(q);
    return ranks;
  }

  MPI_Comm notices_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0;
  std::vector<bool> returned_;     // by rank: has said it returned from the run
  std::vector<bool> answered_;     // by rank: answered the last roll call
  std::vector<MPI_Request> sent_;  // notices, probes and answers on their way
};

}  // namespace meshtensor::mpi
