// The planning backend (plan/plan.hpp) against real runs: the U-Net example's training steps,
// planned without data, send exactly the messages and collectives a real run sends on every
// processor, hold within 5% of the memory the real run's pool held at its peak, and count the
// FLOPs the model's convolutions have by formula. The counting transport on its own first.

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "step.hpp"
#include "support/environment.hpp"
#include "support/spmd.hpp"

namespace mt = meshtensor;
using mt::testing::on_mesh;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_plan {

TEST_CASE("the counting transport records what would be sent and never waits") {
  mt::CountingCommunicator world(2, 4);
  CHECK(world.transport() == "plan");
  CHECK(world.device().is_plan());
  std::vector<float> values(10, 1.0f);
  world.isend(values.data(), 40, 3, 7).wait();
  world.isend(values.data(), 8, 0, 7).wait();
  world.irecv(values.data(), 12, 1, 9).wait();
  mt::all_reduce(world, values, mt::ReduceOp::sum);
  CHECK(values[0] == 1.0f);  // nobody else contributed anything
  const auto gathered = mt::all_gather(world, std::vector<int>{5, 6});
  CHECK(gathered == std::vector<int>{5, 6, 5, 6, 5, 6, 5, 6});  // each rank as this one
  const auto& counted = world.counted();
  CHECK(counted.sent_by_tag.at(7).calls == 2);
  CHECK(counted.sent_by_tag.at(7).bytes == 48);
  CHECK(counted.received_by_tag.at(9).bytes == 12);
  CHECK(counted.collectives[mt::CountedTraffic::all_reduce].bytes == 40);
  CHECK(counted.collectives[mt::CountedTraffic::all_gather].calls == 2);
  CHECK(world.traffic().messages == 2);
  CHECK(world.traffic().bytes == 48);
  CHECK(world.traffic().collectives == 3);

  auto group = world.split_known(1, 3, 5);
  CHECK(group->rank() == 3);
  CHECK(group->size() == 5);
  CHECK(world.split_known(-1, 0, 5) == nullptr);
  CHECK_THROWS_WITH(world.split(0, 0), Catch::Contains("split_known"));
  CHECK_THROWS_WITH(world.isend(values.data(), 4, 4, 7), Catch::Contains("rank 4"));
}

TEST_CASE("a plan for GPUs takes a GPU's roads: a convolution reads its input's parts joined") {
  // The CPU's kernels read a concatenation's parts where they lie; a GPU's read a copy of them
  // joined, which a plan standing for a run on GPUs holds too.
  auto held_beside_output = [](bool for_gpus) {
    mt::Mesh mesh(mt::MeshShape("p:1"), std::make_unique<mt::CountingCommunicator>(0, 1, for_gpus));
    CHECK(mesh.device().for_gpus == for_gpus);
    const mt::Shape part("x:32, y:32, z:32, channels:8");
    const auto a = mt::zeros<float>(mesh, part), b = mt::zeros<float>(mesh, part);
    const auto w = mt::zeros<float>(mesh, "kx:3, ky:3, kz:3, channels:16, features:8");
    mt::memory_pool().reset_peak();
    const auto out = mt::conv_concat({a, b}, w, mt::Window("x, y, z").padding("same"));
    return mt::memory_stats().peak_in_use - mt::memory_stats().in_use;
  };
  const std::size_t joined = 32 * 32 * 32 * 16 * sizeof(float);
  if (!mt::kernels::reference_kernels) CHECK(held_beside_output(false) < joined);
  CHECK(held_beside_output(true) >= joined);
}

namespace {

struct Case {
  std::string name, mesh, layout;
  std::int64_t size, batch;
  std::string deep_halos = "off";  // the levels whose convolutions share a deep halo
};

// The U-Net at a size a test runs in seconds: two levels, 4 channels at the top; a layout with
// '|' gives each level its own.
unet3d::TrainOptions small_unet(const Case& c) {
  unet3d::TrainOptions o;
  if (c.layout.find('|') != std::string::npos) o.layouts = mt::LayoutSchedule(c.layout);
  o.size = {c.size, c.size, c.size};
  o.batch = c.batch;
  o.depth = 2;
  o.channels = 4;
  o.deep_halos = c.deep_halos;
  return o;
}

struct Measured {
  int processor = 0;
  mt::Communicator::Traffic traffic;
  mt::MemoryStats memory;
};

std::size_t at_peak(const mt::MemoryStats& m, mt::MemoryUse use) {
  return m.at_peak[static_cast<std::size_t>(use)];
}

}  // namespace

TEST_CASE("a plan of the U-Net sends, holds and computes what a real run does") {
  // The plan assumes oneDNN's formats by the channel rule (it cannot time them); the real runs
  // use that rule too, so that their peaks hold no timing scratch.
  const mt::testing::Setting by_channels("MESHTENSOR_ONEDNN_FORMATS", "by_channels");
  const std::vector<Case> cases{
      {"one processor", "p:1", "x:p", 16, 1},
      {"x split", "p:2", "x:p", 16, 1},
      {"x and y split", "a:2; b:2", "x:a; y:b", 16, 1},
      {"2x2x2", "a:2; b:2; c:2", "x:a; y:b; z:c", 16, 1},
      {"batch hybrid", "d:2; s:2", "batch:d; x:s", 16, 2},
      {"uneven split", "p:3", "x:p", 16, 1},
      {"per level: x, then channels", "p:2", "x:p | channels:p", 16, 1},
      {"per level: x and y, then x and channels", "a:2; b:2", "x:a; y:b | x:a; channels:b", 16, 1},
      {"x split, deep halos", "p:2", "x:p", 16, 1, "on"},
      {"2x2x2, deep halos at level 0", "a:2; b:2; c:2", "x:a; y:b; z:c", 16, 1, "0"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name << " on mesh " << c.mesh << ", layout " << c.layout) {
      const mt::MeshShape shape(c.mesh);
      if (!mt::testing::can_run(shape)) continue;
      const auto o = small_unet(c);
      const mt::Layout layout = o.layouts.empty() ? mt::Layout(c.layout) : o.layouts.at(0);
      const auto real = on_mesh(shape, [&](mt::Mesh& mesh) {
        unet3d::model_and_two_steps(mesh, o, layout);
        return Measured{mesh.processor(), mesh.traffic(), mt::memory_stats()};
      });
      const auto plan = mt::plan(
          shape, layout, [&](mt::Mesh& mesh) { unet3d::model_and_two_steps(mesh, o, layout); });
      REQUIRE(plan.processors.size() == std::size_t(shape.num_processors()));
      for (const auto& measured : real) {
        INFO("processor " << measured.processor);
        const auto& planned = plan.processors[std::size_t(measured.processor)];
        CHECK(planned.traffic.messages == measured.traffic.messages);
        CHECK(planned.traffic.bytes == measured.traffic.bytes);
        CHECK(planned.traffic.collectives == measured.traffic.collectives);
        CHECK(planned.traffic.collective_bytes == measured.traffic.collective_bytes);
        // What the peak holds, by use: all of it.
        std::size_t sum = 0;
        for (auto bytes : planned.memory.at_peak) sum += bytes;
        CHECK(sum == planned.memory.peak_in_use);
        // The plan holds blocks as a host pool does; a GPU's pool keeps its own size classes.
        if (mt::testing::transport_under_test() == "nccl") continue;
        // The plan holds what the kernels state they take (the row kernels' planes, oneDNN's
        // operand copies and scratchpad): never more than the measured peak, within 3% of it
        // (equal on the AVX-512 and AVX2 CPUs measured).
        const double measured_peak = double(measured.memory.peak_in_use);
        CHECK(double(planned.memory.peak_in_use) <= measured_peak);
        CHECK(double(planned.memory.peak_in_use) >= 0.97 * measured_peak);
        for (auto use : {mt::MemoryUse::parameters, mt::MemoryUse::optimizer}) {
          INFO(mt::memory_use_name(use));
          CHECK(at_peak(planned.memory, use) > 0);
          CHECK(at_peak(planned.memory, use) == at_peak(measured.memory, use));
        }
      }
      const double conv_flops = plan.total(
          [](const mt::ProcessorPlan& p) { return p.flops(mt::kernels::plan::Family::conv); });
      if (c.deep_halos == "off")
        CHECK(conv_flops == Approx(2 * unet3d::conv_flops_per_step(o)).epsilon(1e-12));
      else  // the rows computed twice
        CHECK(conv_flops > 2 * unet3d::conv_flops_per_step(o));
    }
  }
}

TEST_CASE("a plan reports per processor and over the mesh") {
  unet3d::TrainOptions o;
  o.size = {32, 32, 32};
  o.depth = 3;
  o.channels = 8;
  const mt::Layout layout("x:a; y:b; z:c");
  const auto plan = mt::plan(mt::MeshShape("a:4; b:4; c:4"), layout,
                             [&](mt::Mesh& mesh) { unet3d::model_and_two_steps(mesh, o, layout); });
  REQUIRE(plan.processors.size() == 64);
  // A corner processor has three neighbours, an inner one six: it sends half the halo messages.
  const auto halo = [](const mt::ProcessorPlan& p) { return double(p.sent(mt::tags::halo).calls); };
  CHECK(halo(plan.processors[0]) * 2 == halo(plan.processors[21]));  // (0,0,0) and (1,1,1)
  CHECK(plan.total([](const mt::ProcessorPlan& p) {
    return p.flops(mt::kernels::plan::Family::conv);
  }) == Approx(2 * unet3d::conv_flops_per_step(o)).epsilon(1e-12));
  // Per kind of op: the families add up to the total, and the U-Net's pooling and normalisation
  // (not only its convolutions) are counted.
  using F = mt::kernels::plan::Family;
  const auto total_of = [&](F f) {
    return plan.total([f](const mt::ProcessorPlan& p) { return p.flops(f); });
  };
  double by_family = 0;
  for (int f = 0; f < int(F::count); ++f) by_family += total_of(F(f));
  CHECK(by_family == Approx(plan.total([](const mt::ProcessorPlan& p) { return p.flops(); })));
  CHECK(total_of(F::pool) > 0);
  CHECK(total_of(F::norm) > 0);
  CHECK(total_of(F::optimizer) > 0);
  const std::string json = plan.json();
  CHECK(json.find("\"pool_flops\":{\"total\":") != std::string::npos);
  CHECK(plan.table().find("  normalisation") != std::string::npos);
  CHECK(json.rfind("{\"mesh\":\"[a=4, b=4, c=4]\",\"layout\":\"x:a; y:b; z:c\"", 0) == 0);
  CHECK(json.find("\"halo_bytes\":{\"total\":") != std::string::npos);
  CHECK(plan.table().find("peak memory") != std::string::npos);
  // It says what it assumed of the kernels a real run would choose (on GPUs where the run this
  // process would start computes there: the nccl transport).
  const bool for_gpus = mt::plans_stand_for_devices();
  const auto& policy = mt::current_processor().settings().kernels;
  CHECK(json.find("\"assumed\":\"" + mt::kernels::plan::assumed_kernels(policy, for_gpus) + "\"") !=
        std::string::npos);
  CHECK(plan.table().find("assumed: " + plan.assumed) != std::string::npos);
  if (for_gpus) CHECK(plan.assumed.find("cuDNN's workspace") != std::string::npos);
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
  if (!for_gpus) CHECK(plan.assumed.find("a real run's formats are") != std::string::npos);
#endif
}

TEST_CASE("every processor of a plan for GPUs computes on a GPU's plan device") {
  // Plans run their processors on worker threads as well as the caller's: each must take the
  // plan's settings (here the nccl transport's GPUs), not those of the thread it lands on.
  const mt::testing::Setting nccl("MESHTENSOR_TRANSPORT", "nccl");
  REQUIRE(mt::plans_stand_for_devices());
  std::mutex mutex;
  std::vector<int> for_gpus(8, -1);
  mt::PlanOptions options;
  options.workers = 4;
  options.every_processor = true;
  mt::plan(
      mt::MeshShape("p:8"), mt::Layout("x:p"),
      [&](mt::Mesh& mesh) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // every worker gets a turn
        std::lock_guard<std::mutex> lock(mutex);
        for_gpus[std::size_t(mesh.processor())] = mesh.device().for_gpus;
      },
      options);
  CHECK(for_gpus == std::vector<int>(8, 1));
}

