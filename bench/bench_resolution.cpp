// The seeds' resolution experiment (issue 23): at a fixed field of view, does tumour Dice rise with
// resolution? The example's U-Net is trained for --steps steps on phantoms sampled at --size³, then
// scored on held-out volumes against the labels of the same anatomy sampled at --truth-size³: its
// class probabilities are upsampled trilinearly to the full resolution and their argmax compared
// with the full-resolution truth. The phantom draws each volume's anatomy from its seed in
// fractions of the field of view (tumour radii scale with the size), so every resolution sees the
// same organs and tumours; only the voxel grid, and so the noise drawn per voxel, differs.
// One JSON object on stdout, progress on stderr.
//
//   bench_resolution --size 32 [--truth-size 128] [--steps 200] [--channels 8] [--depth 3]
//                    [--lr 3e-3] [--seed 1] [--volumes 8] [--mesh p:1]

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"
#include "step.hpp"

namespace mt = meshtensor;

namespace {

using Clock = std::chrono::steady_clock;
using Size3 = std::array<std::int64_t, 3>;

struct Options {
  std::int64_t size = 64;         // the resolution trained and predicted at
  std::int64_t truth_size = 128;  // the full resolution the predictions are scored against
  int steps = 200;
  int channels = 8;
  int depth = 3;
  double lr = 3e-3;
  std::uint64_t seed = 1;
  int volumes = 8;  // held-out volumes scored
  std::string mesh = "p:1";
};

void check(const Options& o) {
  if (o.size < 1 || o.truth_size % o.size != 0)
    throw mt::Error("--truth-size " + std::to_string(o.truth_size) +
                    " must be a multiple of --size " + std::to_string(o.size));
  if (o.size % (std::int64_t(1) << o.depth) != 0)
    throw mt::Error("--size " + std::to_string(o.size) + " must be a multiple of 2^--depth");
  if (o.steps < 1 || o.volumes < 1) throw mt::Error("--steps and --volumes must be at least 1");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw mt::Error("flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--size")
      o.size = std::stoll(value);
    else if (flag == "--truth-size")
      o.truth_size = std::stoll(value);
    else if (flag == "--steps")
      o.steps = std::stoi(value);
    else if (flag == "--channels")
      o.channels = std::stoi(value);
    else if (flag == "--depth")
      o.depth = std::stoi(value);
    else if (flag == "--lr")
      o.lr = std::stod(value);
    else if (flag == "--seed")
      o.seed = std::stoull(value);
    else if (flag == "--volumes")
      o.volumes = std::stoi(value);
    else if (flag == "--mesh")
      o.mesh = value;
    else
      throw mt::Error("unknown flag " + flag +
                      "; valid flags are --size, --truth-size, --steps, --channels, --depth, "
                      "--lr, --seed, --volumes and --mesh");
  }
  check(o);
  return o;
}

Size3 cube(std::int64_t n) { return {n, n, n}; }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// unet3d train's schedule: cosine decay from --lr to a tenth of it over the run.
double learning_rate(const Options& o, int step) {
  return o.lr * (0.1 + 0.45 * (1 + std::cos(3.141592653589793 * step / double(o.steps))));
}

struct Training {
  double seconds = 0, median_step_s = 0, final_loss = 0;
};

// --steps steps of batch 1, a fresh phantom each ("train" volumes 0, 1, ...: the same anatomy at
// every resolution), with unet3d train's loss, class weights and optimiser.
Training train(mt::Mesh& mesh, unet3d::UNet& net, const Options& o, const mt::Layout& layout) {
  mt::nn::Adam<float> adam(net.parameters().trainable(), o.lr);
  const auto weights = unet3d::class_weights(mesh, unet3d::TrainOptions{});
  std::vector<double> step_seconds;
  Training result;
  const auto start = Clock::now();
  for (int step = 0; step < o.steps; ++step) {
    const auto begin = Clock::now();
    adam.set_learning_rate(learning_rate(o, step));
    const auto batch = unet3d::make_batch(mesh, layout, o.seed, "train", step, 1, cube(o.size));
    result.final_loss = unet3d::train_step(net, adam, batch, weights).second.item();
    step_seconds.push_back(seconds_since(begin));
    if (mesh.processor() == 0 && ((step + 1) % 25 == 0 || step + 1 == o.steps))
      std::fprintf(stderr, "bench_resolution %lld³: step %d/%d loss %.4f (%.2f s/step)\n",
                   (long long)o.size, step + 1, o.steps, result.final_loss, step_seconds.back());
  }
  result.seconds = seconds_since(start);
  std::sort(step_seconds.begin(), step_seconds.end());
  result.median_step_s = step_seconds[step_seconds.size() / 2];
  return result;
}

// One tumour of a held-out volume: its radius and how many of its full-resolution voxels the
// upsampled prediction labels tumour.
struct TumourFound {
  int volume = 0;
  double radius_fraction = 0;  // of the field of view
  double truth_voxels = 0, found_voxels = 0;
};

struct Evaluation {
  unet3d::Overlap native;   // predictions against the labels at the trained resolution
  unet3d::Overlap full;     // upsampled predictions against the full-resolution truth
  unet3d::Overlap sampled;  // the trained resolution's own true labels, repeated, against it
  std::vector<TumourFound> tumours;
  double seconds = 0;
};

