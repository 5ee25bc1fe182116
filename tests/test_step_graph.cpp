// A training step repeated through StepGraph: on GPUs (the nccl transport; the emulated GPU in
// CI) the second call is captured, halo exchange and all-reduce included, and every later one
// launches the graph without queuing a kernel; the parameters and losses are the step's run as
// it is, bit for bit, Adam's step count and a learning rate set between launches included. On a CPU
// the step runs as it is. A step that waits for its GPU cannot be captured, and says so.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/device/activity.hpp>
#include <meshtensor/device/step_graph.hpp>

#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_step_graph {

namespace {

constexpr int steps = 5;

// Writes step s's input into x, in place (a captured step reads the same block at every launch).
void write_input(Tensor<float>& x, int s) {
  auto view = x.local();
  float* values = view.data();
  for (std::size_t i = 0; i < view.size(); ++i)
    values[i] = std::sin(0.37f * float(i) + 1.3f * float(s));
}

struct Trained {
  std::vector<float> losses, weight;
  std::uint64_t kernels_after_capture = 0, launches = 0;
  std::int64_t adam_steps = 0;
  bool on_gpu = false;
};

// Trains a convolution `steps` steps with Adam, its learning rate falling, on `mesh` (x split as
// `layout` says), through a StepGraph or not: what each processor this process runs saw.
std::vector<Trained> train(const std::string& mesh, const std::string& layout, bool graphed) {
  return on_mesh(MeshShape(mesh), [&](Mesh& m) {
    nn::Parameters<float> params;
    const nn::Conv<float> conv(m, params, "c", Dim("channels", 2), Dim("channels", 3),
                               Window("x, y, z").kernel(3).padding("same"), 7);
    nn::Adam<float> adam(params.trainable());
    auto x = zeros<float>(m, Shape("batch:1, x:6, y:6, z:4, channels:2"), Layout(layout));
    Tensor<float> loss;
    auto step = [&] {
      loss = reduce_mean(square(relu(conv(x))), {"batch", "x", "y", "z", "channels"});
      backward(loss);
      adam.step();
      adam.zero_grad();
    };
    StepGraph graph;
    Trained t;
    std::uint64_t kernels = 0;
    for (int s = 0; s < steps; ++s) {
      write_input(x, s);
      adam.set_learning_rate(0.02 / (1 + s));           // a schedule: set between launches
      if (s == 2) kernels = device_activity().kernels;  // captured by now, where it is
      if (graphed)
        graph.run(step);
      else
        step();
      t.losses.push_back(loss.local()(0));
    }
    t.kernels_after_capture = device_activity().kernels - kernels;
    t.launches = device_activity().graph_launches;
    t.on_gpu = graph.captured();
    t.adam_steps = adam.steps();
    const auto w = conv.weight().local();
    t.weight.assign(w.data(), w.data() + w.size());
    return t;
  });
}

}  // namespace

TEST_CASE("a step run through StepGraph gives the step's results, as a graph on a GPU") {
  // One GPU; two, whose graphs hold the halo exchange and the gradients' all-reduce.
  for (const auto& [mesh, layout] :
       std::vector<std::pair<std::string, std::string>>{{"p:1", ""}, {"p:2", "x:p"}}) {
    INFO(mesh);
    const auto as_is = train(mesh, layout, false), graphed = train(mesh, layout, true);
    REQUIRE(as_is.size() == graphed.size());  // none where this job cannot run the mesh
    for (std::size_t p = 0; p < as_is.size(); ++p) {
      CHECK(graphed[p].losses == as_is[p].losses);  // bit for bit
      CHECK(graphed[p].weight == as_is[p].weight);
      CHECK(as_is[p].losses.front() != as_is[p].losses.back());  // it trained
      CHECK(graphed[p].adam_steps == steps);                     // each launch counted its step
      if (graphed[p].on_gpu) {
        CHECK(graphed[p].launches == steps - 1);         // the captured call's, then one a call
        CHECK(graphed[p].kernels_after_capture == 0);    // the graph queues them, not the host
        CHECK(as_is[p].kernels_after_capture > 3 * 10);  // as it is: every kernel, every step
      } else {
        CHECK(graphed[p].launches == 0);
      }
    }
  }
}