TEST_CASE("a plan runs one processor for each class of like processors") {
  unet3d::TrainOptions o;
  o.depth = 2;
  o.channels = 4;
  auto plan_of = [&](const std::string& mesh, const std::string& rules, std::int64_t size,
                     bool every_processor) {
    o.size = {size, size, size};
    const mt::Layout layout(rules);
    mt::PlanOptions options;
    options.every_processor = every_processor;
    return mt::plan(
        mt::MeshShape(mesh), layout,
        [&](mt::Mesh& mesh) { unet3d::model_and_two_steps(mesh, o, layout); }, options);
  };
  SECTION("even blocks: the middle stands for the inner processors, exactly") {
    const auto some = plan_of("p:12; q:2", "x:p; y:q", 48, false);
    const auto all = plan_of("p:12; q:2", "x:p; y:q", 48, true);
    CHECK(some.planned == 7 * 2);
    CHECK(all.planned == 24);
    for (std::size_t p = 0; p < all.processors.size(); ++p) {
      INFO("processor " << p);
      CHECK(some.processors[p].processor == int(p));
      CHECK(mt::detail::same_work(some.processors[p], all.processors[p]));
    }
  }
  SECTION("uneven blocks differ inside: every processor runs") {
    // 48 over 10: the first 8 blocks are larger, 24 over 10 the first 4: the third and the middle
    // processor differ.
    CHECK(plan_of("p:10", "x:p", 48, false).planned == 10);
  }
}

}  // namespace test_plan
