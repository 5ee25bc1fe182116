#pragma once
// Scans from NIfTI files, prepared for the network on blocks: each processor reads its block of
// each channel in the canonical orientation (x, y, z towards R, A, S), the volume is resampled to
// the training voxel spacing or shape (linear for intensities, nearest for labels), padded to a
// multiple of 2^depth and prepared per channel (CT windowed, MRI z-scored: task.hpp); every step is
// a function of global positions, so the network sees the same volume on any mesh. Predictions go
// back the same way onto the scan's own grid.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/io/tensor_nifti.hpp>
#include <meshtensor/meshtensor.hpp>

#include "dataset.hpp"
#include "options.hpp"
#include "phantom.hpp"
#include "task.hpp"

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

/// How a channel's values become the network's, per voxel: CT windowed; any other modality
/// z-scored with the mean and spread of its body (the voxels that are not 0), which stays 0
/// outside. The modality is looked at once, in prepare(), not per voxel.
struct ChannelPreparation {
  bool windowed = true;
  std::array<float, 2> window = soft_tissue_window;
  float mean = 0, inverse_std = 1;

  /// The channel's values prepared, in built-in ops (which run where the blocks are): the
  /// values task.hpp's windowed() gives, and (v - mean) * inverse_std with 0 kept 0.
  mt::Tensor<float> operator()(const mt::Tensor<float>& v) const {
    if (windowed) {
      const float middle = 0.5f * (window[0] + window[1]), half = 0.5f * (window[1] - window[0]);
      return (mt::clamp(v, window[0], window[1]) - middle) / half;
    }
    return centred(v, mean) * inverse_std;
  }

  /// v - mean in the body, 0 outside (where v is 0; the mean is taken away from the body only,
  /// so that 0 stays +0).
  static mt::Tensor<float> centred(const mt::Tensor<float>& v, float mean) {
    return v - mt::not_equal(v, 0.0f) * mean;
  }
};

/// The preparation of `channel` for the volume `raw` (its statistics, for a z-scored channel,
/// summed over all processors' blocks: the same on any mesh). `source` names it in errors.
inline ChannelPreparation prepare(const mt::Tensor<float>& raw, const Channel& channel,
                                  const std::string& source) {
  ChannelPreparation p{channel.windowed(), channel.window};
  if (p.windowed) return p;
  const double voxels = mt::reduce_sum(mt::not_equal(raw, 0.0f)).item();
  if (voxels < 2)
    throw mt::IoError(source + ": channel " + channel.modality +
                      " has fewer than 2 voxels that are not 0, so no z-score over the body; is "
                      "it empty, or a CT channel (give it the modality CT)?");
  p.mean = float(mt::reduce_sum(raw).item() / voxels);
  // The spread around the mean, in a second pass: sums of squares lose it in float.
  const auto centred = ChannelPreparation::centred(raw, p.mean);
  const double variance = mt::reduce_sum(centred * centred).item() / voxels;
  p.inverse_std = variance > 0 ? float(1.0 / std::sqrt(variance)) : 1.0f;
  return p;
}

/// A scan, and its labels when it has them, on the network's grid.
struct Scan {
  mt::NiftiVolume volume;  // the first image file: the grid predictions are written on
  ScanGrid grid;
  mt::Tensor<float> input;   // [batch:1, x, y, z, channels], prepared per channel
  mt::Tensor<float> labels;  // [batch:1, x, y, z, classes], one-hot; empty without a label file
};

/// One-hot classes of a label volume, checked: every value must be a class of `task`.
inline mt::Tensor<float> one_hot(const mt::Tensor<float>& labels, const mt::Layout& layout,
                                 const std::string& path, const Task& task) {
  const float classes = float(task.num_classes());
  // A bad value may lie in one processor's block only: all of them throw.
  mt::agree(labels.mesh(), [&] {
    for (float v : labels.local())
      if (!(v >= 0 && v < classes && v == std::floor(v)))
        throw mt::IoError(path + ": holds the label value " + std::to_string(v) +
                          "; the labels of --classes are " + task.label_meanings() +
                          " (give --classes all the classes the labels hold)");
  });
  // [batch, x, y, z] against the class numbers [classes]: 1 where they agree.
  mt::Mesh& mesh = labels.mesh();
  const auto batched = mt::append_dim(labels, "batch", 0);
  const auto class_numbers =
      mt::generate<float>(mesh, mt::Shape{mt::Dim("classes", task.num_classes())}, layout,
                          [](const mt::Index& i) { return float(i["classes"]); });
  return mt::relayout(mt::equal(batched, class_numbers), layout);
}

