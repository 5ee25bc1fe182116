// meshtensor's own CUDA kernels are sources compiled at run time by NVRTC, which needs no GPU:
// here every source compiles for the GPU generations meshtensor targets, and a source that does
// not compile is reported with its name and NVRTC's log. cuBLAS, loaded on first use, is found
// with every function meshtensor calls. Runs on machines without a GPU.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include <meshtensor/device/runtime_compiler.hpp>
#include <meshtensor/kernels/cuda/cublas_gemm.hpp>
#include <meshtensor/kernels/cuda/cublas_library.hpp>
#include <meshtensor/kernels/cuda/elementwise.hpp>
#include <meshtensor/kernels/cuda/norm.hpp>
#include <meshtensor/kernels/cuda/optimizer.hpp>
#include <meshtensor/kernels/cuda/pool.hpp>
#include <meshtensor/kernels/cuda/resample.hpp>
#include <meshtensor/kernels/cuda/sum.hpp>

using namespace meshtensor;

TEST_CASE("every kernel source compiles for Turing to Hopper") {
  const std::vector<std::pair<const cuda::KernelSource*, std::vector<std::string>>> sources{
      {&kernels::gpu::elementwise_source(),
       {"map_f32", "map_f64", "times_derivative_f32", "times_derivative_f64", "zip_f32", "zip_f64",
        "copy_1_byte", "copy_2_bytes", "copy_4_bytes", "copy_8_bytes", "convert_f32_bf16",
        "convert_bf16_f32", "accumulate_f32", "accumulate_f64", "map_bf16", "times_derivative_bf16",
        "zip_bf16", "accumulate_bf16"}},
      {&kernels::gpu::sum_source(),
       {"sum_per_output_f32",
        "sum_per_output_f64",
        "sum_chunk_f32",
        "sum_chunk_f64",
        "add_chunks",
        "extreme_per_output_f32",
        "extreme_per_output_f64",
        "extreme_chunk_f32",
        "extreme_chunk_f64",
        "extreme_of_chunks_f32",
        "extreme_of_chunks_f64",
        "widen_f32",
        "narrow_f32",
        "narrow_f64",
        "sum_per_output_bf16",
        "sum_chunk_bf16",
        "narrow_bf16",
        "extreme_per_output_bf16",
        "extreme_chunk_bf16",
        "extreme_of_chunks_bf16",
        "argmax_f32_u8",
        "argmax_bf16_u8",
        "argmax_f64_i32",
        "argmax_bf16_i32"}},
      {&kernels::gpu::optimizer_source(),
       {"sgd_f32", "sgd_f64", "adam_f32", "adam_f64", "adam_advance_f32", "adam_advance_f64"}},
      {&kernels::gpu::norm_source(),
       {"moments_chunk_f32",
        "moments_chunk_f64",
        "combine_moment_chunks",
        "gradient_sums_chunk_f32",
        "gradient_sums_chunk_f64",
        "moments_lanes_f32",
        "moments_lanes_f64",
        "gradient_sums_lanes_f32",
        "gradient_sums_lanes_f64",
        "affine_f32",
        "affine_f64",
        "input_gradient_f32",
        "input_gradient_f64",
        "moments_chunk_bf16",
        "moments_lanes_bf16",
        "gradient_sums_chunk_bf16",
        "gradient_sums_lanes_bf16",
        "affine_bf16",
        "input_gradient_bf16",
        "statistics",
        "coefficients_f32",
        "coefficients_f64",
        "coefficients_bf16",
        "gradient_terms_f32",
        "gradient_terms_f64",
        "gradient_terms_bf16",
        "inverse_std_f32",
        "inverse_std_f64",
        "inverse_std_bf16"}},
      {&kernels::gpu::resample_source(),
       {"resample_f32", "resample_f64", "resample_adjoint_f32", "resample_adjoint_f64",
        "resample_bf16", "resample_adjoint_bf16", "up_sample_tiles_f32", "up_sample_tiles_f64",
        "up_sample_tiles_bf16"}},
      {&kernels::gpu::pool_source(),
       {"max_pool_forward_f32", "avg_pool_forward_f32", "pool_backward_f32",
        "max_pool_forward_bf16", "avg_pool_forward_bf16", "pool_backward_bf16"}},
  };
  for (const auto& [source, kernels] : sources)
    for (const char* architecture : {"compute_75", "compute_80", "compute_90"}) {
      INFO(source->name << " for " << architecture);
      const std::string ptx = cuda::compile_to_ptx(*source, architecture);
      for (const auto& kernel : kernels) {
        INFO("kernel " << kernel);
        CHECK(ptx.find(".entry " + kernel) != std::string::npos);
      }
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

// cuBLAS is not linked into this test: a GEMM that called it directly, not through the loaded
// library, would fail to link here.
template bool meshtensor::kernels::cublas::gemm_sum<float>(
    const kernels::Sizes&, const kernels::Sizes&, const std::array<kernels::FoldOperand<float>, 2>&,
    double*);
template bool meshtensor::kernels::cublas::gemm_sum<double>(
    const kernels::Sizes&, const kernels::Sizes&,
    const std::array<kernels::FoldOperand<double>, 2>&, double*);

TEST_CASE("cuBLAS loads on first use, without a GPU, with every function meshtensor calls") {
  const auto& cublas = kernels::cublas::library();
  CHECK(cublas.create != nullptr);
  CHECK(cublas.destroy != nullptr);
  CHECK(cublas.set_stream != nullptr);
  CHECK(cublas.sgemm_strided_batched != nullptr);
  CHECK(cublas.dgemm_strided_batched != nullptr);
  REQUIRE(cublas.status_string != nullptr);
  CHECK(std::string(cublas.status_string(CUBLAS_STATUS_SUCCESS)).size() > 0);
}
