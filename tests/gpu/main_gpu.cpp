// Catch2 main for the tests of the GPU kernels: they run on the first GPU this process sees and
// are skipped (exit status 77, reported by ctest as skipped) with the reason where there is none.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include <meshtensor/core/error.hpp>
#include <meshtensor/device/cuda_runtime.hpp>
#include <meshtensor/device/processor.hpp>

int main(int argc, char** argv) {
  try {
    meshtensor::cuda::visible_gpus();
  } catch (const meshtensor::NoGpuError& e) {
    std::printf("SKIPPED: these tests need a GPU: %s\n", e.what());
    return 77;
  }
  // As a processor of the nccl transport: computing on GPU 0, its blocks in the GPU's memory.
  meshtensor::LocalProcessor gpu(meshtensor::Device::cuda(0));
  return Catch::Session().run(argc, argv);
}
