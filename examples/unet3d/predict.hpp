#pragma once
// `unet3d predict`: labels (and optionally class probabilities) for a CT volume in Hounsfield
// units, with the model of a checkpoint, on any mesh and layout. Each processor reads only its
// block of the input and writes only its block of the output.
//
// `unet3d generate`: a phantom volume and its labels as .npy files, to try predict on.

#include <cstdint>
#include <string>

#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"

namespace unet3d {

inline ModelConfig config_from(const json& flags) {
  ModelConfig c;
  c.depth = flags.value("depth", 3);
  c.channels = flags.value("channels", 8);
  c.norm = flags.value("norm", std::string("batch"));
  c.seed = flags.value("seed", std::uint64_t(1));
  return c;
}

inline void predict(mt::Mesh& mesh, const PredictOptions& o, const mt::Layout& layout) {
  const auto [manifest, where] = read_manifest(o.checkpoint);
  const ModelConfig config = config_from(manifest["flags"]);
  const mt::npy::Header header = mt::npy::read_header(o.input);
  mt::npy::check_type<float>(header, o.input);
  const bool batched = header.shape.size() == 4;
  if (header.shape.size() != 3 && !batched)
    throw mt::IoError(
        o.input + ": holds an array of shape " + mt::npy::shape_text(header.shape) +
        "; predict needs a volume [x, y, z] or a batch [batch, x, y, z] in HU (float32)");
  const std::size_t first = batched ? 1 : 0;
  const std::array<std::int64_t, 3> size{header.shape[first], header.shape[first + 1],
                                         header.shape[first + 2]};
  if (o.size[0] && o.size != size)
    throw mt::Error(o.input + ": the volume is " +
                    mt::npy::shape_text({size[0], size[1], size[2]}) + " but --size/--shape says " +
                    mt::npy::shape_text({o.size[0], o.size[1], o.size[2]}));
  check_geometry(size, config.depth, mesh.shape(), layout, batched ? header.shape[0] : 1);

  UNet net(mesh, config);
  restore_checkpoint(mesh, manifest, where, net, nullptr);
  mt::autodiff::NoGrad no_grad(mesh);
  mt::Shape volume_shape =
      batched ? mt::Shape{mt::Dim("batch", header.shape[0]), mt::Dim("x", size[0]),
                          mt::Dim("y", size[1]), mt::Dim("z", size[2])}
              : mt::Shape{mt::Dim("x", size[0]), mt::Dim("y", size[1]), mt::Dim("z", size[2])};
  auto hu = mt::load_npy<float>(mesh, o.input, volume_shape, layout);
  if (!batched) hu = mt::append_dim(hu, "batch", 0);
  const auto input =
      mt::append_dim(mt::map(hu, [](float v) { return network_input(v); }), "channels");
  const auto logits = net(input, /*training=*/false);
  auto labels = mt::argmax<std::uint8_t>(logits, "classes");
  if (!batched) labels = mt::drop_dim(labels, "batch");
  mt::save_npy(labels, o.output);
  if (!o.probabilities.empty()) {
    auto p = mt::softmax(logits, "classes");
    if (!batched) p = mt::drop_dim(p, "batch");
    mt::save_npy(p, o.probabilities);
  }
  if (mesh.processor() == 0)
    std::printf("unet3d: labels of %s written to %s%s%s\n", o.input.c_str(), o.output.c_str(),
                o.probabilities.empty() ? "" : ", probabilities to ", o.probabilities.c_str());
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
