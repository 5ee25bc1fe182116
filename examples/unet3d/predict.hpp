#pragma once
// `unet3d predict`: labels (and optionally class probabilities) for scans — a NIfTI scan (one file
// or one per channel), a folder of them, a dataset.json's test scans, or an .npy array — with the
// model of a checkpoint (its best by validation Dice), on any mesh and layout, the whole volume at
// once (no sliding windows, no seams). Each processor reads only its block of the
// input; NIfTI outputs are on the scan's own grid, with its header.
//
// `unet3d generate`: a phantom volume and its labels as .npy files, to try predict on.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "console.hpp"
#include "dataset.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"
#include "scan.hpp"

namespace unet3d {

inline ModelConfig config_from(const json& flags) {
  ModelConfig c;
  c.depth = flags.value("depth", 3);
  c.channels = flags.value("channels", 8);
  c.norm = flags.value("norm", std::string("batch"));
  c.seed = flags.value("seed", std::uint64_t(1));
  c.biases_before_norm = biases_before_norm(flags);
  const Task task = Task::from_json(flags);
  c.classes = int(task.num_classes());
  c.inputs = int(task.num_channels());
  return c;
}

/// Wall time of predict's phases, in seconds: what a user waits for, beside the network alone.
struct PredictTimes {
  double read = 0, network = 0, write = 0;
  PredictTimes& operator+=(const PredictTimes& t) {
    read += t.read;
    network += t.network;
    write += t.write;
    return *this;
  }
};

/// One scan to predict: its channel files, and where its labels (and probabilities) go.
struct PredictJob {
  ScanFiles scan;
  std::string output, probabilities;
};

// A scan (NIfTI): prepared as in training, predicted whole, and the labels (and probabilities)
// written on the scan's own grid, in its orientation, with its header.
inline PredictTimes predict_scan(mt::Mesh& mesh, const PredictJob& job, const mt::Layout& layout,
                                 const PredictOptions& o, const json& flags, UNet& net) {
  PredictTimes times;
  auto start = std::chrono::steady_clock::now();
  const Task task = Task::from_json(flags);
  Preprocessing p;
  p.depth = flags.value("depth", 3);
  p.spacing = flags.value("spacing", p.spacing);
  p.shape = flags.value("resize", p.shape);
  p.layouts = o.layouts;
  const Scan scan = read_scan(mesh, job.scan, task, layout, p);
  times.read = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const auto logits = net(scan.input, /*training=*/false);
  const auto probabilities =
      to_scan_grid(mt::drop_dim(mt::softmax(logits, "classes"), "batch"), scan.grid);
  const auto labels = mt::argmax<std::uint8_t>(probabilities, "classes");
  times.network = seconds_since(start);
  start = std::chrono::steady_clock::now();
  mt::save_nifti(labels, job.output, scan.volume,
                 {"unet3d labels: " + task.label_meanings(), NIFTI_INTENT_LABEL, 0,
                  double(task.num_classes() - 1)});
  if (!job.probabilities.empty())
    mt::save_nifti(probabilities, job.probabilities, scan.volume,
                   {"unet3d class probabilities", NIFTI_INTENT_NONE, 0, 1});
  times.write = seconds_since(start);
  return times;
}

// A volume (.npy, float32): [x, y, z] or [batch, x, y, z] for a task of one channel, with a last
// dim [..., channels] for a task of several; each channel prepared as in training.
inline PredictTimes predict_array(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout,
                                  UNet& net, const json& flags) {
  PredictTimes times;
  auto start = std::chrono::steady_clock::now();
  const Task task = Task::from_json(flags);
  const int depth = flags.value("depth", 3);
  const std::string& path = o.inputs.front();
  const mt::npy::Header header = mt::npy::read_header(path);
  mt::npy::check_type<float>(header, path);
  const bool several = task.num_channels() > 1;
  const std::size_t spatial_and_batch = header.shape.size() - (several ? 1 : 0);
  const bool batched = spatial_and_batch == 4;
  if ((spatial_and_batch != 3 && !batched) ||
      (several && header.shape.back() != task.num_channels()))
    throw mt::IoError(path + ": holds an array of shape " + mt::npy::shape_text(header.shape) +
                      "; predict needs a volume [x, y, z] or a batch [batch, x, y, z] (float32)" +
                      (several ? " with a last dim of the model's " +
                                     std::to_string(task.num_channels()) + " channels (" +
                                     task.modalities() + ")"
                               : std::string()));
  const std::size_t first = batched ? 1 : 0;
  const std::array<std::int64_t, 3> size{header.shape[first], header.shape[first + 1],
                                         header.shape[first + 2]};
  if (o.size[0] && o.size != size)
    throw mt::Error(path + ": the volume is " + mt::npy::shape_text({size[0], size[1], size[2]}) +
                    " but --size/--shape says " +
                    mt::npy::shape_text({o.size[0], o.size[1], o.size[2]}));
  check_geometry(size, depth, mesh.shape(), schedule_or(o.layouts, layout),
                 batched ? header.shape[0] : 1);
  std::vector<mt::Dim> dims{mt::Dim("x", size[0]), mt::Dim("y", size[1]), mt::Dim("z", size[2])};
  if (batched) dims.insert(dims.begin(), mt::Dim("batch", header.shape[0]));
  if (several) dims.push_back(mt::Dim("channels", task.num_channels()));
  auto raw = mt::load_npy<float>(mesh, path, mt::Shape(dims), layout);
  times.read = seconds_since(start);
  start = std::chrono::steady_clock::now();
  if (!batched) raw = mt::append_dim(raw, "batch", 0);
  if (!several) raw = mt::append_dim(raw, "channels");
  std::vector<mt::Tensor<float>> channels;
  for (std::int64_t c = 0; c < task.num_channels(); ++c) {
    const auto channel = mt::crop(raw, "channels", c, task.num_channels() - 1 - c);
    channels.push_back(prepare(channel, task.channels[std::size_t(c)], path)(channel));
  }
  const auto input = several ? mt::concat(channels, "channels") : channels.front();
  const auto logits = net(input, /*training=*/false);
  auto labels = mt::argmax<std::uint8_t>(logits, "classes");
  if (!batched) labels = mt::drop_dim(labels, "batch");
  times.network = seconds_since(start);
  start = std::chrono::steady_clock::now();
  mt::save_npy(labels, o.output);
  if (!o.probabilities.empty()) {
    auto p = mt::softmax(logits, "classes");
    if (!batched) p = mt::drop_dim(p, "batch");
    mt::save_npy(p, o.probabilities);
  }
  times.write = seconds_since(start);
  return times;
}

namespace predict_inputs {

namespace fs = std::filesystem;

// "case_0001.nii.gz" -> {"case", 1} (nnU-Net's channel files); {name without .nii[.gz], -1} else.
inline std::pair<std::string, int> case_and_channel(const std::string& file) {
  std::string stem = file;
  for (const char* ext : {".nii.gz", ".nii", ".NII.GZ", ".NII"})
    if (stem.size() > std::strlen(ext) &&
        stem.compare(stem.size() - std::strlen(ext), std::strlen(ext), ext) == 0) {
      stem.resize(stem.size() - std::strlen(ext));
      break;
    }
  static const std::regex channel_suffix(R"((.+)_(\d{4}))");
  std::smatch m;
  if (std::regex_match(stem, m, channel_suffix)) return {m[1], std::stoi(m[2])};
  return {stem, -1};
}

/// The scans of a folder: each NIfTI file, or for a task of several channels, each case's
/// files CASE_0000.nii.gz, CASE_0001.nii.gz, ... (nnU-Net's names) or one 4-D file.
inline std::vector<std::pair<std::string, ScanFiles>> scans_in(const std::string& dir,
                                                               const Task& task) {
  std::map<std::string, std::map<int, std::string>> cases;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !mt::nifti::is_nifti_name(name) || name[0] == '.') continue;
    const auto [stem, channel] = case_and_channel(name);
    cases[stem][channel] = entry.path().string();
  }
  std::vector<std::pair<std::string, ScanFiles>> scans;
  for (const auto& [stem, files] : cases) {
    ScanFiles scan;
    if (files.count(-1)) {
      scan.images = {files.at(-1)};
    } else {
      for (int c = 0; c < task.num_channels(); ++c) {
        if (!files.count(c)) {
          char suffix[16];
          std::snprintf(suffix, sizeof suffix, "_%04d.nii.gz", c);
          throw mt::IoError(dir + ": case " + stem + " has no file for channel " +
                            std::to_string(c) + " (" + task.channels[std::size_t(c)].modality +
                            "): expected " + stem + suffix);
        }
        scan.images.push_back(files.at(c));
      }
    }
    scans.push_back({stem, scan});
  }
  return scans;
}

}  // namespace predict_inputs

