// unet3d evaluate's scores (examples/unet3d/evaluate.hpp) on small masks against a reference
// computed here independently, by brute force on the whole volume: edges by looking at each
// voxel's 6 neighbours, distances as the nearest of all the other surface's voxels, numpy's
// percentile on the sorted list. Every spatial layout class gives the reference's numbers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "evaluate.hpp"
#include "support/layout_cases.hpp"
#include "support/spatial_cases.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

namespace {

constexpr int nx = 11, ny = 9, nz = 7;
const std::array<double, 3> spacing{0.8, 1.2, 2.5};

using Volume = std::vector<int>;  // labels, x slowest
int at(const Volume& v, int x, int y, int z) { return v[std::size_t((x * ny + y) * nz + z)]; }

// Two classes of blobs: an ellipsoid (1) with a smaller one inside (2), centred at `c`.
Volume blobs(std::array<double, 3> c, double r1, double r2) {
  Volume v(nx * ny * nz, 0);
  for (int x = 0; x < nx; ++x)
    for (int y = 0; y < ny; ++y)
      for (int z = 0; z < nz; ++z) {
        const double d =
            std::hypot((x - c[0]) * spacing[0], (y - c[1]) * spacing[1], (z - c[2]) * spacing[2]);
        v[std::size_t((x * ny + y) * nz + z)] = d < r2 ? 2 : d < r1 ? 1 : 0;
      }
  return v;
}

struct Reference {
  double dice, hd95, nsd;
};

std::vector<std::array<int, 3>> edges(const Volume& v, int c) {
  std::vector<std::array<int, 3>> out;
  auto in = [&](int x, int y, int z) {
    return x >= 0 && y >= 0 && z >= 0 && x < nx && y < ny && z < nz && at(v, x, y, z) == c;
  };
  for (int x = 0; x < nx; ++x)
    for (int y = 0; y < ny; ++y)
      for (int z = 0; z < nz; ++z)
        if (in(x, y, z) && !(in(x - 1, y, z) && in(x + 1, y, z) && in(x, y - 1, z) &&
                             in(x, y + 1, z) && in(x, y, z - 1) && in(x, y, z + 1)))
          out.push_back({x, y, z});
  return out;
}

std::vector<double> nearest(const std::vector<std::array<int, 3>>& from,
                            const std::vector<std::array<int, 3>>& to) {
  std::vector<double> out;
  for (const auto& a : from) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& b : to)
      best = std::min(best, std::hypot((a[0] - b[0]) * spacing[0], (a[1] - b[1]) * spacing[1],
                                       (a[2] - b[2]) * spacing[2]));
    out.push_back(best);
  }
  return out;
}

double numpy_percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double h = (double(v.size()) - 1) * q / 100;
  const auto lo = std::size_t(std::floor(h));
  return lo + 1 < v.size() ? v[lo] + (h - double(lo)) * (v[lo + 1] - v[lo]) : v[lo];
}

Reference reference(const Volume& p, const Volume& t, int c, double tolerance) {
  double both = 0, np = 0, nt = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    both += p[i] == c && t[i] == c;
    np += p[i] == c;
    nt += t[i] == c;
  }
  const auto pe = edges(p, c), te = edges(t, c);
  const auto pt = nearest(pe, te), tp = nearest(te, pe);
  double close = 0;
  for (const auto* d : {&pt, &tp})
    for (double x : *d) close += x <= tolerance;
  return {2 * both / (np + nt), std::max(numpy_percentile(pt, 95), numpy_percentile(tp, 95)),
          close / double(pt.size() + tp.size())};
}

Tensor<double> as_tensor(Mesh& m, const Volume& v, const Layout& layout) {
  return generate<double>(
      m, Shape{Dim("x", nx), Dim("y", ny), Dim("z", nz)}, layout,
      [&](const Index& i) { return double(at(v, int(i["x"]), int(i["y"]), int(i["z"]))); });
}

}  // namespace