// The full-resolution voxels of tumour `which` alone (where others overlap it too), as 0/1.
mt::Tensor<float> tumour_mask(mt::Mesh& mesh, const unet3d::Anatomy& anatomy, std::size_t which,
                              const Size3& size, const mt::Layout& layout) {
  unet3d::Anatomy alone = anatomy;
  alone.tumours = {anatomy.tumours[which]};
  const mt::Shape shape{mt::Dim("batch", 1), mt::Dim("x", size[0]), mt::Dim("y", size[1]),
                        mt::Dim("z", size[2])};
  return mt::generate<float>(mesh, shape, layout, [&](const mt::Index& i) {
    const Size3 at{i["x"], i["y"], i["z"]};
    return float(unet3d::voxel(alone, size, at, /*noise=*/0).label == unet3d::tumour);
  });
}

// How much of each tumour of held-out volume `k` the (upsampled) probabilities label tumour.
std::vector<TumourFound> score_tumours(mt::Mesh& mesh, const Options& o, const mt::Layout& layout,
                                       int k, const mt::Tensor<float>& probabilities) {
  const auto winner = mt::equal(probabilities, mt::reduce_max(probabilities, "classes"));
  const auto predicted_tumour =
      mt::crop(winner, "classes", unet3d::tumour, unet3d::num_classes - 1 - unet3d::tumour);
  const Size3 truth = cube(o.truth_size);
  const unet3d::Anatomy anatomy(unet3d::volume_seed(o.seed, "validation", k), truth);
  std::vector<TumourFound> found;
  for (std::size_t t = 0; t < anatomy.tumours.size(); ++t) {
    const auto mask = tumour_mask(mesh, anatomy, t, truth, layout);
    TumourFound f;
    f.volume = k;
    f.radius_fraction = anatomy.tumours[t].radius_voxels / double(o.truth_size);
    f.truth_voxels = mt::reduce_sum(mask).item();
    f.found_voxels = mt::reduce_sum(mask * predicted_tumour).item();
    found.push_back(f);
  }
  return found;
}

// Held-out volumes ("validation" 0 .. --volumes - 1), each predicted at the trained resolution and
// scored there and against the same anatomy at the full resolution.
Evaluation evaluate(mt::Mesh& mesh, unet3d::UNet& net, const Options& o, const mt::Layout& layout) {
  mt::autodiff::NoGrad no_grad(mesh);
  const std::int64_t factor = o.truth_size / o.size;
  Evaluation e;
  const auto start = Clock::now();
  for (int k = 0; k < o.volumes; ++k) {
    const auto low = unet3d::make_batch(mesh, layout, o.seed, "validation", k, 1, cube(o.size));
    const auto truth =
        unet3d::make_batch(mesh, layout, o.seed, "validation", k, 1, cube(o.truth_size));
    const auto probabilities = mt::softmax(net(low.input, /*training=*/false), "classes");
    const auto upsampled =
        mt::upsample(probabilities, unet3d::spatial, factor, mt::Interpolation::linear);
    e.native += unet3d::overlap(probabilities, low.labels);
    e.full += unet3d::overlap(upsampled, truth.labels);
    e.sampled += unet3d::overlap(mt::upsample(low.labels, unet3d::spatial, factor), truth.labels);
    for (const auto& f : score_tumours(mesh, o, layout, k, upsampled)) e.tumours.push_back(f);
  }
  e.seconds = seconds_since(start);
  return e;
}

std::string tumours_json(const std::vector<TumourFound>& tumours) {
  std::string out = "[";
  for (const auto& t : tumours) {
    char item[160];
    std::snprintf(item, sizeof item,
                  "%s{\"volume\":%d,\"radius_fraction\":%.5f,\"truth_voxels\":%.0f,"
                  "\"found_voxels\":%.0f}",
                  out.size() > 1 ? "," : "", t.volume, t.radius_fraction, t.truth_voxels,
                  t.found_voxels);
    out += item;
  }
  return out + "]";
}

void report(mt::Mesh& mesh, const Options& o, const Training& t, const Evaluation& e) {
  using unet3d::organ;
  using unet3d::tumour;
  std::printf(
      "{\"bench\":\"resolution\",\"size\":%lld,\"truth_size\":%lld,\"steps\":%d,\"channels\":%d,"
      "\"depth\":%d,\"lr\":%g,\"seed\":%llu,\"volumes\":%d,\"processors\":%d,\"threads\":%d,"
      "\"train_s\":%.1f,\"step_s\":%.4f,\"final_loss\":%.4f,\"evaluate_s\":%.1f,"
      "\"dice_tumour\":%.4f,\"dice_organ\":%.4f,\"native_dice_tumour\":%.4f,"
      "\"native_dice_organ\":%.4f,\"sampled_dice_tumour\":%.4f,\"sampled_dice_organ\":%.4f,"
      "\"tumours\":%s}\n",
      (long long)o.size, (long long)o.truth_size, o.steps, o.channels, o.depth, o.lr,
      (unsigned long long)o.seed, o.volumes, mesh.num_processors(), mt::compute_threads(),
      t.seconds, t.median_step_s, t.final_loss, e.seconds, e.full.dice(tumour), e.full.dice(organ),
      e.native.dice(tumour), e.native.dice(organ), e.sampled.dice(tumour), e.sampled.dice(organ),
      tumours_json(e.tumours).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resolution: %s\n", e.what());
    return 2;
  }
  return mt::run(argc, argv, mt::MeshShape(o.mesh), [&](mt::Mesh& mesh) {
    const mt::Layout layout("x:" + mesh.shape()[0].name);
    unet3d::ModelConfig config;
    config.channels = o.channels;
    config.depth = o.depth;
    config.seed = o.seed;
    unet3d::UNet net(mesh, config);
    const Training training = train(mesh, net, o, layout);
    const Evaluation evaluation = evaluate(mesh, net, o, layout);
    if (mesh.processor() == 0) report(mesh, o, training, evaluation);
  });
}
