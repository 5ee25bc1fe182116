#pragma once
// The small text files planning keeps between runs — the networks a user may edit and the
// calibrated kernel throughput — where the XDG conventions put them, read whole, and written under
// a temporary name and renamed, so that no reader ever sees half a file.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "meshtensor/core/environment.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

/// The whole of the text file `path`; an Error naming `what` (a flag, a file's role) if it cannot
/// be read.
inline std::string read_text_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream file(path);
  if (!file) throw Error(what + ": cannot read " + path.string());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// Writes `text` to `path`, creating its directory: to a temporary name, then renamed.
inline void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  const std::string temporary = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary);
    out << text;
    if (!out.flush()) throw Error("cannot write " + temporary);
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace meshtensor
