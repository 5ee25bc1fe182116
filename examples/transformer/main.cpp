// A model-parallel transformer: a small decoder-only model learns to sort digits, on any mesh
// and layout given on the command line, with the losses one processor would get.
//
//   transformer train [--mesh "rows:2; cols:2"] [--layout "batch:rows; heads:cols; d_ff:cols"]
//                     [--steps 300] [--batch 32] [--digits 8] [--values 10] [--model 64]
//                     [--heads 4] [--d-head 16] [--d-ff 256] [--layers 2] [--lr 3e-3]
//                     [--seed 1] [--log-every 25] [--check]
//   transformer plan  [the same flags]: one training step's FLOPs, memory and communication per
//                     processor, from the shapes alone
//
// Started by hand it runs one thread per processor; under `mpirun -np N` one rank per processor.
// --check trains the same model on one processor too and fails unless every step's loss matches.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "model.hpp"
#include "task.hpp"

namespace transformer {
namespace {

struct Options {
  std::string command;
  std::string mesh = "p:1", layout = "batch:p";
  std::int64_t steps = 300, batch = 32;
  Task task;
  Config model;
  double lr = 3e-3;
  int log_every = 25;
  bool check = false;
};

std::int64_t positive(const std::string& flag, const std::string& value) {
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || n < 1)
    throw mt::Error("flag " + flag + " takes a positive whole number, got \"" + value + "\"");
  return n;
}

constexpr const char* usage = R"(usage: transformer train|plan [flags]
  train   trains a decoder-only transformer to sort digits on the mesh and layout given
  plan    one training step's FLOPs, memory and communication per processor, from the shapes
flags (defaults in brackets):
  --mesh M        mesh shape, e.g. "rows:2; cols:2" [p:1]
  --layout L      which dim each mesh axis splits: batch, seq, model, heads, d_head, d_ff, vocab
                  ("batch:rows; heads:cols; d_ff:cols" is Mesh-TensorFlow's) [batch:p]
  --steps N [300]  --batch N [32]  --digits N (to sort) [8]  --values N (digit values) [10]
  --model N [64]  --heads N [4]  --d-head N [16]  --d-ff N [256]  --layers N [2]
  --lr X [3e-3]  --seed N [1]  --log-every N [25]
  --check         also train on one processor; fail unless every step's loss matches
Under mpirun -np N it runs one rank per processor (N = the mesh's size).
)";

double positive_number(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(x > 0) || !std::isfinite(x))
    throw mt::Error("flag " + flag + " takes a positive number, got \"" + value + "\"");
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2 || (std::string(argv[1]) != "train" && std::string(argv[1]) != "plan"))
    throw mt::Error("the first argument is the command, train or plan; --help lists the flags");
  o.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--check") {
      o.check = true;
      continue;
    }
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--mesh")
      o.mesh = value;
    else if (flag == "--layout")
      o.layout = value;
    else if (flag == "--steps")
      o.steps = positive(flag, value);
    else if (flag == "--batch")
      o.batch = positive(flag, value);
    else if (flag == "--digits")
      o.task.digits = positive(flag, value);
    else if (flag == "--values")
      o.task.values = positive(flag, value);
    else if (flag == "--model")
      o.model.model = positive(flag, value);
    else if (flag == "--heads")
      o.model.heads = positive(flag, value);
    else if (flag == "--d-head")
      o.model.d_head = positive(flag, value);
    else if (flag == "--d-ff")
      o.model.d_ff = positive(flag, value);
    else if (flag == "--layers")
      o.model.layers = int(positive(flag, value));
    else if (flag == "--seed")
      o.model.seed = std::uint64_t(positive(flag, value));
    else if (flag == "--log-every")
      o.log_every = int(positive(flag, value));
    else if (flag == "--lr")
      o.lr = positive_number(flag, value);
    else
      throw mt::Error("unknown flag " + flag +
                      "; valid flags are --mesh, --layout, --steps, --batch, --digits, --values, "
                      "--model, --heads, --d-head, --d-ff, --layers, --lr, --seed, --log-every "
                      "and --check");
  }
  o.model.vocab = o.task.vocab();
  o.model.length = o.task.length();
  return o;
}

// The loss of one training step on batch `step`; Adam has applied its gradients.
mt::Tensor<float> train_step(Transformer& net, nn::Adam<float>& adam, const Batch& batch) {
  auto loss = mt::softmax_cross_entropy(net(batch.tokens), batch.targets, "vocab");
  mt::backward(loss);
  adam.step();
  adam.zero_grad();
  return loss;
}

// The share of sorted digits the model predicts right on `batch` (the positions with a target).
float accuracy(const Transformer& net, const Batch& batch) {
  mt::autodiff::NoGrad no_grad(batch.tokens.mesh());
  const auto predicted = mt::argmax<float>(net(batch.tokens), "vocab");
  const auto scored = mt::not_equal(batch.targets, -1.0f);
  return mt::reduce_sum(mt::equal(predicted, batch.targets) * scored).item() /
         mt::reduce_sum(scored).item();
}

