#pragma once
// CT scans from NIfTI files, prepared for the network on blocks: each processor reads its block of
// the scan in the canonical orientation (x, y, z towards R, A, S), the volume is resampled to the
// training voxel spacing or shape (linear for Hounsfield units, nearest for labels), padded to a
// multiple of 2^depth and windowed; every step is a function of global positions, so the network
// sees the same volume on any mesh. Predictions go back the same way onto the scan's own grid.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include <meshtensor/io/tensor_nifti.hpp>
#include <meshtensor/meshtensor.hpp>

#include "dataset.hpp"
#include "options.hpp"
#include "phantom.hpp"

namespace unet3d {

namespace mt = meshtensor;

inline const char* const axis_names[3] = {"x", "y", "z"};

/// Where a scan's voxels go on the way to the network, along x, y, z.
struct ScanGrid {
  std::array<std::int64_t, 3> scan{};       // the scan's canonical size
  std::array<std::int64_t, 3> resampled{};  // after resampling
  std::array<std::int64_t, 3> padded{};     // the network's size
  std::array<double, 3> step{1, 1, 1};      // scan index per resampled index

  ScanGrid(const mt::NiftiVolume& v, const Preprocessing& p) : scan(v.size) {
    const auto spacing = v.spacing();
    const std::int64_t multiple = std::int64_t(1) << p.depth;
    for (int d = 0; d < 3; ++d) {
      if (p.shape[d] > 0) {
        resampled[d] = p.shape[d];
        step[d] = resampled[d] > 1 ? double(scan[d] - 1) / double(resampled[d] - 1) : 1.0;
      } else if (p.spacing[d] > 0) {
        step[d] = p.spacing[d] / spacing[d];
        resampled[d] = std::int64_t(std::floor(double(scan[d] - 1) / step[d] + 1e-9)) + 1;
      } else {
        resampled[d] = scan[d];
      }
      padded[d] = (resampled[d] + multiple - 1) / multiple * multiple;
    }
  }
  bool resamples(int d) const { return resampled[d] != scan[d] || step[d] != 1.0; }
};

/// The scan's voxels resampled and padded to the network's grid (`mode`: linear for images,
/// nearest for labels; padding repeats the edge).
template <class T>
mt::Tensor<T> to_network_grid(mt::Tensor<T> t, const ScanGrid& grid, mt::Interpolation mode) {
  for (int d = 0; d < 3; ++d) {
    if (grid.resamples(d)) t = mt::resize(t, axis_names[d], grid.resampled[d], mode, grid.step[d]);
    if (grid.padded[d] > grid.resampled[d])
      t = mt::pad(t, axis_names[d], 0, grid.padded[d] - grid.resampled[d], mt::PadMode::replicate);
  }
  return t;
}

/// The network's grid back onto the scan's: padding cropped, then linear resampling (of scores or
/// probabilities, before the argmax) to the scan's voxels.
inline mt::Tensor<float> to_scan_grid(mt::Tensor<float> t, const ScanGrid& grid) {
  for (int d = 0; d < 3; ++d) {
    if (grid.padded[d] > grid.resampled[d])
      t = mt::crop(t, axis_names[d], 0, grid.padded[d] - grid.resampled[d]);
    if (grid.resamples(d))
      t = mt::resize(t, axis_names[d], grid.scan[d], mt::Interpolation::linear, 1.0 / grid.step[d]);
  }
  return t;
}

/// A scan, and its labels when it has them, on the network's grid.
struct Scan {
  mt::NiftiVolume volume;
  ScanGrid grid;
  mt::Tensor<float> input;   // [batch:1, x, y, z, channels:1], windowed Hounsfield units
  mt::Tensor<float> labels;  // [batch:1, x, y, z, classes], one-hot; empty without a label file
};

/// One-hot classes of a label volume, checked: every value must be a class.
inline mt::Tensor<float> one_hot(const mt::Tensor<float>& labels, const mt::Layout& layout,
                                 const std::string& path) {
  // A bad value may lie in one processor's block only: all of them throw.
  mt::agree(labels.mesh(), [&] {
    for (float v : labels.local())
      if (!(v == 0 || v == 1 || v == 2))
        throw mt::IoError(path + ": holds the label value " + std::to_string(v) +
                          "; labels must be 0 (background), 1 (organ) or 2 (tumour)");
  });
  // [batch, x, y, z] against the class numbers [classes]: 1 where they agree.
  mt::Mesh& mesh = labels.mesh();
  const auto batched = mt::append_dim(labels, "batch", 0);
  const auto classes = mt::generate<float>(mesh, mt::Shape{mt::Dim("classes", num_classes)}, layout,
                                           [](const mt::Index& i) { return float(i["classes"]); });
  return mt::relayout(mt::equal(batched, classes), layout);
}

/// Reads `image` (and `label_file` unless empty) on `layout`, each processor its own block. The
/// label volume must have the image's grid: same size and, within 1e-3 mm, the same affine.
inline Scan read_scan(mt::Mesh& mesh, const std::string& image, const std::string& label_file,
                      const mt::Layout& layout, const Preprocessing& p) {
  const auto volume = mt::open_nifti(mesh, image);
  Scan s{volume, ScanGrid(volume, p), {}, {}};
  check_geometry(s.grid.padded, p.depth, mesh.shape(), schedule_or(p.layouts, layout));
  const auto hu = to_network_grid(mt::load_nifti<float>(mesh, s.volume, layout), s.grid,
                                  mt::Interpolation::linear);
  s.input = mt::append_dim(
      mt::append_dim(mt::map(hu, [](float v) { return network_input(v); }), "batch", 0),
      "channels");
  if (label_file.empty()) return s;
  const auto truth = mt::open_nifti(mesh, label_file);
  if (truth.file.size != s.volume.file.size)
    throw mt::IoError(
        label_file + ": " + std::to_string(truth.file.size[0]) + "x" +
        std::to_string(truth.file.size[1]) + "x" + std::to_string(truth.file.size[2]) +
        " voxels, but its image " + image + " has " + std::to_string(s.volume.file.size[0]) + "x" +
        std::to_string(s.volume.file.size[1]) + "x" + std::to_string(s.volume.file.size[2]) +
        "; a label volume needs its image's grid");
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      if (std::abs(truth.file.affine[r][c] - s.volume.file.affine[r][c]) > 1e-3)
        throw mt::IoError(label_file +
                          ": its affine (voxel to world) differs from that of its image " + image +
                          " at row " + std::to_string(r) + ", column " + std::to_string(c) + " (" +
                          std::to_string(truth.file.affine[r][c]) + " vs " +
                          std::to_string(s.volume.file.affine[r][c]) +
                          "); a label volume needs its image's grid");
  const auto labels = to_network_grid(mt::load_nifti<float>(mesh, truth, layout), s.grid,
                                      mt::Interpolation::nearest);
  s.labels = one_hot(labels, layout, label_file);
  return s;
}

/// A training or validation volume from a scan and its labels.
inline Batch scan_batch(mt::Mesh& mesh, const ScanFiles& files, const mt::Layout& layout,
                        const Preprocessing& p) {
  Scan s = read_scan(mesh, files.image, files.label, layout, p);
  return {std::move(s.input), std::move(s.labels)};
}

}  // namespace unet3d
