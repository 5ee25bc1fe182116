#pragma once
// `unet3d train`: fresh phantom volumes every step, Adam, validation on fixed held-out volumes with
// pictures, a metrics log, checkpoints, and a JSON summary line at the end.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "dataset.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"
#include "pictures.hpp"
#include "scan.hpp"
#include "step.hpp"

namespace unet3d {

inline std::string duration_text(double seconds) {
  const int s = int(seconds + 0.5);
  return s >= 60 ? std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s"
                 : std::to_string(s) + "s";
}

/// Dice of one held-out volume, and a picture of its middle axial slice: the CT (from the
/// network's windowed input), the true outlines left and the predicted ones right.
inline Overlap validate_volume(UNet& net, const Batch& volume, const std::string& picture) {
  const auto logits = net(volume.input, /*training=*/false);
  const Overlap o = overlap(logits, volume.labels);
  // Only the middle axial slice comes to processor 0.
  const std::int64_t nz = volume.input.shape().dim("z").size, mid = nz / 2;
  auto middle = [&](const mt::Tensor<float>& t) { return mt::crop(t, "z", mid, nz - mid - 1); };
  const auto predicted = mt::gather(mt::argmax<std::uint8_t>(middle(logits), "classes"));
  const auto truth = mt::gather(mt::argmax<std::uint8_t>(middle(volume.labels), "classes"));
  const auto input = mt::gather(middle(volume.input));
  if (volume.input.mesh().processor() == 0) {
    const std::size_t nx = input.shape()[1], ny = input.shape()[2];
    xt::xarray<float> hu = xt::xarray<float>::from_shape({nx, ny});
    xt::xarray<std::uint8_t> t = xt::xarray<std::uint8_t>::from_shape({nx, ny}), p = t;
    for (std::size_t x = 0; x < nx; ++x)
      for (std::size_t y = 0; y < ny; ++y) {
        hu(x, y) = hounsfield_of_input(input(0, x, y, 0, 0));
        t(x, y) = truth(0, x, y, 0);
        p(x, y) = predicted(0, x, y, 0);
      }
    write_png(picture, slice_picture(hu, t, p));
  }
  return o;
}

// Dice on the held-out volumes (phantoms, or the held-out scans of --data), with pictures.
inline Overlap validate(mt::Mesh& mesh, UNet& net, const TrainOptions& o, const mt::Layout& layout,
                        const Dataset* dataset, std::int64_t step, const std::string& picture_dir) {
  mt::autodiff::NoGrad no_grad(mesh);
  Overlap total;
  const std::int64_t count =
      dataset ? std::int64_t(dataset->validation.size()) : o.validation_volumes;
  for (std::int64_t k = 0; k < count; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "/step-%06lld-volume-%lld.png", (long long)step, (long long)k);
    const Batch volume =
        dataset ? scan_batch(mesh, dataset->validation[std::size_t(k)], layout, o.preprocessing)
                : make_batch(mesh, layout, o.seed, "validation", k, 1, o.size);
    total += validate_volume(net, volume, picture_dir + name);
  }
  return total;
}

inline nlohmann::json model_flags(const TrainOptions& o) {
  nlohmann::json flags{{"depth", o.depth}, {"channels", o.channels},
                       {"norm", o.norm},   {"classes", num_classes},
                       {"seed", o.seed},   {"size", o.size},
                       {"batch", o.batch}, {"lr", o.lr},
                       {"steps", o.steps}, {"class_weights", o.class_weights}};
  // How scans were prepared: prediction prepares its scans the same way.
  if (!o.data.empty()) {
    flags["data"] = o.data;
    flags["spacing"] = o.preprocessing.spacing;
    flags["resize"] = o.preprocessing.shape;
  }
  return flags;
}

// With --resume the checkpoint's flags must be this run's: name the first that differs.
inline void check_same_flags(const nlohmann::json& saved, const nlohmann::json& now) {
  for (const auto& key : {"depth", "channels", "norm", "size", "batch", "seed", "lr",
                          "class_weights", "data", "spacing", "resize"})
    if (saved.value(key, nlohmann::json()) != now.value(key, nlohmann::json()))
      throw mt::Error(std::string("--resume: the checkpoint was trained with --") + key + " " +
                      saved.value(key, nlohmann::json()).dump() + " but this run has " +
                      now.value(key, nlohmann::json()).dump() + "; resume with the same flags");
}

