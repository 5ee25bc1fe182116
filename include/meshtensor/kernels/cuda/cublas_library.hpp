#pragma once
// cuBLAS, loaded the first time a GEMM runs on a GPU rather than linked
// (device/loaded_library.hpp): mapping libcublas and libcublasLt at start-up costs every process
// resident memory, GPU or not.

#include <cublas_v2.h>

#include <string>

#include "meshtensor/device/loaded_library.hpp"

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
inline Library load() {
  const std::string version = std::to_string(CUBLAS_VER_MAJOR);
  const cuda::LoadedLibrary library("libcublas.so." + version, "cuBLAS " + version);
  Library l;
  library.look_up("cublasCreate_v2", &l.create);
  library.look_up("cublasDestroy_v2", &l.destroy);
  library.look_up("cublasSetStream_v2", &l.set_stream);
  library.look_up("cublasGetStatusString", &l.status_string);
  library.look_up("cublasSgemmStridedBatched", &l.sgemm_strided_batched);
  library.look_up("cublasDgemmStridedBatched", &l.dgemm_strided_batched);
  return l;
}
}  // namespace detail

/// cuBLAS's functions, loaded on first use; throws DeviceError naming the library if it cannot be.
inline const Library& library() {
  static const Library loaded = detail::load();
  return loaded;
}

}  // namespace meshtensor::kernels::cublas
