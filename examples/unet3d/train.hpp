#pragma once
// `unet3d train`: fresh phantom volumes every step, Adam, validation on fixed held-out volumes with
// pictures, a metrics log, checkpoints, and a JSON summary line at the end.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "console.hpp"
#include "dataset.hpp"
#include "finite.hpp"
#include "loader.hpp"
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

/// The picture's gray (0 to 1) of a network input: the window for CT (`windowed`), three
/// standard deviations either side of the body's mean for a z-scored channel.
inline float gray_of_input(float v, bool windowed) {
  return windowed ? 0.5f * (v + 1.0f) : (v + 3.0f) / 6.0f;
}

/// Dice of one held-out volume, and a picture of its middle axial slice: the first channel (from
/// the network's input), the true outlines left and the predicted ones right.
inline Overlap validate_volume(UNet& net, const Batch& volume, const Task& task,
                               const std::string& picture) {
  const auto logits = net(volume.input, /*training=*/false);
  const Overlap o = overlap(logits, volume.labels);
  // Only the middle axial slice comes to processor 0.
  const std::int64_t nz = volume.input.shape().dim("z").size, mid = nz / 2;
  auto middle = [&](const mt::Tensor<float>& t) { return mt::crop(t, "z", mid, nz - mid - 1); };
  const auto predicted = mt::gather(mt::argmax<std::uint8_t>(middle(logits), "classes"));
  const auto truth = mt::gather(mt::argmax<std::uint8_t>(middle(volume.labels), "classes"));
  const auto input = mt::gather(
      middle(mt::crop(volume.input, "channels", 0, volume.input.shape().dim("channels").size - 1)));
  if (volume.input.mesh().processor() == 0) {
    const std::size_t nx = input.shape()[1], ny = input.shape()[2];
    xt::xarray<float> gray = xt::xarray<float>::from_shape({nx, ny});
    xt::xarray<std::uint8_t> t = xt::xarray<std::uint8_t>::from_shape({nx, ny}), p = t;
    const bool windowed = task.channels.front().windowed();
    for (std::size_t x = 0; x < nx; ++x)
      for (std::size_t y = 0; y < ny; ++y) {
        gray(x, y) = gray_of_input(input(0, x, y, 0, 0), windowed);
        t(x, y) = truth(0, x, y, 0);
        p(x, y) = predicted(0, x, y, 0);
      }
    write_png(picture, slice_picture(gray, t, p, int(task.num_classes())));
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
    const Batch volume = dataset ? scan_batch(mesh, dataset->validation[std::size_t(k)], o.task,
                                              layout, o.preprocessing)
                                 : make_batch(mesh, layout, o.seed, "validation", k, 1, o.size);
    total += validate_volume(net, volume, o.task, picture_dir + name);
  }
  return total;
}

inline nlohmann::json model_flags(const TrainOptions& o) {
  nlohmann::json flags{{"depth", o.depth}, {"channels", o.channels}, {"norm", o.norm},
                       {"seed", o.seed},   {"size", o.size},         {"batch", o.batch},
                       {"lr", o.lr},       {"steps", o.steps},       {"precision", o.precision}};
  flags.update(o.task.to_json());  // classes, input channels, class weights
  flags["augment"] = o.augment.to_string();
  // How scans were prepared: prediction prepares its scans the same way.
  if (!o.data.empty()) {
    flags["data"] = o.data;
    flags["spacing"] = o.preprocessing.spacing;
    flags["resize"] = o.preprocessing.shape;
  }
  return flags;
}