inline void train(mt::Mesh& mesh, const TrainOptions& o, const mt::Layout& layout) {
  const bool speaker = mesh.processor() == 0;
  const std::string picture_dir = o.out + "/pictures";
  ensure_writable_directory(mesh, o.out, "--out");
  ensure_writable_directory(mesh, picture_dir, "--out");
  if (!o.checkpoint.empty()) ensure_writable_directory(mesh, o.checkpoint, "--checkpoint");
  const std::string log_path = o.log.empty() ? o.out + "/metrics.jsonl" : o.log;

  const ModelConfig config = model_config(o);
  const bool scans = !o.data.empty();
  Dataset dataset;
  if (scans) dataset = read_dataset(o.data, o.validation_volumes, o.seed);
  const std::int64_t held_out =
      scans ? std::int64_t(dataset.validation.size()) : o.validation_volumes;
  UNet net(mesh, config);
  nn::Adam<float> adam(net.parameters().trainable(), o.lr);
  const auto flags = model_flags(o);
  std::int64_t start = 0;
  if (o.resume) {
    if (o.checkpoint.empty()) throw mt::Error("--resume needs --checkpoint DIR");
    const auto [manifest, where] = read_manifest(o.checkpoint);
    check_same_flags(manifest["flags"], flags);
    start = restore_checkpoint(mesh, manifest, where, net, &adam);
  }
  std::ofstream log;
  on_first(mesh, [&] {
    log.open(log_path, o.resume ? std::ios::app : std::ios::trunc);
    if (!log) throw mt::IoError("--log " + log_path + ": cannot open for writing");
  });
  const auto weights = class_weights(mesh, o);
  const std::string volumes =
      scans ? std::to_string(dataset.train.size()) + " training and " +
                  std::to_string(dataset.validation.size()) + " held-out scans of " + o.data
            : "phantom volumes " + std::to_string(o.size[0]) + "x" + std::to_string(o.size[1]) +
                  "x" + std::to_string(o.size[2]);
  if (speaker)
    std::printf(
        "unet3d: %lld parameters, %d processors (%s) x %d compute threads each "
        "(MESHTENSOR_THREADS_PER_PROCESSOR), mesh %s, layout \"%s\", %s, batch %lld%s\n",
        (long long)net.parameters().count(), mesh.num_processors(), mesh.transport().c_str(),
        mt::compute_threads(), mesh.shape().to_string().c_str(), layout.to_string().c_str(),
        volumes.c_str(), (long long)o.batch, o.recompute ? ", levels recomputed in backward" : "");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (speaker && mesh.transport() == "threads" &&
      mesh.num_processors() * mt::compute_threads() > cores)
    std::fprintf(stderr,
                 "unet3d: warning: %d processors x %d threads exceed this machine's %d cores; "
                 "steps will be slower than with fewer processors or threads\n",
                 mesh.num_processors(), mt::compute_threads(), cores);

  std::vector<double> step_times, losses;
  std::vector<std::pair<int, std::array<double, 2>>> dice_curve;
  double final_loss = 0;
  Overlap last_validation;
  const std::int64_t end = o.stop_after > 0 ? std::min(o.steps, start + o.stop_after) : o.steps;
  for (std::int64_t step = start; step < end; ++step) {
    const auto begin = std::chrono::steady_clock::now();
    // Cosine decay to a tenth of the learning rate over the run.
    const double lr =
        o.lr * (0.1 + 0.45 * (1 + std::cos(3.141592653589793 * step / double(o.steps))));
    adam.set_learning_rate(lr);
    const auto batch =
        scans ? scan_batch(mesh, dataset.for_step(step), layout, o.preprocessing)
              : make_batch(mesh, layout, o.seed, "train", step * o.batch, o.batch, o.size);
    const double voxels = double(batch.input.shape().num_elements());
    const auto [logits, loss] = train_step(net, adam, batch, weights);
    const Overlap train_overlap = overlap(logits, batch.labels);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    step_times.push_back(seconds);
    final_loss = loss.item();
    losses.push_back(final_loss);
    if (speaker) {
      // The median of the recent steps: single steps on a shared machine are noisy. The run's
      // first step also builds and times the kernels for each shape, so it predicts nothing.
      const std::size_t window = std::min<std::size_t>(
          step_times.size() > 1 ? step_times.size() - 1 : step_times.size(), 10);
      std::vector<double> recent(step_times.end() - window, step_times.end());
      std::nth_element(recent.begin(), recent.begin() + recent.size() / 2, recent.end());
      const double eta = recent[recent.size() / 2] * double(end - step - 1);
      const std::string eta_text = step_times.size() == 1 && end - step > 1
                                       ? "after the next step (this one set up the "
                                         "kernels)"
                                       : duration_text(eta);
      std::printf(
          "step %lld/%lld  loss %.4f  dice organ %.3f tumour %.3f  %.0f kvoxels/s  ETA %s\n",
          (long long)step + 1, (long long)o.steps, final_loss, train_overlap.dice(organ),
          train_overlap.dice(tumour), voxels / seconds / 1e3, eta_text.c_str());
      std::fflush(stdout);
      log << nlohmann::json{{"step", step + 1},
                            {"loss", final_loss},
                            {"dice_organ", train_overlap.dice(organ)},
                            {"dice_tumor", train_overlap.dice(tumour)},
                            {"step_time_s", seconds},
                            {"lr", lr}}
                 .dump()
          << "\n";
      log.flush();
    }
    const bool last = step + 1 == end;
    if (held_out > 0 && ((step + 1) % o.validate_every == 0 || last)) {
      last_validation =
          validate(mesh, net, o, layout, scans ? &dataset : nullptr, step + 1, picture_dir);
      dice_curve.push_back(
          {int(step + 1), {last_validation.dice(organ), last_validation.dice(tumour)}});
      if (speaker) {
        std::printf(
            "validation at step %lld: dice organ %.3f tumour %.3f on %lld held-out volumes\n",
            (long long)step + 1, last_validation.dice(organ), last_validation.dice(tumour),
            (long long)held_out);
        log << nlohmann::json{{"step", step + 1},
                              {"validation_dice_organ", last_validation.dice(organ)},
                              {"validation_dice_tumor", last_validation.dice(tumour)}}
                   .dump()
            << "\n";
        log.flush();
      }
    }
    if (!o.checkpoint.empty() && ((step + 1) % o.checkpoint_every == 0 || last))
      save_checkpoint(mesh, o.checkpoint, step + 1, net, adam, flags);
  }
  on_first(mesh, [&] { write_curves(o.out + "/curves.svg", losses, dice_curve); });
  std::vector<double> sorted = step_times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  const double peak = mt::all_reduce_value(mesh.world(), peak_rss_mib(), mt::ReduceOp::max);
  // What the library's pool held at most on the busiest processor: per processor also when the
  // processors are threads of one process.
  const double processor_peak = mt::all_reduce_value(
      mesh.world(), double(mt::memory_stats().peak_held) / (1 << 20), mt::ReduceOp::max);
  if (speaker) {
    nlohmann::json summary{{"steps", o.steps},
                           {"final_loss", final_loss},
                           {"dice_organ", held_out ? json(last_validation.dice(organ)) : json()},
                           {"dice_tumor", held_out ? json(last_validation.dice(tumour)) : json()},
                           {"step_time_s", median},
                           {"peak_rss_mib", peak},
                           {"peak_processor_memory_mib", processor_peak},
                           {"mesh", mesh.shape().to_string()},
                           {"layout", layout.to_string()},
                           {"processors", mesh.num_processors()},
                           {"transport", mesh.transport()},
                           {"batch", o.batch}};
    // Phantoms have one size; scans have each their own.
    if (scans)
      summary["data"] = o.data;
    else
      summary["size"] = o.size;
    std::printf("%s\n", summary.dump().c_str());
    log << nlohmann::json{{"summary", summary}}.dump() << "\n";
  }
}

}  // namespace unet3d
