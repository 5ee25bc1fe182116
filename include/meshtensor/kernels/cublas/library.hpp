#pragma once
// cuBLAS, loaded the first time a GEMM runs on a GPU rather than linked: mapping and relocating
// libcublas and libcublasLt at start-up costs every process about 150 MiB of resident memory,
// GPU or not (the U-Net example on the CPU went from 200 to 350 MiB). The functions meshtensor
// calls are looked up by name, with the header's own signatures.

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "meshtensor/core/error.hpp"

namespace meshtensor::kernels::cublas {

/// The cuBLAS functions meshtensor calls.
struct Library {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&::cublasDgemmStridedBatched) dgemm_strided_batched = nullptr;
};

namespace detail {
// The soname of the cuBLAS meshtensor was compiled against.
inline std::string soname() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

template <class F>
void look_up(void* library, const char* name, F* into) {
  void* symbol = dlsym(library, name);
  if (!symbol)
    throw DeviceError(soname() + " has no " + name + ": it is not the cuBLAS " +
                      std::to_string(CUBLAS_VER_MAJOR) +
                      " meshtensor was built with; put that one on LD_LIBRARY_PATH");
  *into = reinterpret_cast<F>(symbol);
}

inline Library load() {
  // By soname (the loader's path, the program's run path), then where CMake found the toolkit.
  void* library = dlopen(soname().c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process
#if defined(MESHTENSOR_CUDA_LIBRARY_DIR)
  if (!library)
    library = dlopen((std::string(MESHTENSOR_CUDA_LIBRARY_DIR) + "/" + soname()).c_str(),
                     RTLD_NOW | RTLD_LOCAL);
#endif
  if (!library) {
    const char* why = dlerror();
    throw DeviceError("cannot load cuBLAS (" + soname() + "): " + (why ? why : "not found") +
                      "; install the CUDA toolkit's cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
                      " or put its directory on LD_LIBRARY_PATH");
  }
  Library l;
  look_up(library, "cublasCreate_v2", &l.create);
  look_up(library, "cublasDestroy_v2", &l.destroy);
  look_up(library, "cublasSetStream_v2", &l.set_stream);
  look_up(library, "cublasGetStatusString", &l.status_string);
  look_up(library, "cublasSgemmStridedBatched", &l.sgemm_strided_batched);
  look_up(library, "cublasDgemmStridedBatched", &l.dgemm_strided_batched);
  return l;
}
}  // namespace detail

/// cuBLAS's functions, loaded on first use; throws DeviceError naming the library if it cannot be.
inline const Library& library() {
  static const Library loaded = detail::load();
  return loaded;
}

}  // namespace meshtensor::kernels::cublas
