// A run's settings (core/settings.hpp): read from the environment in one place
// (core/environment.hpp), each variable checked and named, and held per processor, so that two
// meshes in one process run with different kernel policies and limits.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <meshtensor/kernels/cpu/rows/conv.hpp>
#include <meshtensor/meshtensor.hpp>

#include "support/op_check.hpp"

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_settings {
using Catch::Matchers::Contains;

namespace {

// The settings an environment of `variables` gives.
Settings from(const std::map<std::string, std::string>& variables) {
  return settings_from([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("the environment overrides the defaults, one variable per field") {
  const Settings defaults = from({});
  CHECK(defaults.kernels.choice == KernelPolicy::Choice::timed);
  CHECK(defaults.kernels.onednn_formats == KernelPolicy::Formats::chosen);
  CHECK(defaults.kernels.row_kernels);
  CHECK(defaults.kernels.math == KernelPolicy::Math::fp32);
  CHECK(defaults.kernels.cpu_instructions == KernelPolicy::CpuInstructions::chosen);
  CHECK(defaults.halo_overlap);
  CHECK(defaults.timeout_seconds == 600);
  CHECK(defaults.check_collectives);  // on unless turned off
  CHECK(defaults.thread_waiting == ThreadWaiting::adaptive);
  CHECK(defaults.transport.empty());

  const Settings set = from({{"MESHTENSOR_KERNELS", "fixed"},
                             {"MESHTENSOR_ONEDNN_FORMATS", "blocked"},
                             {"MESHTENSOR_BF16_CONV", "widened"},
                             {"MESHTENSOR_BF16_PRODUCTS", "float"},
                             {"MESHTENSOR_INPUT_GRADIENT_AS_FORWARD", "never"},
                             {"MESHTENSOR_ROW_KERNELS", "off"},
                             {"MESHTENSOR_ROW_BANDS", "3"},
                             {"MESHTENSOR_MAPPED_INPUTS", "off"},
                             {"MESHTENSOR_MATH", "tf32"},
                             {"MESHTENSOR_MAX_CPU_ISA", "avx2"},
                             {"MESHTENSOR_CONV_KERNEL", "rows"},
                             {"MESHTENSOR_POOL_KERNEL", "pair"},
                             {"MESHTENSOR_SUM_KERNEL", "reference"},
                             {"MESHTENSOR_TRANSPORT", "mpi"},
                             {"MESHTENSOR_DEVICE", "cpu"},
                             {"MESHTENSOR_THREADS_PER_PROCESSOR", "3"},
                             {"MESHTENSOR_HALO_OVERLAP", "off"},
                             {"MESHTENSOR_TIMEOUT", "0"},
                             {"MESHTENSOR_CHECK_COLLECTIVES", "0"},
                             {"MESHTENSOR_MAX_BLOCK_BYTES", "2MiB"},
                             {"MESHTENSOR_THREAD_WAITING", "brief"}});
  const KernelPolicy& k = set.kernels;
  CHECK(k.fixed());
  CHECK(k.onednn_formats == KernelPolicy::Formats::blocked);
  CHECK(k.bf16_conv == KernelPolicy::Bf16Conv::widened);
  CHECK(k.bf16_products == KernelPolicy::Bf16Products::widened);
  CHECK(k.input_gradient_as_forward == KernelPolicy::AsForward::never);
  CHECK_FALSE(k.row_kernels);
  CHECK(k.row_bands == 3);
  CHECK_FALSE(k.mapped_inputs);
  CHECK(k.math == KernelPolicy::Math::tf32);
  CHECK(k.cpu_instructions == KernelPolicy::CpuInstructions::avx2);
  CHECK(k.conv_kernel == "rows");
  CHECK(k.pool_kernel == "pair");
  CHECK(k.sum_kernel == "reference");
  CHECK(set.transport == "mpi");
  CHECK(set.device == "cpu");
  CHECK(set.threads_per_processor == 3);
  CHECK_FALSE(set.halo_overlap);
  CHECK(set.timeout_seconds == 0);
  CHECK_FALSE(set.check_collectives);
  CHECK(set.max_block_bytes == 2 << 20);
  CHECK(set.thread_waiting == ThreadWaiting::brief);
  // OpenMP's own variables leave its waiting to it, unless meshtensor's is set too.
  CHECK(from({{"OMP_WAIT_POLICY", "passive"}}).thread_waiting == ThreadWaiting::openmp);
  CHECK(from({{"GOMP_SPINCOUNT", "1000"}}).thread_waiting == ThreadWaiting::openmp);
  CHECK(from({{"GOMP_SPINCOUNT", "1000"}, {"MESHTENSOR_THREAD_WAITING", "adaptive"}})
            .thread_waiting == ThreadWaiting::adaptive);
  CHECK(from({{"MESHTENSOR_ROW_BANDS", "off"}}).kernels.row_bands == -1);
  CHECK(from({{"MESHTENSOR_CONV_KERNEL", "auto"}}).kernels.conv_kernel.empty());
}

TEST_CASE("a variable with a value that is not valid is refused, naming it and the valid ones") {
  const std::map<std::string, std::string> refusals{
      {"MESHTENSOR_KERNELS", "expected timed or fixed"},
      {"MESHTENSOR_ONEDNN_FORMATS", "expected auto, channels_last, blocked or by_channels"},
      {"MESHTENSOR_BF16_CONV", "expected auto, native or widened"},
      {"MESHTENSOR_BF16_PRODUCTS", "expected auto, dot or float"},
      {"MESHTENSOR_ROW_KERNELS", "expected on or off"},
      {"MESHTENSOR_MATH", "expected fp32 or tf32"},
      {"MESHTENSOR_MAX_CPU_ISA", "expected best, avx512_bf16, avx512, avx2 or baseline"},
      {"MESHTENSOR_ROW_BANDS", "auto, off or a number of rows"},
      {"MESHTENSOR_TRANSPORT", "expected threads, mpi or nccl"},
      {"MESHTENSOR_DEVICE", "expected cpu or cuda"},
      {"MESHTENSOR_THREADS_PER_PROCESSOR", "a number of threads"},
      {"MESHTENSOR_HALO_OVERLAP", "expected on or off"},
      {"MESHTENSOR_TIMEOUT", "give the seconds"},
      {"MESHTENSOR_CHECK_COLLECTIVES", "valid values are 1"},
      {"MESHTENSOR_MAX_BLOCK_BYTES", "write a number and a unit"},
      {"MESHTENSOR_THREAD_WAITING", "expected adaptive, openmp or brief"}};
  for (const auto& [variable, valid] : refusals) {
    INFO(variable);
    CHECK_THROWS_WITH(from({{variable, "sideways"}}),
                      Contains(variable) && Contains("sideways") && Contains(valid));
  }
}

TEST_CASE("two meshes in one process run with different settings at the same time") {
  // Mesh a: row kernels off, a 1 MiB block limit; mesh b: the defaults.
  Settings a = environment_settings(), b = environment_settings();
  a.kernels.row_kernels = false;
  a.max_block_bytes = 1 << 20;
  b.kernels.row_kernels = true;
  b.max_block_bytes = 0;
  struct Seen {
    bool row_kernels = false;
    std::string big_block = "no error";
    std::vector<float> conv;
  };
  const auto body = [](Seen& seen) {
    return [&seen](Mesh& mesh) {
      seen.row_kernels = kernels::rows::enabled();
      try {
        (void)zeros<float>(mesh, "x:1024, y:512", "");  // 2 MiB
      } catch (const ShapeError& e) {
        seen.big_block = e.what();
      }
      const Layout whole("");
      auto x = testing::test_input<float>(mesh, "batch:1, x:24, y:24, z:24, channels:1", whole, 1);
      auto w =
          testing::test_input<float>(mesh, "kx:3, ky:3, kz:3, channels:1, features:8", whole, 2);
      const Tensor<float> y = conv(x, w, Window("x, y, z").padding("same"));
      const auto values = y.local();
      seen.conv.assign(values.begin(), values.end());
    };
  };
  Seen seen_a, seen_b;
  std::thread run_a([&] { threads::run(MeshShape{}, body(seen_a), a); });
  std::thread run_b([&] { threads::run(MeshShape{}, body(seen_b), b); });
  run_a.join();
  run_b.join();
  CHECK_FALSE(seen_a.row_kernels);
  CHECK(seen_b.row_kernels);
  CHECK_THAT(seen_a.big_block, Contains("more than MESHTENSOR_MAX_BLOCK_BYTES (1.0 MiB)"));
  CHECK(seen_b.big_block == "no error");
  // Each computed as one processor alone under its settings does.
  for (auto [settings, seen] : {std::pair{a, &seen_a}, std::pair{b, &seen_b}}) {
    Seen alone;
    threads::run(MeshShape{}, body(alone), settings);
    CHECK(alone.conv == seen->conv);
  }
}

TEST_CASE("a processor's settings are its mesh's, and a mesh made inside a processor inherits") {
  Settings settings = environment_settings();
  settings.halo_overlap = !settings.halo_overlap;
  settings.timeout_seconds = 42;
  LocalProcessor local(settings);
  CHECK(current_processor().settings().timeout_seconds == 42);
  std::vector<double> timeouts(2);
  threads::run("p:2", [&](Mesh& mesh) {
    timeouts[mesh.processor()] = current_processor().settings().timeout_seconds;
  });
  CHECK(timeouts == std::vector<double>{42, 42});
  CHECK(halo_overlap() == settings.halo_overlap);
}

}  // namespace test_settings
