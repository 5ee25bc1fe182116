#pragma once
// What unet3d prints as it goes. --quiet silences it; errors, warnings and each command's closing
// JSON summary still print.

#include <cstdarg>
#include <cstdio>

namespace unet3d {

/// Set once by main from --quiet, before any processor starts.
inline bool& quiet() {
  static bool silent = false;
  return silent;
}

/// printf to stdout unless --quiet, flushed: progress lines must show as they happen in logs.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline void
say(const char* format, ...) {
  if (quiet()) return;
  std::va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

}  // namespace unet3d