// Every step's loss, training on `mesh` as the options say; prints progress where `speak`.
std::vector<float> train(mt::Mesh& mesh, const Options& o, const mt::Layout& layout, bool speak,
                         std::vector<double>* step_seconds = nullptr) {
  Transformer net(mesh, o.model, layout);
  nn::Adam<float> adam(net.parameters().trainable(), o.lr);
  std::vector<float> losses;
  for (std::int64_t step = 0; step < o.steps; ++step) {
    const Batch batch = make_batch(mesh, layout, o.task, o.model.seed, step, o.batch);
    const auto begin = std::chrono::steady_clock::now();
    losses.push_back(train_step(net, adam, batch).item());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
    if (step_seconds) step_seconds->push_back(took.count());
    if ((step + 1) % o.log_every != 0 && step + 1 != o.steps) continue;
    const Batch held_out = make_batch(mesh, layout, o.task, o.model.seed + 1, step, o.batch);
    const float right = accuracy(net, held_out);  // every processor takes part in its sums
    if (speak) {
      std::printf("step %5lld  loss %.4f  sorted digits right %.1f%%  step %.3f s\n",
                  (long long)(step + 1), losses.back(), 100.0 * right, took.count());
      std::fflush(stdout);
    }
  }
  return losses;
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_training(mt::Mesh& mesh, const Options& o, const mt::Layout& layout) {
  const bool speaker = mesh.processor() == 0;
  if (speaker)
    std::printf(
        "transformer: sort %lld digits of %lld values; %d layers, model %lld, %lld heads "
        "of %lld, d_ff %lld; batch %lld; mesh %s, layout \"%s\": %d processor(s) on %s\n",
        (long long)o.task.digits, (long long)o.task.values, o.model.layers,
        (long long)o.model.model, (long long)o.model.heads, (long long)o.model.d_head,
        (long long)o.model.d_ff, (long long)o.batch, mesh.shape().to_string().c_str(),
        layout.to_string().c_str(), mesh.num_processors(), mesh.transport().c_str());
  std::vector<double> seconds;
  const std::vector<float> losses = train(mesh, o, layout, speaker, &seconds);
  // The first steps make the pools' blocks and the kernels' primitives: not the steady state.
  const std::vector<double> steady(seconds.begin() + std::min<std::size_t>(2, seconds.size() - 1),
                                   seconds.end());
  const double step_s = mt::all_reduce_value(mesh.world(), median(steady), mt::ReduceOp::max);
  const double held = mt::all_reduce_value(
      mesh.world(), double(mt::memory_stats().peak_held) / (1 << 20), mt::ReduceOp::max);
  const double rss = mt::all_reduce_value(mesh.world(), peak_rss_mib(), mt::ReduceOp::max);
  double largest_gap = 0;
  if (o.check && speaker) {
    std::vector<float> single;
    mt::threads::run(mt::MeshShape{},
                     [&](mt::Mesh& one) { single = train(one, o, mt::Layout{}, false); });
    for (std::size_t s = 0; s < losses.size(); ++s)
      largest_gap = std::max(largest_gap, std::abs(double(losses[s]) - single[s]) /
                                              std::max(1e-12, std::abs(double(single[s]))));
  }
  if (!speaker) return;
  char gap[80] = "";
  if (o.check)
    std::snprintf(gap, sizeof gap, ",\"largest_loss_gap_to_one_processor\":%.3g", largest_gap);
  std::printf(
      "{\"processors\":%d,\"mesh\":\"%s\",\"layout\":\"%s\",\"steps\":%lld,"
      "\"final_loss\":%.6f,\"median_step_s\":%.4f,\"peak_processor_memory_mib\":%.2f,"
      "\"peak_rss_mib\":%.1f%s}\n",
      mesh.num_processors(), mesh.shape().to_string().c_str(), layout.to_string().c_str(),
      (long long)o.steps, losses.back(), step_s, held, rss, gap);
  // Summation orders differ between layouts: float rounding, amplified a little by training.
  if (o.check && !(largest_gap < 1e-4))
    throw mt::Error("--check: a step's loss differs from one processor's by " +
                    std::to_string(largest_gap) + " (relative), more than 1e-4");
}

void run_plan(const Options& o, const mt::MeshShape& mesh, const mt::Layout& layout) {
  const mt::PlanReport report = mt::plan(mesh, layout, [&](mt::Mesh& m) {
    Transformer net(m, o.model, layout);
    nn::Adam<float> adam(net.parameters().trainable(), o.lr);
    for (int step = 0; step < 2; ++step) {  // the first makes Adam's moments
      const Batch batch = make_batch(m, layout, o.task, o.model.seed, step, o.batch);
      if (step == 1) mt::count_from_here(m);
      train_step(net, adam, batch);
    }
  });
  std::printf("transformer plan: one training step, mesh %s, layout \"%s\"\n%s%s\n",
              report.mesh.c_str(), report.layout.c_str(), report.table().c_str(),
              report.json().c_str());
}

}  // namespace
}  // namespace transformer

int main(int argc, char** argv) {
  using namespace transformer;
  Options o;
  mt::MeshShape mesh;
  mt::Layout layout;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", usage);
      return 0;
    }
  try {
    o = parse(argc, argv);
    mesh = mt::MeshShape(o.mesh);
    layout = mt::Layout(o.layout);
  } catch (const std::exception& e) {
    return mt::fail_before_run(argc, argv, e.what(), 2, "transformer");
  }
  if (o.command == "plan") {
    try {
      run_plan(o, mesh, layout);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "transformer: error: %s\n", e.what());
      return 1;
    }
  }
  return mt::run(argc, argv, mesh, [&](mt::Mesh& m) { run_training(m, o, layout); });
}