// With --resume the checkpoint's flags must be this run's: name the first that differs.
// The flag that sets a checkpoint's key.
inline std::string flag_of_key(const std::string& key) {
  if (key == "inputs") return "--modalities/--window";
  if (key == "resize") return "--size/--shape";
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

inline void check_same_flags(const nlohmann::json& saved_flags, const nlohmann::json& now) {
  // A checkpoint from before tasks named its 3 classes by count: its task in today's words.
  nlohmann::json saved = saved_flags;
  saved.update(Task::from_json(saved_flags).to_json());
  if (!saved.contains("augment")) saved["augment"] = "none";  // before augmentation
  for (const auto& key : {"depth", "channels", "norm", "size", "batch", "seed", "lr", "classes",
                          "inputs", "class_weights", "augment", "data", "spacing", "resize"})
    if (saved.value(key, nlohmann::json()) != now.value(key, nlohmann::json()))
      throw mt::Error("--resume: the checkpoint was trained with " + flag_of_key(key) + " " +
                      saved.value(key, nlohmann::json()).dump() + " but this run has " +
                      now.value(key, nlohmann::json()).dump() + "; resume with the same flags");
}

// The first lines of a run: the model, the mesh and the data, and a warning where the processors'
// threads outnumber the cores.
inline void announce(mt::Mesh& mesh, const TrainOptions& o, const mt::Layout& layout,
                     std::int64_t parameters, const std::string& volumes) {
  if (mesh.processor() != 0) return;
  const bool per_level = o.layouts.size() > 1;
  say("unet3d: %lld parameters, %d processors (%s) x %d compute threads each "
      "(MESHTENSOR_THREADS_PER_PROCESSOR), mesh %s, %s \"%s\", %s, batch %lld%s%s%s\n",
      (long long)parameters, mesh.num_processors(), mesh.transport().c_str(), mt::compute_threads(),
      mesh.shape().to_string().c_str(), per_level ? "layouts per level" : "layout",
      per_level ? o.layouts.to_string().c_str() : layout.to_string().c_str(), volumes.c_str(),
      (long long)o.batch, o.recompute ? ", levels recomputed in backward" : "",
      o.precision == "bf16" ? ", bfloat16 activations" : "",
      o.deep_halos == "off" ? "" : (", deep halos at levels " + o.deep_halos).c_str());
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (mesh.transport() == "threads" && mesh.num_processors() * mt::compute_threads() > cores)
    std::fprintf(stderr,
                 "unet3d: warning: %d processors x %d threads exceed this machine's %d cores; "
                 "steps will be slower than with fewer processors or threads\n",
                 mesh.num_processors(), mt::compute_threads(), cores);
}

// A step's results on their way to the host: its loss, its checks' parts (the loss's first), and
// its Dice counts (overlap_sums), with what the report says beside them.
struct StepResults {
  std::int64_t step;
  std::chrono::steady_clock::time_point begin;
  double data_seconds, lr, voxels;
  std::vector<std::string> names;  // the parameters the checks' parts after the loss's name
  std::size_t checks;              // parts
  mt::ValuesOnTheWay<float> values;
};

// What a run reports as it goes, on processor 0: each step's line and log record, each
// validation's, and at the end the curves and the JSON summary.
class Progress {
 public:
  Progress(mt::Mesh& mesh, const TrainOptions& o, const std::string& log_path, std::int64_t end)
      : mesh_(mesh), o_(o), log_path_(log_path), end_(end), speaker_(mesh.processor() == 0) {
    on_first(mesh, [&] {
      log_.open(log_path, o.resume ? std::ios::app : std::ios::trunc);
      if (!log_) throw mt::IoError("--log " + log_path + ": cannot open for writing");
    });
  }

  // `data_seconds`: the part of the step that waited for its batch.
  void step(std::int64_t step, double seconds, double data_seconds, double loss,
            const Overlap& train, double voxels, double lr) {
    step_times_.push_back(seconds);
    data_times_.push_back(data_seconds);
    final_loss_ = loss;
    losses_.push_back(loss);
    if (!speaker_) return;
    say("step %lld/%lld  loss %.4f  dice %s  %.0f kvoxels/s  ETA %s\n", (long long)step + 1,
        (long long)o_.steps, loss, dice_text(train).c_str(), voxels / seconds / 1e3,
        eta_text(step).c_str());
    write_log({{"step", step + 1},
               {"loss", loss},
               {"dice", dice_json(train)},
               {"step_time_s", seconds},
               {"data_time_s", data_seconds},
               {"lr", lr}});
  }

  // A step whose loss or a gradient was not finite, which the optimiser skipped.
  void skipped(std::int64_t step, const std::string& bad) {
    if (!speaker_) return;
    say("step %lld/%lld  skipped: %s is not finite\n", (long long)step + 1, (long long)o_.steps,
        bad.c_str());
    std::fflush(stdout);
    write_log({{"step", step + 1}, {"skipped", bad + " is not finite"}});
  }

  void validation(std::int64_t step, const Overlap& v, std::int64_t held_out, bool best) {
    last_validation_ = v;
    std::vector<double> foreground;
    for (std::size_t c = 1; c < o_.task.classes.size(); ++c) foreground.push_back(v.dice(c));
    dice_curve_.push_back({int(step + 1), foreground});
    if (!speaker_) return;
    say("validation at step %lld: dice %s (mean %.3f%s) on %lld held-out volumes\n",
        (long long)step + 1, dice_text(v).c_str(), v.mean_foreground_dice(),
        best ? ", the best so far" : "", (long long)held_out);
    write_log({{"step", step + 1},
               {"validation_dice", dice_json(v)},
               {"validation_mean_dice", v.mean_foreground_dice()}});
  }

  // The curves' picture and the summary line, with the median step time and the memory peaks.
  void finish(const mt::Layout& layout, bool held_out) {
    const std::vector<std::string> foreground(o_.task.classes.begin() + 1, o_.task.classes.end());
    on_first(mesh_,
             [&] { write_curves(o_.out + "/curves.svg", losses_, dice_curve_, foreground); });
    const double peak = mt::all_reduce_value(mesh_.world(), peak_rss_mib(), mt::ReduceOp::max);
    // What the library's pool held at most on the busiest processor: per processor also when the
    // processors are threads of one process.
    const double processor_peak = mt::all_reduce_value(
        mesh_.world(), double(mt::memory_stats().peak_held) / (1 << 20), mt::ReduceOp::max);
    if (!speaker_) return;
    nlohmann::json summary{
        {"steps", o_.steps},
        {"final_loss", final_loss_},
        {"dice", held_out ? dice_json(last_validation_) : json()},
        {"mean_dice", held_out ? json(last_validation_.mean_foreground_dice()) : json()},
        {"step_time_s", median(step_times_)},
        {"data_time_s", median(data_times_)},
        {"peak_rss_mib", peak},
        {"peak_processor_memory_mib", processor_peak},
        {"mesh", mesh_.shape().to_string()},
        {"layout", layout.to_string()},
        {"processors", mesh_.num_processors()},
        {"transport", mesh_.transport()},
        {"batch", o_.batch}};
    if (o_.layouts.size() > 1) summary["layouts"] = o_.layouts.to_string();
    // Phantoms have one size; scans have each their own.
    if (!o_.data.empty())
      summary["data"] = o_.data;
    else
      summary["size"] = o_.size;
    std::printf("%s\n", summary.dump().c_str());
    write_log({{"summary", summary}});
  }

 private:
  // "organ 0.912 tumour 0.640": the Dice of each foreground class.
  std::string dice_text(const Overlap& o) const {
    std::string text;
    char value[32];
    for (std::size_t c = 1; c < o_.task.classes.size(); ++c) {
      std::snprintf(value, sizeof value, " %.3f", o.dice(c));
      text += (c > 1 ? " " : "") + o_.task.classes[c] + value;
    }
    return text;
  }
  nlohmann::json dice_json(const Overlap& o) const {
    nlohmann::json dice = nlohmann::json::object();
    for (std::size_t c = 1; c < o_.task.classes.size(); ++c) dice[o_.task.classes[c]] = o.dice(c);
    return dice;
  }

  // The median of the recent steps times the steps left: single steps on a shared machine are
  // noisy. The run's first step also builds and times the kernels for each shape, so it predicts
  // nothing.
  std::string eta_text(std::int64_t step) const {
    if (step_times_.size() == 1 && end_ - step > 1)
      return "after the next step (this one set up the kernels)";
    const std::size_t window = std::min<std::size_t>(
        step_times_.size() > 1 ? step_times_.size() - 1 : step_times_.size(), 10);
    std::vector<double> recent(step_times_.end() - window, step_times_.end());
    std::nth_element(recent.begin(), recent.begin() + recent.size() / 2, recent.end());
    return duration_text(recent[recent.size() / 2] * double(end_ - step - 1));
  }
  static double median(std::vector<double> sorted) {
    std::sort(sorted.begin(), sorted.end());
    return sorted.empty() ? 0 : sorted[sorted.size() / 2];
  }
  void write_log(const nlohmann::json& record) {
    log_ << record.dump() << "\n";
    log_.flush();
    if (!log_)
      throw mt::IoError("--log " + log_path_ + ": could not write the metrics (is the disk full?)");
  }

  mt::Mesh& mesh_;
  const TrainOptions& o_;
  std::string log_path_;
  std::int64_t end_;
  bool speaker_;
  std::ofstream log_;
  std::vector<double> step_times_, data_times_, losses_;
  std::vector<std::pair<int, std::vector<double>>> dice_curve_;
  double final_loss_ = 0;
  Overlap last_validation_;
};

// Where a run writes: --out and its pictures, --checkpoint; the metrics log's path.
inline std::string prepare_outputs(mt::Mesh& mesh, const TrainOptions& o) {
  ensure_writable_directory(mesh, o.out, "--out");
  ensure_writable_directory(mesh, o.out + "/pictures", "--out");
  if (!o.checkpoint.empty()) ensure_writable_directory(mesh, o.checkpoint, "--checkpoint");
  return o.log.empty() ? o.out + "/metrics.jsonl" : o.log;
}

inline std::string volumes_text(const TrainOptions& o, const Dataset* dataset) {
  if (dataset)
    return std::to_string(dataset->train.size()) + " training and " +
           std::to_string(dataset->validation.size()) + " held-out scans of " + o.data;
  return "phantom volumes " + std::to_string(o.size[0]) + "x" + std::to_string(o.size[1]) + "x" +
         std::to_string(o.size[2]);
}

// The step's learning rate: cosine decay to a tenth of --lr over the run.
inline double learning_rate(const TrainOptions& o, std::int64_t step) {
  return o.lr * (0.1 + 0.45 * (1 + std::cos(3.141592653589793 * step / double(o.steps))));
}

inline void train(mt::Mesh& mesh, const TrainOptions& o, const mt::Layout& layout) {
  const std::string log_path = prepare_outputs(mesh, o);
  const bool scans = !o.data.empty();
  Dataset dataset;
  if (scans) dataset = read_dataset(o.data, o.validation_volumes, o.seed);
  const Dataset* held_out_scans = scans ? &dataset : nullptr;
  const std::int64_t held_out =
      scans ? std::int64_t(dataset.validation.size()) : o.validation_volumes;
  ModelConfig config = model_config(o);
  auto flags = model_flags(o);
  std::optional<std::pair<nlohmann::json, fs::path>> resumed;
  if (o.resume) {
    if (o.checkpoint.empty()) throw mt::Error("--resume needs --checkpoint DIR");
    resumed = read_manifest(o.checkpoint);
    check_same_flags(resumed->first["flags"], flags);
    config.biases_before_norm = biases_before_norm(resumed->first["flags"]);
  }
  flags["biases_before_norm"] = config.biases_before_norm;
  UNet net(mesh, config);
  nn::Adam<float> adam(net.parameters().trainable(), o.lr);
  std::int64_t start = 0;
  if (resumed) start = restore_checkpoint(mesh, resumed->first, resumed->second, net, &adam);
  const std::int64_t end = o.stop_after > 0 ? std::min(o.steps, start + o.stop_after) : o.steps;
  // The best validation so far: a resumed run goes on from its checkpoint's best.
  double best_dice = -1;
  if (o.resume && fs::exists(fs::path(o.checkpoint) / "best"))
    best_dice = read_manifest(o.checkpoint, "best").first.value("validation_mean_dice", -1.0);
  Progress progress(mesh, o, log_path, end);
  const auto weights = class_weights(mesh, o);
  announce(mesh, o, layout, net.parameters().count(), volumes_text(o, held_out_scans));

  // Phantoms are drawn a step ahead, while the step before trains; scans are read in line.
  std::optional<PhantomLoader> phantoms;
  if (!scans) phantoms.emplace(mesh, layout, o.seed, o.batch, o.size, end);
  // A step's loss, checks and Dice counts reach the host while the next step runs: on a GPU the
  // host reads step k's once step k + 1 is queued, so the GPU never waits for the host.
  std::optional<StepResults> pending;
  auto last_report = std::chrono::steady_clock::now();
  const auto report = [&](StepResults& r) {
    const std::vector<float>& v = r.values.values();
    const std::vector<float> parts(v.begin() + 1, v.begin() + 1 + std::ptrdiff_t(r.checks));
    const std::string bad = first_nonfinite(v[0], parts, r.names);
    const auto now = std::chrono::steady_clock::now();
    const double seconds =
        std::chrono::duration<double>(now - std::max(r.begin, last_report)).count();
    last_report = now;
    if (bad.empty()) {
      progress.step(r.step, seconds, r.data_seconds, v[0],
                    overlap_of(v, 1 + r.checks, o.task.classes.size()), r.voxels, r.lr);
      return;
    }
    // The optimiser skipped it where the parameters are, and did not count it.
    if (o.on_nonfinite == "stop")
      throw mt::Error("step " + std::to_string(r.step + 1) + ": " + bad +
                      " is not finite (NaN or infinity); training stopped, and the optimiser "
                      "skipped that step, so no weight or checkpoint holds it. Lower --lr, or pass "
                      "--on-nonfinite skip-step to skip such steps");
    progress.skipped(r.step, bad);
  };
  // One step's work on a batch: what the host reads of it lands in `read` (the loss, the checks,
  // the overlap sums), assigned as the step runs, or once, when it is captured (--graphs).
  std::vector<mt::Tensor<float>> read;
  StepChecks checks;
  const auto train = [&](const Batch& b) {
    const auto [logits, loss] = forward_backward(net, b, weights);
    // The optimiser skips the step where its checks are not finite: a NaN never reaches the
    // weights or a checkpoint.
    checks = step_checks(loss, net.parameters());
    adam.step(&checks.guard);
    adam.zero_grad();
    read = {loss};
    read.insert(read.end(), checks.parts.begin(), checks.parts.end());
    for (auto& sums : overlap_sums(logits, b.labels)) read.push_back(std::move(sums));
  };
  std::optional<mt::StepGraph> graph;
  if (o.graphs) graph.emplace();
  std::optional<Batch> fixed;  // the batch a captured step reads, written in place each step
  for (std::int64_t step = start; step < end; ++step) {
    const auto begin = std::chrono::steady_clock::now();
    const double lr = learning_rate(o, step);
    adam.set_learning_rate(lr);
    const auto batch =
        augment(scans ? scan_batch(mesh, dataset.for_step(step), o.task, layout, o.preprocessing)
                      : phantoms->batch(step),
                o.augment, o.seed, step);
    const double data_seconds = seconds_since(begin);
    if (!graph) {
      train(batch);
    } else {
      if (!fixed) {
        fixed.emplace(batch);  // the blocks every later step reads
      } else {
        mt::write_into(fixed->input, batch.input);  // in place, outside the graph
        mt::write_into(fixed->labels, batch.labels);
      }
      graph->run([&] { train(*fixed); });
    }
    StepResults results{step,
                        begin,
                        data_seconds,
                        lr,
                        double(batch.input.shape().num_elements()),
                        checks.names,
                        checks.parts.size(),
                        mt::read_later(read)};
    if (pending) report(*pending);
    pending.emplace(std::move(results));
    const bool last = step + 1 == end;
    const bool validating = held_out > 0 && ((step + 1) % o.validate_every == 0 || last);
    const bool saving = !o.checkpoint.empty() && ((step + 1) % o.checkpoint_every == 0 || last);
    if (validating || saving || !pending->values.on_the_way()) {
      report(*pending);  // a checkpoint holds a step known to be finite
      pending.reset();
    }
    std::optional<double> best;  // set where this step's validation is the best so far
    if (validating) {
      const Overlap v =
          validate(mesh, net, o, layout, held_out_scans, step + 1, o.out + "/pictures");
      if (v.mean_foreground_dice() > best_dice) best = best_dice = v.mean_foreground_dice();
      progress.validation(step, v, held_out, best.has_value());
    }
    if (!o.checkpoint.empty() && (saving || best))
      save_checkpoint(mesh, o.checkpoint, step + 1, net, adam, flags, best);
  }
  if (pending) report(*pending);
  progress.finish(layout, held_out > 0);
}

}  // namespace unet3d
