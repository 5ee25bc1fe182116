#pragma once
// Surface distances of segmentations split over processors, exact on any mesh: the surface
// (edge) voxels of a mask, and for each of them the Euclidean distance in millimetres to the
// nearest edge voxel of another mask. Both run as passes along one dim at a time (Felzenszwalb
// and Huttenlocher's exact distance transform): before the pass along a dim, the volume is moved
// to a layout that keeps that dim whole on each processor, so every line is complete and the
// result is the same on any mesh. Edges are MONAI's (get_mask_edges): mask voxels with a
// 6-neighbour outside the mask or outside the volume.

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

namespace surface {

inline const char* const dims[3] = {"x", "y", "z"};
constexpr double far = std::numeric_limits<double>::infinity();

/// `layout` with dim `dim` whole on every processor: its mesh axis moved to a spatial dim the
/// layout leaves whole, or, where there is none, dropped (that axis then holds copies).
inline mt::Layout whole_along(const mt::Layout& layout, const std::string& dim) {
  const auto axis = layout.mesh_axis_of(dim);
  if (!axis) return layout;
  std::string free_dim;
  for (const char* other : dims)
    if (other != dim && !layout.mesh_axis_of(other)) free_dim = other;
  std::vector<mt::LayoutRule> rules;
  for (const auto& rule : layout.rules())
    if (rule.dim != dim) rules.push_back(rule);
  if (!free_dim.empty()) rules.push_back({free_dim, *axis});
  return mt::Layout(rules);
}

/// The lines along one dim of a local block [x, y, z]: where each starts, its length and the
/// step between its elements.
struct Lines {
  std::vector<std::int64_t> starts;
  std::int64_t length = 0, stride = 1;
};

inline Lines lines_along(const mt::Block& block, std::size_t d) {
  const auto sizes = block.sizes();
  const std::array<std::int64_t, 3> strides{sizes[1] * sizes[2], sizes[2], 1};
  Lines lines{{}, sizes[d], strides[d]};
  const std::size_t a = (d + 1) % 3, b = (d + 2) % 3;
  for (std::int64_t i = 0; i < sizes[a]; ++i)
    for (std::int64_t j = 0; j < sizes[b]; ++j)
      lines.starts.push_back(i * strides[a] + j * strides[b]);
  return lines;
}

/// The squared distance of every position of a line to the nearest site (f = 0 at sites, far
/// elsewhere, or any squared distance a previous pass left), positions `spacing` mm apart:
/// d(p) = min_q spacing² (p - q)² + f(q), the lower envelope of parabolas rooted at the sites.
inline void distance_along_line(double* line, std::int64_t n, std::int64_t stride, double spacing) {
  const double w2 = spacing * spacing;
  std::vector<double> f(std::size_t(n), 0.0), z(std::size_t(n) + 1);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < n; ++p) f[p] = line[p * stride];
  std::int64_t k = -1;  // the last parabola of the envelope
  for (std::int64_t q = 0; q < n; ++q) {
    if (f[q] == far) continue;
    while (k >= 0) {
      const std::int64_t r = v[k];
      const double s =
          ((f[q] + w2 * double(q * q)) - (f[r] + w2 * double(r * r))) / (2.0 * w2 * double(q - r));
      if (s > z[k]) {
        v[++k] = q;
        z[k] = s;
        z[k + 1] = far;
        break;
      }
      --k;
    }
    if (k < 0) {
      v[k = 0] = q;
      z[0] = -far;
      z[1] = far;
    }
  }
  if (k < 0) return;  // no site on the line: every position stays far
  for (std::int64_t p = 0, j = 0; p < n; ++p) {
    while (z[j + 1] < double(p)) ++j;
    const double dp = double(p - v[j]);
    line[p * stride] = w2 * dp * dp + f[v[j]];
  }
}

}  // namespace surface

