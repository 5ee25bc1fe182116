// libFuzzer target: the U-Net example's checkpoint manifest reader (examples/unet3d/manifest.hpp:
// read_manifest, check_manifest, checked_latest). The input's first line is the `latest` file, the
// rest the manifest.json of checkpoint-000001 beside it. Any input is read, or an IoError naming
// the file at fault. Where it is read: everything the example takes from a manifest afterwards
// (checkpoint.hpp, predict.hpp, train.hpp) is there with its type, so none of it can throw.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "manifest.hpp"

namespace mt = meshtensor;
using json = nlohmann::json;
using mt::fuzz::require;

namespace {

// What restore_checkpoint, config_from and check_same_flags read, read as they read it.
void use_as_the_example_does(const json& manifest) {
  const json& flags = manifest["flags"];
  (void)flags.value("depth", 3);
  (void)flags.value("channels", 8);
  (void)flags.value("norm", std::string("batch"));
  (void)flags.value("seed", std::uint64_t(1));
  for (const char* key : {"depth", "channels", "norm", "size", "batch", "seed", "lr",
                          "class_weights", "data", "spacing", "resize"})
    (void)flags.value(key, json());
  for (const auto& entry : manifest["tensors"]) {
    (void)entry.value("name", "");
    const auto dims = entry["dims"].get<std::vector<std::string>>();
    const auto shape = entry["shape"].get<std::vector<std::int64_t>>();
    require(dims.size() == shape.size(), "a tensor has a size per dim");
    for (const auto n : shape) require(n >= 1, "a tensor's sizes are positive");
    const auto file = entry["file"].get<std::string>();
    require(unet3d::plain_name(file), "a tensor's file is inside the checkpoint");
    if (entry.contains("crc32")) (void)entry["crc32"].get<std::uint32_t>();
  }
  (void)manifest["optimizer"].value("steps", std::int64_t(0));
  require(manifest["step"].get<std::int64_t>() >= 0, "the step is not negative");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = text.find('\n');
  const std::string latest = text.substr(0, newline);
  const std::string manifest = newline == std::string::npos ? "" : text.substr(newline + 1);
  const auto dir = mt::fuzz::scratch_dir() / "checkpoints";
  std::filesystem::create_directories(dir / "checkpoint-000001");
  std::ofstream(dir / "latest", std::ios::binary | std::ios::trunc) << latest << '\n';
  std::ofstream(dir / "checkpoint-000001" / "manifest.json", std::ios::binary | std::ios::trunc)
      << manifest;
  try {
    const auto [read, where] = unet3d::read_manifest(dir.string());
    require(where == dir / latest, "the checkpoint read is the one latest names");
    use_as_the_example_does(read);
  } catch (const mt::IoError& e) {
    mt::fuzz::require_named(e, dir.string());
  }
  return 0;
}
