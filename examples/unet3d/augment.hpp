#pragma once
// Training-time augmentation (--augment): random flips along x, y and z, random 90° rotations in
// a plane whose two sides are equal (so the volume keeps its shape), and a random intensity scale
// and shift per channel of the prepared input. Every draw is a function of the seed and the step
// alone, so every mesh sees the same volumes; on a split dim a flip or a rotation moves blocks
// between processors (meshtensor's flip and rotate90), exactly.

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "phantom.hpp"

namespace unet3d {

namespace mt = meshtensor;

/// Which augmentations run.
struct Augmentation {
  bool flip = false, rotate = false, intensity = false;

  bool any() const { return flip || rotate || intensity; }

  /// "none", "all", or a comma list of flip, rotate, intensity. Throws naming --augment.
  static Augmentation parse(const std::string& text) {
    Augmentation a;
    std::string rest = text;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string word = rest.substr(0, comma);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      if (word == "flip")
        a.flip = true;
      else if (word == "rotate")
        a.rotate = true;
      else if (word == "intensity")
        a.intensity = true;
      else if (word == "all")
        a.flip = a.rotate = a.intensity = true;
      else if (word != "none")
        throw mt::Error("--augment " + text + ": \"" + word +
                        "\" is no augmentation; give none, all, or a list of flip, rotate, "
                        "intensity (e.g. flip,rotate)");
    }
    return a;
  }

  std::string to_string() const {
    std::string text;
    for (const auto& [on, name] :
         {std::pair{flip, "flip"}, std::pair{rotate, "rotate"}, std::pair{intensity, "intensity"}})
      if (on) text += (text.empty() ? "" : ",") + std::string(name);
    return text.empty() ? "none" : text;
  }
};

/// What one step's augmentation does, drawn from the seed and the step.
struct AugmentDraw {
  std::array<bool, 3> flip{};                 // along x, y, z
  int turns = 0;                              // quarter turns in `plane`
  std::pair<std::string, std::string> plane;  // two dims of equal size
  std::vector<float> scale, shift;            // per channel

  // Intensities scale by up to ±10% and shift by up to ±0.1 (the prepared inputs' units: a
  // tenth of the CT window's half-width, a tenth of a standard deviation for MRI).
  static constexpr double most_scale = 0.1, most_shift = 0.1;

  AugmentDraw(const Augmentation& a, std::uint64_t seed, std::int64_t step,
              const std::array<std::int64_t, 3>& size, std::int64_t channels) {
    const mt::RandomStream draws(seed, "augment");
    std::uint64_t counter = std::uint64_t(step) * 64;  // 64 draws per step at most
    auto next = [&] { return draws.uniform(counter++); };
    static const char* const dims[3] = {"x", "y", "z"};
    for (int d = 0; d < 3; ++d) flip[d] = a.flip && next() < 0.5;
    std::vector<std::pair<std::string, std::string>> square;
    for (int d = 0; d < 3; ++d)
      for (int e = d + 1; e < 3; ++e)
        if (size[d] == size[e]) square.push_back({dims[d], dims[e]});
    if (a.rotate && !square.empty()) {
      plane = square[std::size_t(next() * double(square.size())) % square.size()];
      turns = int(next() * 4) % 4;
    }
    for (std::int64_t c = 0; c < channels && a.intensity; ++c) {
      scale.push_back(float(1.0 + most_scale * (2 * next() - 1)));
      shift.push_back(float(most_shift * (2 * next() - 1)));
    }
  }
};

// The same flips and rotation of an input or a label volume.
inline mt::Tensor<float> reoriented(mt::Tensor<float> t, const AugmentDraw& draw) {
  static const char* const dims[3] = {"x", "y", "z"};
  for (int d = 0; d < 3; ++d)
    if (draw.flip[d]) t = mt::flip(t, dims[d]);
  if (draw.turns) t = mt::rotate90(t, draw.plane.first, draw.plane.second, draw.turns);
  return t;
}

/// `batch` augmented as `a` says for training step `step` of a run seeded `seed`: the input and
/// its labels flipped and rotated together, the input's intensities scaled and shifted.
inline Batch augment(const Batch& batch, const Augmentation& a, std::uint64_t seed,
                     std::int64_t step) {
  if (!a.any()) return batch;
  const mt::Shape& shape = batch.input.shape();
  const std::int64_t channels = shape.dim("channels").size;
  const AugmentDraw draw(a, seed, step,
                         {shape.dim("x").size, shape.dim("y").size, shape.dim("z").size}, channels);
  Batch out{reoriented(batch.input, draw), reoriented(batch.labels, draw)};
  if (!a.intensity) return out;
  mt::Mesh& mesh = out.input.mesh();
  const mt::Shape per_channel{mt::Dim("channels", channels)};
  const auto scale = mt::generate<float>(mesh, per_channel, mt::Layout{}, [&](const mt::Index& i) {
    return draw.scale[std::size_t(i["channels"])];
  });
  const auto shift = mt::generate<float>(mesh, per_channel, mt::Layout{}, [&](const mt::Index& i) {
    return draw.shift[std::size_t(i["channels"])];
  });
  out.input = out.input * scale + shift;
  return out;
}

}  // namespace unet3d
