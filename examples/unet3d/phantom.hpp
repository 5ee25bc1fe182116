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

#include <xtensor/xarray.hpp>

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
  static constexpr int most_tumours = 3;
  std::vector<Tumour> tumours;  // 1 to most_tumours
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
    const int count = 1 + int(u(0, most_tumours));
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

/// What a voxel's coordinate along one dim adds to its tests: the squared terms of its distance
/// from the body's, the organ's and each tumour's centre, from the spine's axis (x and y only),
/// and the bias field's factor. A voxel adds its x's and y's terms first, so a row of voxels
/// along z shares those (row_terms).
struct DimTerms {
  double body = 0, organ = 0, spine = 0, bias = 1;
  std::array<double, Anatomy::most_tumours> tumour{};
};

inline DimTerms dim_terms(const Anatomy& a, int d, std::int64_t i, std::int64_t size) {
  static constexpr double body_radii[3] = {0.44, 0.36, 0.48};
  static constexpr double spine_axis[2] = {0.5, 0.76};
  static constexpr double bias_frequency[3] = {6.283, 4.7, 3.1};
  const auto k = std::size_t(d);
  const double p = (i + 0.5) / double(size);  // the voxel's centre, a fraction of the extent
  DimTerms t;
  t.body = std::pow((p - 0.5) / body_radii[k], 2);
  t.organ = std::pow((p - a.organ_centre[k]) / a.organ_radii[k], 2);
  if (d < 2) t.spine = std::pow((p - spine_axis[k]) / 0.06, 2);
  for (std::size_t j = 0; j < a.tumours.size(); ++j)
    t.tumour[j] = std::pow((p - a.tumours[j].centre[k]) * double(size), 2);
  // A smooth inhomogeneity of about ±8 HU inside the body: 8 sin(x) cos(y) cos(z).
  const double phase = bias_frequency[k] * p + a.bias_phase[k];
  t.bias = d == 0 ? std::sin(phase) : std::cos(phase);
  return t;
}

/// The terms of a row of voxels along z: its x's and y's added.
inline DimTerms row_terms(const DimTerms& x, const DimTerms& y) {
  DimTerms r;
  r.body = x.body + y.body;
  r.organ = x.organ + y.organ;
  r.spine = x.spine + y.spine;
  r.bias = 8 * x.bias * y.bias;
  for (std::size_t j = 0; j < r.tumour.size(); ++j) r.tumour[j] = x.tumour[j] + y.tumour[j];
  return r;
}

/// The voxel of row `row` (row_terms) at z's terms `z`.
inline Voxel voxel(const Anatomy& a, const DimTerms& row, const DimTerms& z, double noise) {
  const double body = row.body + z.body;
  double hu = -1000;  // air
  int label = background;
  if (body < 1) {
    hu = body > 0.8 ? -100 : 40;  // a fat layer under the skin, then soft tissue
    if (row.spine < 1) hu = 400;  // the spine: a dense cylinder along z at the back
    if (row.organ + z.organ < 1) {
      hu = 60;
      label = organ;
      for (std::size_t j = 0; j < a.tumours.size(); ++j) {
        const auto& t = a.tumours[j];
        if (row.tumour[j] + z.tumour[j] < t.radius_voxels * t.radius_voxels) {
          hu = 60 - t.contrast_hu;
          label = tumour;
        }
      }
    }
    hu += row.bias * z.bias;
  }
  return {label, float(hu + a.noise_hu * noise)};
}

inline Voxel voxel(const Anatomy& a, const std::array<std::int64_t, 3>& size,
                   const std::array<std::int64_t, 3>& at, double noise) {
  return voxel(a, row_terms(dim_terms(a, 0, at[0], size[0]), dim_terms(a, 1, at[1], size[1])),
               dim_terms(a, 2, at[2], size[2]), noise);
}

/// Window and scale Hounsfield units for the network: the soft-tissue window [-160, 240] to [-1,
/// 1], the phantoms' one CT channel.
inline float network_input(float hu) { return windowed(hu, soft_tissue_window); }