/// The scans `o` names, each with its outputs: one scan (its file, or its channels' files), every
/// scan of a folder, or a dataset.json's test scans; for the last two --output (and
/// --probabilities) are folders, which get one file per scan, named after it.
inline std::vector<PredictJob> predict_jobs(const PredictOptions& o, const Task& task) {
  namespace fs = std::filesystem;
  const std::string& input = o.inputs.front();
  std::vector<std::pair<std::string, ScanFiles>> scans;
  if (o.inputs.size() == 1 && fs::is_directory(input) && !decathlon::find(input)) {
    scans = predict_inputs::scans_in(input, task);
  } else if (const auto description = decathlon::find(input); description && o.inputs.size() == 1) {
    const auto read = decathlon::read(*description);
    decathlon::check_files_exist(read.test, description->string());
    for (const auto& scan : read.test)
      scans.push_back(
          {predict_inputs::case_and_channel(fs::path(scan.images.front()).filename().string())
               .first,
           scan});
  } else {
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--output", o.output},
                                     {"--probabilities", o.probabilities}})
      if (!path.empty() && !mt::nifti::is_nifti_name(path))
        throw mt::Error(flag + " " + path +
                        ": the labels of a NIfTI scan are written as NIfTI; name it .nii or "
                        ".nii.gz");
    return {{{o.inputs, ""}, o.output, o.probabilities}};
  }
  if (scans.empty())
    throw mt::IoError("--input " + input + ": holds no scan (.nii or .nii.gz files) to predict");
  for (const auto& [flag, dir] : {std::pair<std::string, std::string>{"--output", o.output},
                                  {"--probabilities", o.probabilities}})
    if (!dir.empty() && mt::nifti::is_nifti_name(dir))
      throw mt::Error(flag + " " + dir + ": with a folder or a dataset.json of scans as --input, " +
                      flag + " is a folder, which gets one file per scan");
  std::vector<PredictJob> jobs;
  for (const auto& [name, scan] : scans)
    jobs.push_back({scan, (fs::path(o.output) / (name + ".nii.gz")).string(),
                    o.probabilities.empty()
                        ? std::string()
                        : (fs::path(o.probabilities) / (name + ".nii.gz")).string()});
  return jobs;
}

