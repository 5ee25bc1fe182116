#pragma once
// A setting turned for one part of a test, written as its environment variable
// (MESHTENSOR_BF16_PRODUCTS=float, MESHTENSOR_ROW_BANDS=2, ...): while it lives, the calling thread
// works for a processor whose settings are the current processor's with that variable applied
// (settings_from), so kernels called here and meshes made here run with it.

#include <cstring>
#include <optional>

#include <meshtensor/core/environment.hpp>
#include <meshtensor/device/processor.hpp>

namespace meshtensor::testing {

/// `name` set to `value` for the kernels and meshes of the calling thread while it lives.
class Setting {
 public:
  Setting(const char* name, const char* value)
      : processor_(current_processor().device(), with(name, value)) {}
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;

  /// The current processor's settings with `name` set to `value`.
  static Settings with(const char* name, const char* value) {
    return settings_from(
        [&](const char* asked) { return std::strcmp(asked, name) == 0 ? value : nullptr; },
        current_processor().settings());
  }

 private:
  LocalProcessor processor_;
};

}  // namespace meshtensor::testing
