#pragma once
// Voxel axes and world space. A medical volume's affine maps voxel indices (i, j, k) to world
// millimetres (RAS+: x to the right, y to the front, z up). Scanners store the axes in any order
// and direction; a network wants one. An Orientation says which file axis and direction each
// canonical axis (x, y, z, nearest to R, A, S) comes from, so that each processor can read its
// canonical block straight from the file: reorientation is a permutation and flips of indices,
// exact and local.

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "meshtensor/core/block.hpp"

namespace meshtensor {

/// Voxel index (i, j, k, 1) to world millimetres: rows x, y, z, (0 0 0 1).
using Affine = std::array<std::array<double, 4>, 4>;

inline Affine identity_affine() {
  Affine a{};
  for (int r = 0; r < 4; ++r) a[r][r] = 1;
  return a;
}

/// Voxel size along each voxel axis: the length of the affine's columns.
inline std::array<double, 3> voxel_spacing(const Affine& a) {
  std::array<double, 3> s{};
  for (int c = 0; c < 3; ++c)
    s[c] = std::sqrt(a[0][c] * a[0][c] + a[1][c] * a[1][c] + a[2][c] * a[2][c]);
  return s;
}

/// Canonical axis d (x, y, z) holds file axis `axis[d]`, reversed where `flip[d]`.
struct Orientation {
  std::array<int, 3> axis{0, 1, 2};
  std::array<bool, 3> flip{false, false, false};

  /// The orientation whose canonical axes are nearest to world R, A, S: the pairing of voxel and
  /// world axes with the largest product of direction cosines (so oblique scans pair each voxel
  /// axis with the world axis it leans towards most), and a flip wherever it points the other way.
  static Orientation closest_canonical(const Affine& a) {
    const auto spacing = voxel_spacing(a);
    static constexpr std::array<std::array<int, 3>, 6> permutations{
        {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
    Orientation best;
    double best_score = -1;
    for (const auto& world_of_file : permutations) {
      double score = 1;
      for (int f = 0; f < 3; ++f)
        score *= spacing[f] > 0 ? std::abs(a[world_of_file[f]][f]) / spacing[f] : 0;
      if (score <= best_score) continue;
      best_score = score;
      for (int f = 0; f < 3; ++f) {
        best.axis[world_of_file[f]] = f;
        best.flip[world_of_file[f]] = a[world_of_file[f]][f] < 0;
      }
    }
    return best;
  }

  bool is_identity() const {
    return axis == std::array<int, 3>{0, 1, 2} && !flip[0] && !flip[1] && !flip[2];
  }

  /// The canonical sizes of a volume whose file axes have `file_size`.
  std::array<std::int64_t, 3> canonical_size(const std::array<std::int64_t, 3>& file_size) const {
    return {file_size[axis[0]], file_size[axis[1]], file_size[axis[2]]};
  }

  /// The file indices along axis[d] that canonical range `r` of axis d covers (a range either way).
  Range file_range(int d, const Range& r, std::int64_t file_extent) const {
    if (!flip[d]) return r;
    return {file_extent - r.end, file_extent - r.begin};
  }

  /// The affine of the canonical volume: the same world positions, reached by canonical indices.
  Affine canonical_affine(const Affine& a, const std::array<std::int64_t, 3>& file_size) const {
    Affine out = a;
    for (int r = 0; r < 3; ++r) {
      out[r][3] = a[r][3];
      for (int d = 0; d < 3; ++d) {
        const double column = a[r][axis[d]];
        out[r][d] = flip[d] ? -column : column;
        if (flip[d]) out[r][3] += column * double(file_size[axis[d]] - 1);
      }
    }
    return out;
  }

  /// The file's axis codes in the radiological convention, e.g. "RAS", "LPS", "PSR": the world
  /// direction each file axis points to.
  std::string file_codes() const {
    static constexpr char positive[3] = {'R', 'A', 'S'}, negative[3] = {'L', 'P', 'I'};
    std::string codes(3, '?');
    for (int d = 0; d < 3; ++d) codes[axis[d]] = flip[d] ? negative[d] : positive[d];
    return codes;
  }
};

}  // namespace meshtensor