/// The edge voxels of `mask` (1 inside, 0 outside) as 1, the rest 0, on mask's layout.
inline mt::Tensor<double> mask_edges(const mt::Tensor<double>& mask) {
  const mt::Layout layout = mask.layout().layout();
  mt::Tensor<double> inside = mask, edges = mt::map(mask, [](double) { return 0.0; });
  for (std::size_t d = 0; d < 3; ++d) {
    const mt::Layout whole = surface::whole_along(layout, surface::dims[d]);
    inside = mt::relayout(inside, whole);
    edges = mt::relayout(edges, whole);
    const auto in_block = inside.local();
    auto edge_block = edges.local();
    const auto lines = surface::lines_along(edges.block(), d);
    const std::int64_t n = lines.length, step = lines.stride;
    for (const std::int64_t start : lines.starts) {
      const double* in = in_block.data() + start;
      double* edge = edge_block.data() + start;
      for (std::int64_t p = 0; p < n; ++p)
        if (in[p * step] != 0 &&
            (p == 0 || p == n - 1 || in[(p - 1) * step] == 0 || in[(p + 1) * step] == 0))
          edge[p * step] = 1;
    }
  }
  return mt::relayout(edges, layout);
}

/// For every voxel, its squared distance in mm² to the nearest voxel where `sites` is 1 (far
/// where there is none), voxels `spacing` mm apart along x, y, z; on sites' layout.
inline mt::Tensor<double> squared_distance_to(const mt::Tensor<double>& sites,
                                              const std::array<double, 3>& spacing) {
  const mt::Layout layout = sites.layout().layout();
  auto distance = mt::map(sites, [](double s) { return s != 0 ? 0.0 : surface::far; });
  for (std::size_t d = 0; d < 3; ++d) {
    distance = mt::relayout(distance, surface::whole_along(layout, surface::dims[d]));
    auto block = distance.local();
    const auto lines = surface::lines_along(distance.block(), d);
    for (const std::int64_t start : lines.starts)
      surface::distance_along_line(block.data() + start, lines.length, lines.stride, spacing[d]);
  }
  return mt::relayout(distance, layout);
}

/// Whether this processor's block of `t` is counted: the lowest-numbered of the processors that
/// hold the same block (a layout that leaves a mesh axis unused makes copies along it).
template <class T>
bool counts_here(const mt::Tensor<T>& t) {
  const mt::MeshShape& shape = t.mesh().shape();
  for (int p = 0; p < shape.num_processors(); ++p)
    if (t.layout().block(shape.coord_of(p)).ranges == t.block().ranges)
      return p == t.mesh().processor();
  return false;
}

/// The distances in mm from each edge voxel of `from_edges` in this processor's block to the
/// nearest voxel of the squared distance map `to` (empty where the block is another's copy).
inline std::vector<double> edge_distances(const mt::Tensor<double>& from_edges,
                                          const mt::Tensor<double>& to) {
  std::vector<double> out;
  if (!counts_here(from_edges)) return out;
  const auto edges = from_edges.local();
  const auto squared = to.local();
  const double* e = edges.data();
  const double* s = squared.data();
  for (std::size_t i = 0; i < edges.size(); ++i)
    if (e[i] != 0) out.push_back(std::sqrt(s[i]));
  return out;
}

/// The k-th smallest (from 0) of the values held across all processors (each holds its own
/// list of values ≥ 0, possibly infinite), found by bisection on their bits with a count per
/// round: exact, and nothing but counts moves between processors.
inline double kth_smallest(mt::Mesh& mesh, const std::vector<double>& mine, double k) {
  auto bits = [](double v) {
    std::uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;  // for v ≥ 0 the bits order as the values
  };
  std::uint64_t low = 0, high = bits(surface::far);  // count(≤ high) covers every value
  while (low < high) {
    const std::uint64_t middle = low + (high - low) / 2;
    double below = 0;
    for (double v : mine) below += bits(v) <= middle ? 1 : 0;
    below = mt::all_reduce_value(mesh.world(), below, mt::ReduceOp::sum);
    if (below >= k + 1)
      high = middle;
    else
      low = middle + 1;
  }
  double value;
  std::memcpy(&value, &low, sizeof value);
  return value;
}

/// numpy's percentile (linear interpolation) of the values held across all processors, `count`
/// of them in all (count > 0).
inline double percentile(mt::Mesh& mesh, const std::vector<double>& mine, double count, double q) {
  const double h = (count - 1) * q / 100.0;
  const double below = std::floor(h);
  const double a = kth_smallest(mesh, mine, below);
  if (h == below) return a;
  const double b = kth_smallest(mesh, mine, below + 1);
  return a + (h - below) * (b - a);
}

}  // namespace unet3d