TEST_CASE("Dice, HD95 and surface Dice equal a brute-force reference on every layout") {
  const Volume truth = blobs({5, 4, 3}, 4.5, 2.6);
  const std::vector<Volume> predictions{blobs({5.4, 3.6, 3.2}, 4.8, 2.2),  // close
                                        blobs({3, 5, 2}, 3.4, 2.9),        // shifted
                                        truth};                            // perfect
  for (const auto& predicted : predictions)
    for (int c : {1, 2})
      for (double tolerance : {1.0, 2.5}) {
        const Reference r = reference(predicted, truth, c, tolerance);
        for (const auto& split : spatial_cases()) {
          // The volumes have x, y and z only.
          if (!can_run(split.mesh) || split.layout.mesh_axis_of("channels") ||
              split.layout.mesh_axis_of("batch"))
            continue;
          INFO(split.name << ", class " << c << ", tolerance " << tolerance);
          const auto scores = on_mesh(split.mesh, [&](Mesh& m) {
            return unet3d::evaluation::score_class(as_tensor(m, predicted, split.layout),
                                                   as_tensor(m, truth, split.layout), c, spacing,
                                                   tolerance);
          });
          for (const auto& s : scores) {
            CHECK(s.dice == Approx(r.dice).epsilon(1e-12));
            CHECK(s.hd95_mm == Approx(r.hd95).epsilon(1e-9));
            CHECK(s.nsd == Approx(r.nsd).epsilon(1e-12));
          }
        }
      }
}

TEST_CASE("empty masks: Dice and surface metrics are undefined or infinite, as MONAI's") {
  const Volume empty(nx * ny * nz, 0), truth = blobs({5, 4, 3}, 4.5, 2.6);
  const auto scores = on_mesh(can_run("p:2") ? "p:2" : "p:1", [&](Mesh& m) {
    const Layout layout = m.num_processors() > 1 ? Layout("x:p") : Layout();
    return std::vector<unet3d::ClassScores>{
        unet3d::evaluation::score_class(as_tensor(m, empty, layout), as_tensor(m, truth, layout), 1,
                                        spacing, 1.0),
        unet3d::evaluation::score_class(as_tensor(m, empty, layout), as_tensor(m, empty, layout), 1,
                                        spacing, 1.0)};
  });
  for (const auto& s : scores) {
    CHECK(s[0].dice == 0);
    CHECK(std::isinf(s[0].hd95_mm));
    CHECK(s[0].nsd == 0);
    CHECK(std::isnan(s[1].dice));
    CHECK(std::isnan(s[1].hd95_mm));
    CHECK(std::isnan(s[1].nsd));
  }
}

TEST_CASE("without --classes every label value a volume holds is scored, on every layout") {
  // Classes 1 and 2 from the blobs, 3 in one corner plane, 6 in one voxel: four classes.
  Volume labels = blobs({5, 4, 3}, 4.5, 2.6);
  for (int y = 0; y < ny; ++y)
    for (int z = 0; z < nz; ++z) labels[std::size_t((0 * ny + y) * nz + z)] = 3;
  labels[std::size_t(((nx - 1) * ny + ny - 1) * nz + nz - 1)] = 6;
  const std::vector<double> want{1, 2, 3, 6};
  for (const auto& split : spatial_cases()) {
    if (!can_run(split.mesh) || split.layout.mesh_axis_of("channels") ||
        split.layout.mesh_axis_of("batch"))
      continue;
    INFO(split.name);
    const auto present = on_mesh(split.mesh, [&](Mesh& m) {
      return unet3d::evaluation::labels_present(as_tensor(m, labels, split.layout));
    });
    for (const auto& p : present) CHECK(p == want);
  }
  const auto classes =
      unet3d::evaluation::classes_to_score({}, std::set<double>(want.begin(), want.end()));
  REQUIRE(classes.size() == 4);
  CHECK(classes[3].value == 6);
  CHECK(classes[3].name == "6");
  // Named classes are the values 1, 2, ... whatever the volumes hold.
  const auto named = unet3d::evaluation::classes_to_score({"background", "liver", "tumour"}, {});
  REQUIRE(named.size() == 2);
  CHECK((named[1].value == 2 && named[1].name == "tumour"));
}
