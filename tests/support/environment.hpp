#pragma once
// An environment variable set for a scope: the knobs the kernels read on each call
// (MESHTENSOR_BF16_PRODUCTS, MESHTENSOR_ROW_BANDS, ...), turned for one part of a test.

#include <cstdlib>
#include <optional>
#include <string>

namespace meshtensor::testing {

/// `name` set to `value` while it lives; what it was before (or unset) afterwards.
class Setting {
 public:
  Setting(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name)) before_ = before;
    setenv(name, value, 1);
  }
  ~Setting() {
    if (before_)
      setenv(name_, before_->c_str(), 1);
    else
      unsetenv(name_);
  }
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

}  // namespace meshtensor::testing
