// The layout algebra: balanced blocks, and for every processor of meshes up to 8 (uneven splits
// included) blocks that are disjoint and cover the tensor. No communication is involved.
#include <catch2/catch.hpp>

#include <map>

#include <meshtensor/core/ownership_table.hpp>
#include <meshtensor/core/tensor_layout.hpp>

#include "support/all_layouts.hpp"

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_tensor_layout {
using Catch::Matchers::Contains;
using meshtensor::testing::all_layouts;

TEST_CASE("balanced blocks are ordered, disjoint, cover, and differ in size by at most one") {
  for (std::int64_t n = 1; n <= 20; ++n)
    for (std::int64_t parts = 1; parts <= 9; ++parts) {
      std::int64_t expected_begin = 0;
      for (std::int64_t i = 0; i < parts; ++i) {
        const Range r = block_range(n, parts, i);
        CHECK(r.begin == expected_begin);
        CHECK(r.size() == n / parts + (i < n % parts ? 1 : 0));
        expected_begin = r.end;
      }
      CHECK(expected_begin == n);
      for (std::int64_t i = 0; i < n; ++i)
        CHECK(block_range(n, parts, block_owner(n, parts, i)).contains(i));
    }
}

TEST_CASE("for every processor and every layout, blocks are disjoint and cover the tensor") {
  const Shape shape("batch:2, x:7, y:5, z:3");
  int layouts_checked = 0;
  for (const char* mesh_text :
       {"p:1", "p:2", "p:3", "p:4", "p:5", "p:8", "rows:2; cols:2", "rows:2; cols:3",
        "rows:2; cols:4", "rows:4; cols:2", "a:2; b:2; c:2"}) {
    const MeshShape mesh(mesh_text);
    for (const auto& layout : all_layouts(shape, mesh)) {
      INFO("mesh " << mesh << ", layout " << layout);
      const TensorLayout t(shape, mesh, layout);
      ++layouts_checked;
      // Processors that share coordinates on the unused axes form one copy of the tensor.
      std::map<MeshCoord, std::vector<int>> owners;  // key: coordinates on unused axes
      std::map<MeshCoord, Block> replica_block;      // key: coordinates on used axes
      for (int p = 0; p < mesh.num_processors(); ++p) {
        const auto coord = mesh.coord_of(p);
        MeshCoord unused = coord, used = coord;
        for (std::size_t a = 0; a < mesh.rank(); ++a) (t.dim_on_axis(a) ? unused : used)[a] = -1;
        owners[unused].push_back(p);
        const Block block = t.block(coord);
        for (std::size_t d = 0; d < shape.rank(); ++d) {
          CHECK(block.ranges[d].begin >= 0);
          CHECK(block.ranges[d].end <= shape[d].size);
        }
        // Processors that differ only on unused axes hold the same block.
        auto [it, inserted] = replica_block.emplace(used, block);
        if (!inserted) CHECK(it->second == block);
      }
      for (const auto& [unused, processors] : owners) {
        std::vector<int> count(shape.num_elements(), 0);
        for (int p : processors) {
          const Block b = t.block(p);
          for (auto i0 = b.ranges[0].begin; i0 < b.ranges[0].end; ++i0)
            for (auto i1 = b.ranges[1].begin; i1 < b.ranges[1].end; ++i1)
              for (auto i2 = b.ranges[2].begin; i2 < b.ranges[2].end; ++i2)
                for (auto i3 = b.ranges[3].begin; i3 < b.ranges[3].end; ++i3)
                  ++count[((i0 * 7 + i1) * 5 + i2) * 3 + i3];
        }
        CHECK(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
      }
    }
  }
  CHECK(layouts_checked > 100);
}

TEST_CASE("a tensor layout prints its splits and knows which axis splits which dim") {
  const TensorLayout t("batch:2, x:256, y:256, z:256", "rows:4; cols:2", "x:rows; y:cols; w:rows");
  CHECK(t.to_string() == "[batch=2, x=256@rows, y=256@cols, z=256]");
  CHECK(t.layout() == Layout("x:rows; y:cols"));  // the rule for w does not apply to this tensor
  CHECK(t.mesh_axis_of("x") == 0u);
  CHECK(t.mesh_axis_of("y") == 1u);
  CHECK_FALSE(t.is_split("z"));
  CHECK(t.dim_on_axis(1) == 2u);
  CHECK(t.block(MeshCoord{3, 1}).ranges ==
        std::vector<Range>{{0, 2}, {192, 256}, {128, 256}, {0, 256}});
  CHECK(t.block(7) == t.block(MeshCoord{3, 1}));
}

TEST_CASE("the ownership table shows every processor's block") {
  const TensorLayout t("x:10, y:6", "rows:2; cols:2", "x:rows; y:cols");
  CHECK(ownership_table(t) ==
        "processor  rows  cols  x       y\n"
        "        0     0     0  [0,5)   [0,3)\n"
        "        1     0     1  [0,5)   [3,6)\n"
        "        2     1     0  [5,10)  [0,3)\n"
        "        3     1     1  [5,10)  [3,6)\n");
}

TEST_CASE("layouts that do not fit the mesh or the tensor are rejected, naming what is wrong") {
  CHECK_THROWS_AS(TensorLayout("x:8", "rows:2", "x:cols"), LayoutError);
  CHECK_THROWS_WITH(TensorLayout("x:8", "rows:2", "x:cols"),
                    Contains("mesh axis \"cols\"") && Contains("\"rows\""));
  // A rule for a dim the tensor lacks must still name a real mesh axis: it catches typos.
  CHECK_THROWS_WITH(TensorLayout("x:8", "rows:2", "z:colz"), Contains("\"colz\""));
  CHECK_THROWS_AS(TensorLayout("x:8, y:8", "rows:2", "x:rows; y:rows"), LayoutError);
  CHECK_THROWS_WITH(TensorLayout("x:8, y:8", "rows:2", "x:rows; y:rows"),
                    Contains("both dims \"x\" and \"y\"") && Contains("\"rows\""));
  CHECK_NOTHROW(TensorLayout("x:8, c:3", "rows:2", "x:rows; y:rows"));
}

}  // namespace test_tensor_layout