/// The checkpoint predict loads: the one `best` names (the best validation), else `latest`.
inline std::pair<json, fs::path> predict_checkpoint(const PredictOptions& o) {
  if (o.which == "best" && fs::exists(fs::path(o.checkpoint) / "best"))
    return read_manifest(o.checkpoint, "best");
  return read_manifest(o.checkpoint, "latest");
}

inline void predict(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout) {
  const auto [manifest, where] = predict_checkpoint(o);
  ModelConfig config = config_from(manifest["flags"]);
  config.layouts = o.layouts;
  config.precision =
      o.precision.empty() ? manifest["flags"].value("precision", std::string("fp32")) : o.precision;
  UNet net(mesh, config);
  restore_checkpoint(mesh, manifest, where, net, nullptr);
  mt::autodiff::NoGrad no_grad(mesh);
  const Task task = Task::from_json(manifest["flags"]);
  PredictTimes times;
  std::size_t scans = 1;
  const std::string& first = o.inputs.front();
  if (first.size() > 4 && first.compare(first.size() - 4, 4, ".npy") == 0) {
    times = predict_array(mesh, o, layout, net, manifest["flags"]);
  } else {
    const auto jobs = predict_jobs(o, task);
    scans = jobs.size();
    if (jobs.front().output != o.output)  // folders of outputs, one file per scan
      for (const auto& [flag, dir] : {std::pair<std::string, std::string>{"--output", o.output},
                                      {"--probabilities", o.probabilities}})
        if (!dir.empty()) ensure_writable_directory(mesh, dir, flag);
    for (const auto& job : jobs) {
      times += predict_scan(mesh, job, layout, o, manifest["flags"], net);
      if (mesh.processor() == 0)
        say("unet3d: labels of %s written to %s\n", job.scan.images.front().c_str(),
            job.output.c_str());
    }
  }
  const double peak = mt::all_reduce_value(mesh.world(), peak_rss_mib(), mt::ReduceOp::max);
  if (mesh.processor() == 0) {
    // The first use of each shape also builds its kernels: network_s includes that.
    std::printf("%s\n", json{{"scans", scans},
                             {"checkpoint", where.string()},
                             {"read_s", times.read},
                             {"network_s", times.network},
                             {"write_s", times.write},
                             {"peak_rss_mib", peak},
                             {"processors", mesh.num_processors()},
                             {"mesh", mesh.shape().to_string()},
                             {"layout", layout.to_string()},
                             {"transport", mesh.transport()}}
                            .dump()
                            .c_str());
  }
}

struct GenerateOptions {
  std::array<std::int64_t, 3> size{64, 64, 64};
  std::uint64_t seed = 1;
  std::int64_t index = 0;
  std::string output, labels;
};

/// Writes validation volume `index` of `seed` (the held-out volumes of training) in HU, and labels.
inline void generate_volume(mt::Mesh& mesh, const GenerateOptions& o, const mt::Layout& layout) {
  const Anatomy anatomy(volume_seed(o.seed, "validation", o.index), o.size);
  const mt::RandomStream noise(volume_seed(o.seed, "validation", o.index), "noise");
  const mt::Shape shape{mt::Dim("x", o.size[0]), mt::Dim("y", o.size[1]), mt::Dim("z", o.size[2])};
  auto at = [&](const mt::Index& i) {
    const std::array<std::int64_t, 3> p{i["x"], i["y"], i["z"]};
    return voxel(anatomy, o.size, p,
                 noise.normal((std::uint64_t(p[0]) * o.size[1] + p[1]) * o.size[2] + p[2]));
  };
  mt::save_npy(
      mt::generate<float>(mesh, shape, layout, [&](const mt::Index& i) { return at(i).hu; }),
      o.output);
  if (!o.labels.empty())
    mt::save_npy(
        mt::generate<std::uint8_t>(mesh, shape, layout,
                                   [&](const mt::Index& i) { return std::uint8_t(at(i).label); }),
        o.labels);
}

}  // namespace unet3d
