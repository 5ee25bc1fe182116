// meshtensor's own CUDA kernels are sources compiled at run time by NVRTC, which needs no GPU:
// here every source compiles for the GPU generations meshtensor targets, and a source that does
// not compile is reported with its name and NVRTC's log. Runs on machines without a GPU.
#include <catch2/catch.hpp>

#include <string>

#include <meshtensor/device/runtime_compiler.hpp>
#include <meshtensor/kernels/gpu/elementwise.hpp>

using namespace meshtensor;

TEST_CASE("every kernel source compiles for Turing to Hopper") {
  for (const cuda::KernelSource* source : {&kernels::gpu::elementwise_source()})
    for (const char* architecture : {"compute_75", "compute_80", "compute_90"}) {
      INFO(source->name << " for " << architecture);
      const std::string ptx = cuda::compile_to_ptx(*source, architecture);
      CHECK(ptx.find(".entry accumulate_f32") != std::string::npos);
      CHECK(ptx.find(".entry accumulate_f64") != std::string::npos);
    }
}

TEST_CASE("a source that does not compile is named, with the compiler's log") {
  const cuda::KernelSource broken{"broken_kernel.cu",
                                  "extern \"C\" __global__ void k(float* x) { x[0] = y; }"};
  try {
    cuda::compile_to_ptx(broken, "compute_80");
    FAIL("the broken source compiled");
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    CHECK(message.find("broken_kernel.cu") != std::string::npos);
    CHECK(message.find("compute_80") != std::string::npos);
    CHECK(message.find("identifier \"y\" is undefined") != std::string::npos);
  }
}