inline std::uint64_t volume_seed(std::uint64_t seed, const std::string& purpose,
                                 std::int64_t index) {
  return mt::RandomStream(seed, purpose).bits(static_cast<std::uint64_t>(index));
}

/// Volumes `first .. first + batch - 1` of the stream `purpose` ("train", "validation") of `seed`,
/// voxel by voxel.
class PhantomVolumes {
 public:
  PhantomVolumes(std::uint64_t seed, const std::string& purpose, std::int64_t first,
                 std::int64_t batch, const std::array<std::int64_t, 3>& size)
      : size_(size) {
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::uint64_t volume = volume_seed(seed, purpose, first + b);
      anatomy_.emplace_back(volume, size);
      noise_.emplace_back(volume, "noise");
    }
  }

  /// The voxel at `at` of volume `b`; its noise is a function of the volume and the voxel only.
  Voxel at(std::int64_t b, const std::array<std::int64_t, 3>& at) const {
    return voxel(anatomy_[std::size_t(b)], size_, at, noise(b, at));
  }

  /// The voxels of a block's batch, x, y and z ranges (its first four dims), row-major: at()'s,
  /// each dim's terms computed once for the block and each row's once for its voxels.
  std::vector<Voxel> block(const mt::Block& block) const {
    const auto& r = block.ranges;
    std::vector<Voxel> voxels;
    voxels.reserve(std::size_t(r[0].size() * r[1].size() * r[2].size() * r[3].size()));
    for (std::int64_t b = r[0].begin; b < r[0].end; ++b) {
      const Anatomy& a = anatomy_[std::size_t(b)];
      std::array<std::vector<DimTerms>, 3> terms;  // along x, y, z: the block's coordinates'
      for (int d = 0; d < 3; ++d)
        for (std::int64_t i = r[std::size_t(d) + 1].begin; i < r[std::size_t(d) + 1].end; ++i)
          terms[std::size_t(d)].push_back(dim_terms(a, d, i, size_[std::size_t(d)]));
      for (std::int64_t x = r[1].begin; x < r[1].end; ++x)
        for (std::int64_t y = r[2].begin; y < r[2].end; ++y) {
          const DimTerms row = row_terms(terms[0][std::size_t(x - r[1].begin)],
                                         terms[1][std::size_t(y - r[2].begin)]);
          for (std::int64_t z = r[3].begin; z < r[3].end; ++z)
            voxels.push_back(
                voxel(a, row, terms[2][std::size_t(z - r[3].begin)], noise(b, {x, y, z})));
        }
    }
    return voxels;
  }

 private:
  double noise(std::int64_t b, const std::array<std::int64_t, 3>& at) const {
    const std::uint64_t linear = (std::uint64_t(at[0]) * size_[1] + at[1]) * size_[2] + at[2];
    return noise_[std::size_t(b)].normal(linear);
  }

  std::array<std::int64_t, 3> size_;
  std::vector<Anatomy> anatomy_;
  std::vector<mt::RandomStream> noise_;
};

/// The global shape of a batch's tensor: [batch, x, y, z, `last`] (channels or classes).
inline mt::Shape batch_shape(std::int64_t batch, const std::array<std::int64_t, 3>& size,
                             const mt::Dim& last) {
  return mt::Shape{mt::Dim("batch", batch), mt::Dim("x", size[0]), mt::Dim("y", size[1]),
                   mt::Dim("z", size[2]), last};
}

/// Where a batch's input [batch, x, y, z, channels:1] and one-hot labels [..., classes] lie.
struct BatchLayouts {
  mt::TensorLayout input, labels;

  BatchLayouts(const mt::MeshShape& mesh, const mt::Layout& layout, std::int64_t batch,
               const std::array<std::int64_t, 3>& size)
      : input(batch_shape(batch, size, mt::Dim("channels", 1)), mesh, layout),
        labels(batch_shape(batch, size, mt::Dim("classes", num_classes)), mesh, layout) {}

