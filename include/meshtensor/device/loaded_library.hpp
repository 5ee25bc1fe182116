#pragma once
// CUDA libraries that meshtensor loads when it first needs them instead of linking them: mapping
// and relocating a big library at start-up costs every process its memory, GPU or not (NVRTC's
// and cuBLAS's are tens to hundreds of MiB resident). A library is looked up by
// soname (the loader's path, then the program's run path), then in the toolkit directory CMake
// found; its functions by name, with the header's own signatures.

#include <dlfcn.h>

#include <string>
#include <utility>

#include "meshtensor/core/error.hpp"

namespace meshtensor::cuda {

/// A library loaded for the rest of the process: `soname` ("libnvrtc.so.13"), named in messages
/// as `what` ("NVRTC 13").
class LoadedLibrary {
 public:
  LoadedLibrary(std::string soname, std::string what)
      : soname_(std::move(soname)), what_(std::move(what)) {
    handle_ = dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed
#if defined(MESHTENSOR_CUDA_LIBRARY_DIR)
    if (!handle_)
      handle_ = dlopen((std::string(MESHTENSOR_CUDA_LIBRARY_DIR) + "/" + soname_).c_str(),
                       RTLD_NOW | RTLD_LOCAL);
#endif
    if (!handle_) {
      const char* why = dlerror();
      throw DeviceError("cannot load " + what_ + " (" + soname_ +
                        "): " + (why ? why : "not found") + "; install the CUDA toolkit's " +
                        what_ + " or put its directory on LD_LIBRARY_PATH");
    }
  }

  /// Sets `into` to the library's function `name`; throws DeviceError naming both when it has none.
  template <class F>
  void look_up(const char* name, F* into) const {
    void* symbol = dlsym(handle_, name);
    if (!symbol)
      throw DeviceError(soname_ + " has no " + name + ": it is not the " + what_ +
                        " meshtensor was built with; put that one on LD_LIBRARY_PATH");
    *into = reinterpret_cast<F>(symbol);
  }

 private:
  std::string soname_, what_;
  void* handle_ = nullptr;
};

}  // namespace meshtensor::cuda
