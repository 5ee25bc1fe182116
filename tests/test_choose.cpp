// Choosing layouts with plans (plan/choose.hpp) and what it prices them with: kernel throughput
// (plan/throughput.hpp, calibrated by plan/calibrate.hpp), networks (plan/network.hpp), the
// step's prediction (plan/predict.hpp), the collectives' wire bytes and rounds (comm/counting.hpp)
// and memory sizes as people write them (core/byte_size.hpp).

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <meshtensor/meshtensor.hpp>

#include "auto_layout.hpp"
#include "step.hpp"

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_choose {

namespace mt = meshtensor;
using mt::kernels::plan::ConvClass;
using mt::kernels::plan::Family;

namespace {

// Kernels that run every family at 1 GFLOP/s (copies: 1 G elements/s) and every convolution at
// 10 GFLOP/s, with 1 microsecond per call.
mt::Throughput simple_kernels(int threads = 1) {
  mt::Throughput t;
  t.machine = "test machine";
  t.threads = threads;
  t.per_second.fill(1e9);
  t.per_second[std::size_t(Family::conv)] = 1e10;
  t.seconds_per_call = 1e-6;
  return t;
}

// A directory of its own under the system's temporary one, for files a test writes.
std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meshtensor-test-choose-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("memory sizes parse as people write them, and what does not parse is refused") {
  CHECK(mt::parse_bytes("2GiB") == 2.0 * 1073741824);
  CHECK(mt::parse_bytes("64G") == 64.0 * 1073741824);
  CHECK(mt::parse_bytes("1.5GB") == 1.5e9);
  CHECK(mt::parse_bytes("512 MiB") == 512.0 * 1048576);
  CHECK(mt::parse_bytes("4096") == 4096);
  CHECK(mt::format_bytes(512) == "512 B");
  CHECK(mt::format_bytes(16384) == "16.0 KiB");
  CHECK(mt::format_bytes(4.5 * 1048576) == "4.5 MiB");
  CHECK(mt::format_bytes(mt::parse_bytes("32GiB")) == "32.0 GiB");
  CHECK_THROWS_WITH(mt::parse_bytes("2XB", "--memory-per-processor"),
                    Catch::Contains("--memory-per-processor \"2XB\": unknown unit \"XB\"") &&
                        Catch::Contains("e.g. 2GiB"));
  CHECK_THROWS_WITH(mt::parse_bytes("lots"), Catch::Contains("\"lots\": not a size"));
  CHECK_THROWS_WITH(mt::parse_bytes("-1G"), Catch::Contains("positive"));
  CHECK_THROWS_WITH(mt::parse_bytes("0"), Catch::Contains("positive"));
  CHECK_THROWS_WITH(mt::parse_bytes("nan"), Catch::Contains("positive"));
}

TEST_CASE("collectives are counted with the bytes a ring sends and the rounds a tree waits") {
  mt::CountingCommunicator world(1, 4);
  std::vector<float> values(1000, 1.0f);
  mt::all_reduce(world, values, mt::ReduceOp::sum);
  const auto& reduced = world.counted().collectives[mt::CountedTraffic::all_reduce];
  CHECK(reduced.bytes == 4000);
  CHECK(reduced.wire_bytes == Approx(2 * 4000.0 * 3 / 4));
  CHECK(reduced.rounds == 4);  // 2 log2(4)
  world.isend(values.data(), 400, 2, 7).wait();
  CHECK(world.counted().sent_by_tag.at(7).wire_bytes == 400);
  CHECK(world.counted().sent_by_tag.at(7).rounds == 1);
  mt::CountingCommunicator alone(0, 1);
  mt::all_reduce(alone, values, mt::ReduceOp::sum);
  CHECK(alone.counted().collectives[mt::CountedTraffic::all_reduce].wire_bytes == 0);
}

TEST_CASE("kernel throughput prices counts and reads back what it writes") {
  mt::Throughput t = simple_kernels();
  t.conv_per_second[ConvClass::of(ConvClass::forward, false, 8, 8)] = 2e10;
  mt::kernels::plan::Counts work;
  work.flops[std::size_t(Family::norm)] = 3e9;
  work.calls[std::size_t(Family::norm)] = 1000;
  work.copied_elements = 1e9;
  work.calls[std::size_t(Family::copy)] = 1000;
  work.conv_flops[ConvClass::of(ConvClass::forward, false, 8, 16)] = 4e10;          // 2e10/s: 2 s
  work.conv_flops[ConvClass::of(ConvClass::backward_input, false, 64, 64)] = 1e10;  // family: 1 s
  work.calls[std::size_t(Family::conv)] = 2;
  CHECK(t.seconds(work) == Approx(3 + 1 + 2 + 1 + 2002e-6));
  // A width not measured is priced as the nearest measured one of its pass.
  CHECK(t.conv_rate(ConvClass::of(ConvClass::forward, false, 32, 32)) == 2e10);

  const mt::Throughput back = mt::Throughput::from_text(t.to_text(), "t.txt");
  CHECK(back.seconds(work) == Approx(t.seconds(work)).epsilon(1e-5));
  CHECK(back.machine == "test machine");
  CHECK(t.with_threads(4).seconds(work) < t.seconds(work));

  CHECK_THROWS_WITH(mt::Throughput::from_text("threads 2\nfamily conf 3\n", "k.txt"),
                    Catch::Contains("k.txt, line 2") && Catch::Contains("unknown kernel family"));
  CHECK_THROWS_WITH(mt::Throughput::from_text("threads x\n", "k.txt"),
                    Catch::Contains("line 1") && Catch::Contains("non-negative number"));
  CHECK_THROWS_WITH(mt::Throughput::from_text("threads 2\n", "k.txt"),
                    Catch::Contains("no \"family conv\" rate"));
}

TEST_CASE("networks come from a file the user may edit, with presets") {
  const auto dir = scratch("networks");
  setenv("MESHTENSOR_CONFIG_DIR", dir.c_str(), 1);
  const mt::Link hdr = mt::network_named("ib-hdr");
  CHECK(hdr.bytes_per_second == 24e9);
  CHECK(hdr.latency_s == Approx(1.5e-6));
  CHECK(hdr.seconds(10, 24e9) == Approx(1 + 15e-6));
  CHECK(std::filesystem::exists(dir / "networks.txt"));
  std::ofstream(dir / "networks.txt", std::ios::app) << "slow-ethernet 50 0.1  # 1 Gb/s\n";
  CHECK(mt::network_named("slow-ethernet").bytes_per_second == 1e8);
  CHECK_THROWS_WITH(mt::network_named("carrier-pigeon"),
                    Catch::Contains("network \"carrier-pigeon\" is not in") &&
                        Catch::Contains("shared-memory, ib-hdr, ib-ndr, nvlink, slow-ethernet"));
  std::ofstream(dir / "networks.txt", std::ios::app) << "broken 1\n";
  CHECK_THROWS_WITH(mt::network_named("ib-hdr"),
                    Catch::Contains("line 7") && Catch::Contains("network \"broken\" needs"));
  unsetenv("MESHTENSOR_CONFIG_DIR");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a prediction is the slowest processor's kernels, shared cores and messages") {
  mt::PlanReport report;
  report.processors.resize(2);
  report.processors[0].work.flops[std::size_t(Family::norm)] = 1e9;  // 1 s
  report.processors[1].work.flops[std::size_t(Family::norm)] = 2e9;  // 2 s
  report.processors[1].processor = 1;
  report.processors[1].counted.sent_by_tag[mt::tags::halo].add(4000000);
  mt::MachineModel machine{simple_kernels(), mt::Link{"test", 1e-5, 1e9, "a test link"}};
  auto step = mt::predict_step(report, machine);
  CHECK(step.processor == 1);
  CHECK(step.compute_s == Approx(2));
  CHECK(step.communication_s == Approx(1e-5 + 4e-3));
  machine.cores_per_node = 2;
  machine.processors_per_node = 8;  // 8 single-threaded processors on 2 cores: 4 to a core
  CHECK(machine.sharing() == 4);
  CHECK(mt::predict_step(report, machine).compute_s == Approx(8));
}

namespace {

// The U-Net at 32^3, depth 3, 4 channels: on 8 processors its level 3 (4^3) is too small to split
// x 8 ways, so every schedule that runs switches the deep levels to another dim.
unet3d::TrainOptions small_unet() {
  unet3d::TrainOptions o;
  o.size = {32, 32, 32};
  o.depth = 3;
  o.channels = 4;
  return o;
}

mt::ChoiceOptions choice_for(const unet3d::TrainOptions& o, double budget) {
  mt::ChoiceOptions c;
  c.budget_bytes = budget;
  c.stages = o.depth + 1;
  c.bases = {mt::Layout("x:p")};
  c.machine = [](const mt::MeshShape& m) {
    mt::MachineModel machine{simple_kernels(), mt::Link{"test", 1e-5, 1e9, "a test link"}};
    machine.cores_per_node = 8;
    machine.processors_per_node = m.num_processors();
    return machine;
  };
  return c;
}

auto unet_step(const unet3d::TrainOptions& o) {
  return [o](mt::Mesh& mesh, const mt::LayoutSchedule& layouts) {
    unet3d::TrainOptions planned = o;
    planned.layouts = layouts;
    unet3d::check_geometry(o.size, o.depth, mesh.shape(), layouts, o.batch);
    unet3d::model_and_two_steps(mesh, planned, layouts.at(0), true);
  };
}

}  // namespace

TEST_CASE("the chosen schedule is the fastest predicted among those that fit the budget") {
  const auto o = small_unet();
  const auto choice = mt::choose_layouts("p:8", choice_for(o, 64.0 * 1048576), unet_step(o));
  REQUIRE(choice.fitting.size() >= 2);
  const auto& best = choice.best();
  CHECK(best.layouts.at(0).to_string() == "x:p");
  CHECK(best.layouts.at(3).mesh_axis_of("x") == std::nullopt);  // level 3 cannot split x 8 ways
  for (const auto& other : choice.fitting) CHECK(best.step.seconds <= other.step.seconds);
  CHECK(!choice.failed.empty());  // "x:p" everywhere among them
  bool x_everywhere_failed = false;
  for (const auto& f : choice.failed)
    x_everywhere_failed |= f.layouts.to_string() == "x:p" &&
                           f.failure.find("fewer than the 8 processors") != std::string::npos;
  CHECK(x_everywhere_failed);

  // The prediction is the plan's: the chosen schedule planned again predicts the same step.
  const auto report =
      mt::plan("p:8", best.layouts.at(0), [&](mt::Mesh& m) { unet_step(o)(m, best.layouts); });
  CHECK(mt::predict_step(report, choice_for(o, 0).machine("p:8")).seconds ==
        Approx(best.step.seconds));
}

TEST_CASE("a budget nothing fits names the least memory and a mesh that would do") {
  const auto o = small_unet();
  const auto loose = mt::choose_layouts("p:2", choice_for(o, 1e12), unet_step(o));
  double least = 1e300;
  for (const auto& f : loose.fitting) least = std::min(least, f.peak_bytes);
  const double budget = least * 0.75;  // under what any schedule on 2 processors needs
  const auto choice = mt::choose_layouts("p:2", choice_for(o, budget), unet_step(o));
  CHECK(choice.fitting.empty());
  REQUIRE(choice.fits_on);
  CHECK(choice.fits_on->first.num_processors() > 2);
  CHECK(choice.fits_on->second.peak_bytes <= budget);
  CHECK_THROWS_WITH(choice.best(),
                    Catch::Contains("no layout schedule fits") &&
                        Catch::Contains("the least any needs is") &&
                        Catch::Contains(std::to_string(choice.fits_on->first.num_processors()) +
                                        " processors (mesh"));
}

TEST_CASE("calibration times a model's own kernels and caches them per thread count") {
  const auto dir = scratch("cache");
  setenv("MESHTENSOR_CACHE_DIR", dir.c_str(), 1);
  auto o = small_unet();
  o.size = {16, 16, 16};
  o.depth = 2;
  o.layouts = mt::LayoutSchedule(std::vector<mt::Layout>{mt::Layout()});
  int runs = 0;
  const auto step = [&](mt::Mesh& mesh) {
    ++runs;
    unet3d::model_and_two_steps(mesh, o, mt::Layout(), /*count_second_only=*/true);
  };
  CHECK_FALSE(mt::cached_throughput(1));
  const mt::Throughput t = mt::throughput(1, step);
  CHECK(runs == 2);
  CHECK(t.threads == 1);
  CHECK(t.machine == mt::cpu_model());
  for (Family f : {Family::conv, Family::norm, Family::elementwise, Family::copy, Family::pool})
    CHECK(t.per_second[std::size_t(f)] > 0);
  CHECK(t.conv_per_second[ConvClass::of(ConvClass::forward, false, 4, 4)] > 0);
  // Cached: a second call reads the file and runs nothing; on request it measures again.
  const mt::Throughput again = mt::throughput(1, step);
  CHECK(runs == 2);
  CHECK(again.seconds_per_call == Approx(t.seconds_per_call).epsilon(1e-5));
  mt::throughput(1, step, /*again=*/true);
  CHECK(runs == 4);
  unsetenv("MESHTENSOR_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

TEST_CASE("many candidates are searched an axis at a time, to a schedule all of them would allow") {
  auto o = small_unet();
  o.depth = 2;  // 3 stages: on 3 axes, 7 moves each, 343 candidates
  auto options = choice_for(o, 64.0 * 1048576);
  options.bases = {mt::Layout("x:a; y:b; z:c")};
  const mt::MeshShape mesh("a:2; b:2; c:2");
  options.weigh_all_up_to = 1000;
  const auto everything = mt::choose_layouts(mesh, options, unet_step(o));
  options.weigh_all_up_to = 10;
  const auto searched = mt::choose_layouts(mesh, options, unet_step(o));
  const std::size_t weighed =
      searched.fitting.size() + searched.too_big.size() + searched.failed.size();
  CHECK(weighed < everything.fitting.size() + everything.too_big.size() + everything.failed.size());
  const auto& best = searched.best();
  CHECK(best.peak_bytes <= options.budget_bytes);
  CHECK(best.step.seconds >= everything.best().step.seconds);
  bool among_all = false;
  for (const auto& option : everything.fitting)
    among_all |= option.layouts.to_string() == best.layouts.to_string() &&
                 option.step.seconds == Approx(best.step.seconds);
  CHECK(among_all);
}

}  // namespace test_choose
