#pragma once
// What the fuzz targets share: a scratch directory of their own (readers take file names, so each
// input is written to a file there first), and the checks of the targets' contract — an input
// parses, or throws one of meshtensor's errors naming what was read; anything else (another
// exception, a crash, a sanitizer report, an invariant that fails) is a bug.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace meshtensor::fuzz {

namespace fs = std::filesystem;

/// A directory only this process writes into: under $TMPDIR, else /dev/shm (memory, so an input
/// costs no disk), else the system's temporary directory; removed when the process exits normally
/// (libFuzzer ends without exit handlers: scripts/fuzz.sh removes what its runs leave).
inline const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    fs::path base = tmp && *tmp ? fs::path(tmp)
                    : fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK) == 0
                        ? fs::path("/dev/shm")
                        : fs::temp_directory_path();
    fs::path d = base / ("meshtensor-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(scratch_dir(), ignored);
    });
    return d;
  }();
  return dir;
}

/// `size` bytes written to `name` in the scratch directory; its path.
inline std::string write_input(const std::string& name, const std::uint8_t* data,
                               std::size_t size) {
  const fs::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path.string();
}

/// Stops the run when an invariant fails: libFuzzer keeps the input that did it.
inline void require(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what.c_str());
  std::abort();
}

/// An error's message must name what was read (a file, a flag's text).
inline void require_named(const std::exception& e, const std::string& name) {
  require(std::strstr(e.what(), name.c_str()) != nullptr,
          "the error \"" + std::string(e.what()) + "\" does not name " + name);
}

/// The same bytes, NaN included (values read twice must be the same values).
template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;
}

}  // namespace meshtensor::fuzz