  /// Throws naming the tensor where this processor's block of either is over the limit on one
  /// block: before anything is drawn.
  void check_fits(const mt::Mesh& mesh) const {
    mt::check_block_fits<float>(mesh, input);
    mt::check_block_fits<float>(mesh, labels);
  }
};

/// One processor's blocks of a batch, as the host holds them before they become tensors.
struct BatchBlocks {
  BatchLayouts layouts;
  xt::xarray<float> input, labels;
};

/// Processor `me`'s blocks of volumes `first ..` of the stream `purpose` of `seed`, as many as
/// `layouts` hold: the CT (windowed) and the one-hot labels, each voxel drawn once for both. It
/// touches no mesh, only the host's memory, so a data loader's worker thread can draw the next
/// batch while a step runs (loader.hpp).
inline BatchBlocks draw_batch_blocks(const BatchLayouts& layouts, const mt::MeshCoord& me,
                                     std::uint64_t seed, const std::string& purpose,
                                     std::int64_t first) {
  BatchBlocks out{layouts, {}, {}};
  const mt::Shape& shape = layouts.input.shape();
  const std::array<std::int64_t, 3> size{shape[1].size, shape[2].size, shape[3].size};
  // The two blocks share their batch, x, y and z ranges: a layout splits a dim by its name.
  const mt::Block in_block = out.layouts.input.block(me),
                  label_block = out.layouts.labels.block(me);
  const std::vector<Voxel> voxels =
      PhantomVolumes(seed, purpose, first, shape[0].size, size).block(in_block);
  auto sizes = [](const mt::Block& b) {
    const auto s = b.sizes();
    return std::vector<std::size_t>(s.begin(), s.end());
  };
  out.input = xt::xarray<float>::from_shape(sizes(in_block));
  out.labels = xt::xarray<float>::from_shape(sizes(label_block));
  const std::int64_t channels = in_block.ranges[4].size();
  const mt::Range classes = label_block.ranges[4];
  for (std::size_t v = 0; v < voxels.size(); ++v) {
    for (std::int64_t c = 0; c < channels; ++c)
      out.input.data()[v * channels + c] = network_input(voxels[v].hu);
    for (std::int64_t c = classes.begin; c < classes.end; ++c)
      out.labels.data()[v * classes.size() + (c - classes.begin)] =
          voxels[v].label == c ? 1.0f : 0.0f;
  }
  return out;
}

/// A batch of volumes: the CT [batch, x, y, z, channels=1] (network input, windowed) and the
/// one-hot labels [batch, x, y, z, classes], on `layout`.
struct Batch {
  mt::Tensor<float> input, labels;
};

/// The tensors of a processor's blocks, in the processor's memory.
inline Batch to_batch(mt::Mesh& mesh, const BatchBlocks& blocks) {
  return {mt::Tensor<float>(mesh, blocks.layouts.input, blocks.input),
          mt::Tensor<float>(mesh, blocks.layouts.labels, blocks.labels)};
}

/// Volumes `first .. first + batch - 1` of the stream `purpose` ("train", "validation") of `seed`:
/// each processor draws its own blocks. A plan's blocks hold no values, so nothing is drawn.
inline Batch make_batch(mt::Mesh& mesh, const mt::Layout& layout, std::uint64_t seed,
                        const std::string& purpose, std::int64_t first, std::int64_t batch,
                        const std::array<std::int64_t, 3>& size) {
  const BatchLayouts layouts(mesh.shape(), layout, batch, size);
  layouts.check_fits(mesh);
  if (mesh.device().is_plan())
    return {mt::zeros<float>(mesh, layouts.input.shape(), layout),
            mt::zeros<float>(mesh, layouts.labels.shape(), layout)};
  return to_batch(mesh, draw_batch_blocks(layouts, mesh.coord(), seed, purpose, first));
}

}  // namespace unet3d
