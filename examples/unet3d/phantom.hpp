#pragma once
// A synthetic abdominal CT phantom, deterministic per seed: air, a body with a fat layer, a spine,
// a liver-like organ and a few small tumours, in Hounsfield units, with Gaussian noise and a smooth
// bias field. Tumours are only 20-40 HU darker than the organ under 10-15 HU noise, so one
// threshold does not find them. Every voxel is a function of the volume's seed and its global
// coordinates: each processor generates its own block and no processor ever holds the whole volume.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "task.hpp"

namespace unet3d {

namespace mt = meshtensor;

// The phantoms' classes: the default Task's.
enum Label : int { background = 0, organ = 1, tumour = 2 };
constexpr int num_classes = 3;

/// The anatomy of one volume, drawn from its seed. Coordinates are fractions of the volume extent.
struct Anatomy {
  std::array<double, 3> organ_centre, organ_radii;
  struct Tumour {
    std::array<double, 3> centre;
    double radius_voxels;  // a sphere in voxels, whatever the extents
    double contrast_hu;    // how much darker than the organ
  };
  std::vector<Tumour> tumours;
  double noise_hu;
  std::array<double, 3> bias_phase;

  Anatomy(std::uint64_t seed, const std::array<std::int64_t, 3>& size) {
    const mt::RandomStream draw(seed, "anatomy");
    std::uint64_t counter = 0;
    auto u = [&](double lo, double hi) { return lo + (hi - lo) * draw.uniform(counter++); };
    organ_centre = {u(0.54, 0.62), u(0.40, 0.50), u(0.45, 0.55)};
    organ_radii = {u(0.17, 0.22), u(0.14, 0.18), u(0.19, 0.25)};
    noise_hu = u(10, 15);
    bias_phase = {u(0, 6.3), u(0, 6.3), u(0, 6.3)};
    const double scale = double(*std::min_element(size.begin(), size.end())) / 64.0;
    const int count = 1 + int(u(0, 3));  // 1 to 3 tumours
    for (int t = 0; t < count; ++t) {
      Tumour tumour;
      tumour.radius_voxels = u(2, 8) * scale;
      // A centre well inside the organ: rejection sampling on the shrunken ellipsoid.
      for (int attempt = 0; attempt < 100; ++attempt) {
        std::array<double, 3> p{u(-1, 1), u(-1, 1), u(-1, 1)};
        if (p[0] * p[0] + p[1] * p[1] + p[2] * p[2] > 1) continue;
        for (int d = 0; d < 3; ++d)
          tumour.centre[d] = organ_centre[d] + 0.6 * organ_radii[d] * p[d];
        break;
      }
      tumour.contrast_hu = u(20, 40);
      tumours.push_back(tumour);
    }
  }
};

/// The label and the CT value (HU) of one voxel.
struct Voxel {
  int label;
  float hu;
};

inline Voxel voxel(const Anatomy& a, const std::array<std::int64_t, 3>& size,
                   const std::array<std::int64_t, 3>& at, double noise) {
  std::array<double, 3> p;
  for (int d = 0; d < 3; ++d) p[d] = (at[d] + 0.5) / double(size[d]);
  auto ellipsoid = [&](const std::array<double, 3>& c, const std::array<double, 3>& r) {
    double s = 0;
    for (int d = 0; d < 3; ++d) s += std::pow((p[d] - c[d]) / r[d], 2);
    return s;
  };
  const double body = ellipsoid({0.5, 0.5, 0.5}, {0.44, 0.36, 0.48});
  double hu = -1000;  // air
  int label = background;
  if (body < 1) {
    hu = body > 0.8 ? -100 : 40;  // a fat layer under the skin, then soft tissue
    // The spine: a dense cylinder along z at the back.
    const double spine = std::pow((p[0] - 0.5) / 0.06, 2) + std::pow((p[1] - 0.76) / 0.06, 2);
    if (spine < 1) hu = 400;
    if (ellipsoid(a.organ_centre, a.organ_radii) < 1) {
      hu = 60;
      label = organ;
      for (const auto& t : a.tumours) {
        double r2 = 0;
        for (int d = 0; d < 3; ++d) r2 += std::pow((p[d] - t.centre[d]) * size[d], 2);
        if (r2 < t.radius_voxels * t.radius_voxels) {
          hu = 60 - t.contrast_hu;
          label = tumour;
        }
      }
    }
    // A smooth inhomogeneity of about ±8 HU inside the body.
    hu += 8 * std::sin(6.283 * p[0] + a.bias_phase[0]) * std::cos(4.7 * p[1] + a.bias_phase[1]) *
          std::cos(3.1 * p[2] + a.bias_phase[2]);
  }
  return {label, float(hu + a.noise_hu * noise)};
}

/// Window and scale Hounsfield units for the network: the soft-tissue window [-160, 240] to [-1,
/// 1], the phantoms' one CT channel.
inline float network_input(float hu) { return windowed(hu, soft_tissue_window); }

/// A batch of volumes: the CT [batch, x, y, z, channels=1] (network input, windowed), the one-hot
/// labels [batch, x, y, z, classes] and the HU values (for pictures), on `layout`.
struct Batch {
  mt::Tensor<float> input, labels;
};

inline std::uint64_t volume_seed(std::uint64_t seed, const std::string& purpose,
                                 std::int64_t index) {
  return mt::RandomStream(seed, purpose).bits(static_cast<std::uint64_t>(index));
}

/// Volumes `first .. first + batch - 1` of the stream `purpose` ("train", "validation") of `seed`.
inline Batch make_batch(mt::Mesh& mesh, const mt::Layout& layout, std::uint64_t seed,
                        const std::string& purpose, std::int64_t first, std::int64_t batch,
                        const std::array<std::int64_t, 3>& size) {
  std::vector<Anatomy> anatomy;
  std::vector<std::uint64_t> seeds;
  for (std::int64_t b = 0; b < batch; ++b) {
    seeds.push_back(volume_seed(seed, purpose, first + b));
    anatomy.emplace_back(seeds.back(), size);
  }
  const mt::Shape shape{mt::Dim("batch", batch), mt::Dim("x", size[0]), mt::Dim("y", size[1]),
                        mt::Dim("z", size[2])};
  // By position (batch, x, y, z lead both tensors' shapes): looking dims up by name for every
  // voxel cost as much as drawing it.
  auto voxel_at = [&](const mt::Index& i) {
    const std::int64_t b = i[std::size_t{0}];
    const std::array<std::int64_t, 3> at{i[std::size_t{1}], i[std::size_t{2}], i[std::size_t{3}]};
    // The noise is a function of the volume and the voxel only.
    const mt::RandomStream noise(seeds[b], "noise");
    const std::uint64_t linear = (std::uint64_t(at[0]) * size[1] + at[1]) * size[2] + at[2];
    return voxel(anatomy[b], size, at, noise.normal(linear));
  };
  std::vector<mt::Dim> with_channel = shape.dims();
  with_channel.emplace_back("channels", 1);
  Batch out;
  out.input = mt::generate<float>(mesh, mt::Shape(with_channel), layout, [&](const mt::Index& i) {
    return network_input(voxel_at(i).hu);
  });
  // Each voxel's label drawn once, then one-hot against the class numbers: a generate over the
  // classes would draw the voxel once per class.
  const auto labels = mt::generate<float>(
      mesh, shape, layout, [&](const mt::Index& i) { return float(voxel_at(i).label); });
  const auto classes = mt::generate<float>(mesh, mt::Shape{mt::Dim("classes", num_classes)}, layout,
                                           [](const mt::Index& i) { return float(i["classes"]); });
  out.labels = mt::relayout(mt::equal(labels, classes), layout);
  return out;
}

}  // namespace unet3d
