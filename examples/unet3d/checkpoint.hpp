#pragma once
// Checkpoints: a directory per saved step holding one .npy per parameter, state tensor and Adam
// moment — the global array, whatever the layout, readable by numpy — and a JSON manifest (names,
// dims, shapes, dtype, step, seed and model flags). A step is written under a hidden name and
// renamed when complete; `latest` names the newest complete one. Loading reads each processor's own
// block, so a checkpoint restores onto any mesh and layout. Every file is flushed to the disk
// before the rename that publishes it, and the manifest keeps each file's CRC-32, checked before
// a checkpoint is loaded: after a power loss a file can have its size and be full of zeros.

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

#include "manifest.hpp"
#include "model.hpp"

namespace unet3d {

namespace mt = meshtensor;
namespace fs = std::filesystem;
using json = nlohmann::json;

inline std::string file_name(const std::string& tensor_name) {
  std::string f = tensor_name;
  for (char& c : f)
    if (c == '/') c = '.';
  return f + ".npy";
}

// A name for step `step`'s checkpoint directory that no directory under `dir` has: a step saved
// again (a resumed run reaching it once more) gets checkpoint-NNNNNN.1, .2, so that `latest` moves
// from one complete directory to the other and never names one that is being replaced.
/// The CRC-32 (zlib's) of the file at `path`.
inline std::uint32_t file_crc32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw mt::IoError(path.string() + ": cannot open for reading");
  std::vector<char> buffer(std::size_t{1} << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  return static_cast<std::uint32_t>(crc);
}

/// Throws an IoError naming the file of the manifest's `entry` when its CRC-32 differs from the
/// one saved.
inline void verify_checksum(const json& entry, const fs::path& where) {
  if (!entry.contains("crc32")) return;  // older checkpoints kept none
  const fs::path file = where / entry["file"].get<std::string>();
  const std::uint32_t saved = entry["crc32"].get<std::uint32_t>(), now = file_crc32(file);
  if (now != saved)
    throw mt::IoError(file.string() + ": its CRC-32 is " + std::to_string(now) +
                      " but the manifest saved " + std::to_string(saved) +
                      ": the file changed after the checkpoint was written (a crash or power "
                      "loss, or an edit); use an earlier checkpoint");
}

// Collective: processor 0 looks, and tells the others.
inline std::string fresh_checkpoint_name(mt::Mesh& mesh, const std::string& dir,
                                         std::int64_t step) {
  char base[32];
  std::snprintf(base, sizeof base, "checkpoint-%06lld", static_cast<long long>(step));
  auto name = [&](std::int64_t again) {
    return again ? std::string(base) + "." + std::to_string(again) : std::string(base);
  };
  std::int64_t again = 0;
  if (mesh.processor() == 0)
    while (fs::exists(fs::path(dir) / name(again))) ++again;
  return name(mt::broadcast_value(mesh.world(), again, 0));
}

// Runs `f` on processor 0 only and makes every processor throw if it failed.
template <class F>
void on_first(mt::Mesh& mesh, F&& f) {
  std::string failure;
  if (mesh.processor() == 0) failure = mt::failure_of(f);
  mt::agree_on(mesh, failure);
}

/// Creates `dir` (and its parents) if needed and checks that files can be written in it.
inline void ensure_writable_directory(mt::Mesh& mesh, const std::string& dir,
                                      const std::string& flag) {
  on_first(mesh, [&] {
    std::error_code error;
    fs::create_directories(dir, error);
    const std::string probe = (fs::path(dir) / ".write-test").string();
    std::ofstream out(probe);
    if (error || !out)
      throw mt::IoError(flag + " " + dir + ": cannot create or write into this directory");
    out.close();
    fs::remove(probe);
  });
}

struct Moment {
  std::string name;
  mt::Tensor<float> tensor;
};

// Adam's moments as tensors on their parameters' layouts, named after them.
inline std::vector<Moment> adam_moments(nn::Parameters<float>& params, nn::Adam<float>& adam) {
  std::vector<Moment> out;
  std::size_t k = 0;
  for (const auto& entry : params.entries()) {
    if (!entry.trainable) continue;
    out.push_back({"adam/m/" + entry.name, adam.first_moment(k)});
    out.push_back({"adam/v/" + entry.name, adam.second_moment(k)});
    ++k;
  }
  return out;
}

/// The checkpoint directory the file `pointer` in `dir` names ("best"), if it does.
inline std::optional<fs::path> pointed_to(const std::string& dir, const std::string& pointer) {
  std::ifstream in(fs::path(dir) / pointer);
  std::string name;
  if (!in || !std::getline(in, name) || !plain_name(name)) return std::nullopt;
  return fs::path(dir) / name;
}

/// Saves the model, its state and Adam's moments as step `step` under `dir` (collective), and
/// names it in `latest`. With `best_dice` (its mean foreground validation Dice, the best so far)
/// it is also named in `best`. The directories `latest` and `best` name are kept; older ones go.
inline void save_checkpoint(mt::Mesh& mesh, const std::string& dir, std::int64_t step, UNet& net,
                            nn::Adam<float>& adam, const json& flags,
                            std::optional<double> best_dice = std::nullopt) {
  const std::string name = fresh_checkpoint_name(mesh, dir, step);
  const fs::path staging = fs::path(dir) / ("." + name + ".partial");
  const fs::path final_dir = fs::path(dir) / name;
  on_first(mesh, [&] {
    fs::remove_all(staging);
    if (!fs::create_directories(staging)) throw mt::IoError(staging.string() + ": cannot create");
  });
  json tensors = json::array();
  auto save = [&](const std::string& tensor_name, const mt::Tensor<float>& t,
                  const std::string& kind) {
    mt::save_npy(t, (staging / file_name(tensor_name)).string());
    tensors.push_back({{"name", tensor_name},
                       {"file", file_name(tensor_name)},
                       {"dims", t.shape().names()},
                       {"shape", t.shape().sizes()},
                       {"dtype", "float32"},
                       {"kind", kind}});
  };
  for (const auto& entry : net.parameters().entries())
    save(entry.name, entry.tensor, entry.trainable ? "parameter" : "state");
  for (const auto& moment : adam_moments(net.parameters(), adam))
    save(moment.name, moment.tensor, "optimizer");
  on_first(mesh, [&] {
    for (auto& entry : tensors)
      entry["crc32"] = file_crc32(staging / entry["file"].get<std::string>());
    json manifest{{"format", "meshtensor-unet3d-checkpoint-1"},
                  {"step", step},
                  {"optimizer", {{"type", "adam"}, {"steps", adam.steps()}}},
                  {"flags", flags},
                  {"tensors", tensors}};
    if (best_dice) manifest["validation_mean_dice"] = *best_dice;
    // Each file is on the disk already (io/durable_file.hpp); then the directory, its rename,
    // and only then `latest`, which names it: after a crash or a power loss `latest` names a
    // complete checkpoint, the new one or the one before.
    mt::io::write_durably((staging / "manifest.json").string(), manifest.dump(2) + "\n");
    mt::io::sync_path(staging.string());
    fs::rename(staging, final_dir);
    mt::io::sync_path(dir);
    mt::io::write_durably((fs::path(dir) / "latest").string(), name + "\n");
    if (best_dice) mt::io::write_durably((fs::path(dir) / "best").string(), name + "\n");
    // Keep the newest and the best, and drop what a killed run left half-written.
    const auto best = pointed_to(dir, "best");
    for (const auto& old : fs::directory_iterator(dir)) {
      const std::string entry = old.path().filename().string();
      const bool checkpoint = entry.rfind("checkpoint-", 0) == 0;
      const bool stale = entry.rfind(".checkpoint-", 0) == 0;
      const bool kept = old.path() == final_dir || (best && old.path() == *best);
      if (old.is_directory() && (checkpoint || stale) && !kept) fs::remove_all(old.path());
    }
  });
}

// Loads the tensor `name` of the manifest into `into` (same dims and shape), each processor its
// block.
inline void restore_tensor(mt::Mesh& mesh, const json& manifest, const fs::path& where,
                           const std::string& name, mt::Tensor<float>& into) {
  for (const auto& entry : manifest["tensors"]) {
    if (entry.value("name", "") != name) continue;
    const auto dims = entry["dims"].get<std::vector<std::string>>();
    const auto shape = entry["shape"].get<std::vector<std::int64_t>>();
    if (dims != into.shape().names() || shape != into.shape().sizes())
      throw mt::IoError(where.string() + ": tensor " + name + " is saved with shape " +
                        mt::npy::shape_text(shape) + " but the model needs " +
                        into.shape().to_string() +
                        "; the checkpoint was made with other model flags");
    auto loaded = mt::load_npy<float>(mesh, (where / entry["file"].get<std::string>()).string(),
                                      into.shape(), into.layout().layout());
    // Its damage of form is named by load_npy; silent damage (zeros after a power loss) here.
    on_first(mesh, [&] { verify_checksum(entry, where); });
    into.set_block(loaded.release_local());  // the loaded block itself: no copy by the host
    return;
  }
  throw mt::IoError(where.string() + ": the checkpoint has no tensor " + name);
}

/// Whether a checkpoint's model has biases in the convolutions a norm follows: its flags say so,
/// and checkpoints from before they were dropped lack the key and have them.
inline bool biases_before_norm(const json& flags) {
  return flags.value("biases_before_norm", true);
}

/// Restores the model (and Adam, if given) from the manifest's checkpoint; returns its step.
inline std::int64_t restore_checkpoint(mt::Mesh& mesh, const json& manifest, const fs::path& where,
                                       UNet& net, nn::Adam<float>* adam) {
  for (const auto& entry : net.parameters().entries()) {
    auto tensor = entry.tensor;
    restore_tensor(mesh, manifest, where, entry.name, tensor);
  }
  if (adam) {
    // The moments come back as tensors on their parameters' layouts, then into Adam's state.
    auto moments = adam_moments(net.parameters(), *adam);
    std::size_t k = 0;
    for (std::size_t i = 0; i < moments.size(); i += 2, ++k) {
      restore_tensor(mesh, manifest, where, moments[i].name, moments[i].tensor);
      restore_tensor(mesh, manifest, where, moments[i + 1].name, moments[i + 1].tensor);
      adam->first_moments()[k] = moments[i].tensor.release_local();
      adam->second_moments()[k] = moments[i + 1].tensor.release_local();
    }
    adam->set_steps(manifest["optimizer"].value("steps", std::int64_t(0)));
  }
  return manifest["step"].get<std::int64_t>();
}

}  // namespace unet3d
