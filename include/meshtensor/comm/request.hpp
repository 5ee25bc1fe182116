#pragma once
// The handle of a nonblocking send or receive. A transport fills it with its own completion logic.

#include <memory>
#include <vector>

namespace meshtensor {

namespace detail {
struct RequestImpl {
  virtual ~RequestImpl() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once complete; never blocks
};
}  // namespace detail

/// A pending point-to-point operation; `wait()` blocks until its buffer may be reused or read.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<detail::RequestImpl> impl) : impl_(std::move(impl)) {}

  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return !impl_;
  }
  bool done() const { return !impl_; }

 private:
  std::unique_ptr<detail::RequestImpl> impl_;
};

inline void wait_all(std::vector<Request>& requests) {
  for (auto& request : requests) request.wait();
}

}  // namespace meshtensor
