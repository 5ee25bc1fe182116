#pragma once
// How long a processor waits for its peers before it gives up. Every wait of every transport ends
// after its timeout (Settings::timeout_seconds, MESHTENSOR_TIMEOUT), so that a processor that
// stopped, or called other ops than its peers, ends the run with a message naming the op and the
// peer instead of hanging it.

#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include "meshtensor/core/error.hpp"
#include "meshtensor/device/processor.hpp"

namespace meshtensor {

/// How long a wait for other processors may last: `seconds` (Settings::timeout_seconds, 600 unless
/// set); 0 waits without limit.
inline std::chrono::duration<double> wait_timeout(double seconds) {
  if (seconds == 0) return std::chrono::duration<double>(std::numeric_limits<double>::infinity());
  return std::chrono::duration<double>(seconds);
}

/// A wait's end: made when the wait starts, from the calling processor's timeout.
class Deadline {
 public:
  Deadline()
      : limit_(wait_timeout(current_processor().settings().timeout_seconds)),
        start_(std::chrono::steady_clock::now()) {}

  bool passed() const { return std::chrono::steady_clock::now() - start_ > limit_; }
  /// The limit, for messages: "600 s (MESHTENSOR_TIMEOUT)".
  std::string describe() const {
    std::string seconds = std::to_string(limit_.count());
    seconds.erase(seconds.find_last_not_of('0') + 1);
    if (seconds.back() == '.') seconds.pop_back();
    return seconds + " s (MESHTENSOR_TIMEOUT)";
  }
  /// Steady-clock time point for condition variables, capped so that "no limit" stays finite.
  std::chrono::steady_clock::time_point when() const {
    const auto far = std::chrono::hours(24 * 365);
    if (limit_ > far) return start_ + far;
    return start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(limit_);
  }

 private:
  std::chrono::duration<double> limit_;
  std::chrono::steady_clock::time_point start_;
};

/// Pauses between polls of a wait: spins first (a message between processes on one host arrives
/// in microseconds), then yields, then sleeps up to a millisecond so a long wait leaves the cores
/// to the processors that compute.
class PollPause {
 public:
  void operator()() {
    ++polls_;
    if (polls_ < 2000) return;
    if (polls_ < 4000) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(polls_ < 10000 ? 50 : 1000));
  }

 private:
  long polls_ = 0;
};

}  // namespace meshtensor
