#pragma once
// What unet3d prints as it goes, and the seconds it reports. --quiet silences it; errors, warnings
// and each command's closing JSON summary still print.

#include <chrono>
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

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace unet3d
