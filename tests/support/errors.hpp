#pragma once
// Collecting the messages of expected errors, so that tests can check them after a run (Catch2
// assertions cannot run on the processor threads).

#include <string>
#include <vector>

#include <meshtensor/core/error.hpp>

namespace meshtensor::testing {

/// Calls `f` and appends the message of the meshtensor::Error it throws, or "no error".
class ErrorLog {
 public:
  template <class F>
  void operator()(F&& f) {
    try {
      f();
      messages_.push_back("no error");
    } catch (const Error& e) {
      messages_.push_back(e.what());
    }
  }
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::vector<std::string> messages_;
};

}  // namespace meshtensor::testing