TEST_CASE("blocks allocated between launches are not the graph's") {
  const auto kept = on_mesh(MeshShape("p:1"), [](Mesh& m) {
    auto x = full<float>(m, Shape("x:64"), Layout{}, 1.0f);
    Tensor<float> y;
    StepGraph graph;
    std::vector<Tensor<float>> outside;  // all kept: new ones must take blocks freed since
    bool intact = true;
    for (int s = 0; s < 4; ++s) {
      // Allocated outside the step, after its temporaries were freed: were they blocks of the
      // graph's, the next launch would overwrite them.
      for (int k = 0; k < 3; ++k)
        outside.push_back(full<float>(m, Shape("x:64"), Layout{}, float(10 * s + k)));
      graph.run([&] { y = exp(x * 2.0f) + x; });
      for (std::size_t k = 0; k < outside.size(); ++k)
        intact = intact && outside[k].local()(63) == float(10 * int(k / 3) + int(k % 3));
    }
    return std::pair(intact, y.local()(0));
  });
  if (kept.empty()) return;  // a rank outside the mesh of one
  CHECK(kept[0].first);
  CHECK(kept[0].second == std::exp(2.0f) + 1.0f);
}

TEST_CASE("a step that waits for its GPU cannot be captured, and says so") {
  const auto outcome = on_mesh(MeshShape("p:1"), [](Mesh& m) {
    auto x = full<float>(m, Shape("x:8"), Layout{}, 2.0f);
    StepGraph graph;
    std::string error;
    for (int s = 0; s < 3 && error.empty(); ++s) {
      try {
        graph.run([&] { (void)(x * 3.0f).local()(0); });  // reads a result inside the step
      } catch (const Error& e) {
        error = e.what();
      }
    }
    // The processor goes on as before: its stream and pool are its own again.
    const float after = (x + 1.0f).local()(0);
    return std::tuple(error, after, current_processor().device().is_cuda());
  });
  if (outcome.empty()) return;  // a rank outside the mesh of one
  const auto& [error, after, on_gpu] = outcome[0];
  CHECK(after == 3.0f);
  if (on_gpu) {
    CHECK(error.find("captured as a CUDA graph") != std::string::npos);
    CHECK(error.find("read its results after StepGraph::run") != std::string::npos);
  } else {
    CHECK(error.empty());
  }
}

#if defined(MESHTENSOR_WITH_CUDA)
TEST_CASE("a step whose CUDA calls break the capture leaves no graph, and says why") {
  const auto outcome = on_mesh(MeshShape("p:1"), [](Mesh& m) {
    auto x = full<float>(m, Shape("x:8"), Layout{}, 2.0f);
    Tensor<float> y;
    StepGraph graph;
    std::string error;
    for (int s = 0; s < 2; ++s) {
      try {
        graph.run([&] {
          y = x * 3.0f;
          // Not the library's: CUDA refuses it while the stream is captured.
          if (cuda::computes_on_gpu()) (void)cudaStreamQuery(cuda::compute_stream());
        });
      } catch (const Error& e) {
        error = e.what();
      }
    }
    // The call that broke the capture ran its host code only; the processor goes on.
    const float after = (x + 1.0f).local()(0);
    return std::tuple(error, graph.captured(), after, cuda::computes_on_gpu());
  });
  if (outcome.empty()) return;  // a rank outside the mesh of one
  const auto& [error, captured, after, on_gpu] = outcome[0];
  CHECK_FALSE(captured);
  CHECK(after == 3.0f);
  if (on_gpu)
    CHECK_THAT(error, Catch::Contains("could not be captured as a CUDA graph") &&
                          Catch::Contains("cudaErrorStreamCaptureInvalidated"));
  else
    CHECK(error.empty());
}
#endif

}  // namespace test_step_graph