/// Throws unless `other` lies on the grid of `reference` (`what` says what other is: "label
/// volume", "channel file"; `reference_is` what reference is to it): same size and, within
/// 1e-3 mm, the same affine.
inline void check_same_grid(const mt::NiftiVolume& other, const mt::NiftiVolume& reference,
                            const std::string& what, const std::string& reference_is = "image") {
  const auto& a = other.file;
  const auto& b = reference.file;
  if (a.size != b.size)
    throw mt::IoError(a.path + ": " + std::to_string(a.size[0]) + "x" + std::to_string(a.size[1]) +
                      "x" + std::to_string(a.size[2]) + " voxels, but its " + reference_is + " " +
                      b.path + " has " + std::to_string(b.size[0]) + "x" +
                      std::to_string(b.size[1]) + "x" + std::to_string(b.size[2]) + "; a " + what +
                      " needs its " + reference_is + "'s grid");
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      if (std::abs(a.affine[r][c] - b.affine[r][c]) > 1e-3)
        throw mt::IoError(a.path + ": its affine (voxel to world) differs from that of its " +
                          reference_is + " " + b.path + " at row " + std::to_string(r) +
                          ", column " + std::to_string(c) + " (" + std::to_string(a.affine[r][c]) +
                          " vs " + std::to_string(b.affine[r][c]) + "); a " + what + " needs its " +
                          reference_is + "'s grid");
}

/// Where each channel of a scan is: (file, volume in it), from one 4-D file holding them all
/// along dim 4, or one 3-D file per channel. Throws naming the file when the count differs from
/// the task's.
inline std::vector<std::pair<mt::NiftiVolume, std::int64_t>> channel_sources(
    mt::Mesh& mesh, const std::vector<std::string>& images, const Task& task) {
  const std::int64_t wanted = task.num_channels();
  std::vector<std::pair<mt::NiftiVolume, std::int64_t>> sources;
  if (images.size() == 1) {
    const auto volume = mt::open_nifti(mesh, images[0]);
    if (volume.file.volumes != wanted)
      throw mt::IoError(images[0] + ": holds " + std::to_string(volume.file.volumes) +
                        " channel(s) (volumes along dim 4), but the task has " +
                        std::to_string(wanted) + " (" + task.modalities() +
                        "); every scan needs the same channels, in one 4-D file or one file "
                        "each");
    for (std::int64_t c = 0; c < wanted; ++c) sources.emplace_back(volume, c);
    return sources;
  }
  if (std::int64_t(images.size()) != wanted)
    throw mt::IoError(images[0] + " and " + std::to_string(images.size() - 1) +
                      " other file(s) make one scan of " + std::to_string(images.size()) +
                      " channels, but the task has " + std::to_string(wanted) + " (" +
                      task.modalities() + ")");
  for (const auto& image : images) {
    auto volume = mt::open_nifti(mesh, image);
    if (volume.file.volumes != 1)
      throw mt::IoError(image + ": holds " + std::to_string(volume.file.volumes) +
                        " volumes along dim 4; with one file per channel each holds one");
    if (!sources.empty()) check_same_grid(volume, sources.front().first, "channel file");
    sources.emplace_back(std::move(volume), 0);
  }
  return sources;
}

/// Reads the channels of `files` (and its label file unless empty) on `layout`, each processor
/// its own block, prepared for the network as `task` says. The label volume must have the
/// image's grid.
inline Scan read_scan(mt::Mesh& mesh, const ScanFiles& files, const Task& task,
                      const mt::Layout& layout, const Preprocessing& p) {
  const auto sources = channel_sources(mesh, files.images, task);
  Scan s{sources.front().first, ScanGrid(sources.front().first, p), {}, {}};
  check_geometry(s.grid.padded, p.depth, mesh.shape(), schedule_or(p.layouts, layout));
  std::vector<mt::Tensor<float>> channels;
  for (std::size_t c = 0; c < sources.size(); ++c) {
    const auto& [volume, index] = sources[c];
    const auto raw = mt::load_nifti_volume<float>(mesh, volume, index, layout);
    const auto preparation = prepare(raw, task.channels[c], volume.file.path);
    channels.push_back(mt::append_dim(
        preparation(to_network_grid(raw, s.grid, mt::Interpolation::linear)), "channels"));
  }
  s.input = mt::append_dim(channels.size() == 1 ? channels[0] : mt::concat(channels, "channels"),
                           "batch", 0);
  if (files.label.empty()) return s;
  const auto truth = mt::open_nifti(mesh, files.label);
  check_same_grid(truth, s.volume, "label volume");
  const auto labels = to_network_grid(mt::load_nifti<float>(mesh, truth, layout), s.grid,
                                      mt::Interpolation::nearest);
  s.labels = one_hot(labels, layout, files.label, task);
  return s;
}

/// A training or validation volume from a scan and its labels.
inline Batch scan_batch(mt::Mesh& mesh, const ScanFiles& files, const Task& task,
                        const mt::Layout& layout, const Preprocessing& p) {
  Scan s = read_scan(mesh, files, task, layout, p);
  return {std::move(s.input), std::move(s.labels)};
}

}  // namespace unet3d
