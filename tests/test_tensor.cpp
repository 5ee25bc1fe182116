// Tensors: creation from global coordinates, scatter and gather, and relayout between every pair of
// layouts on meshes up to 8 processors — under the transport this executable was built for.
#include <catch2/catch.hpp>

#include "support/all_layouts.hpp"
#include "support/blocks.hpp"
#include "support/errors.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_tensor {
using Catch::Matchers::Contains;

namespace {

const Shape shape("batch:2, x:7, y:5, z:3");

xt::xarray<float> reference_array() {
  return on_one_processor([](Mesh& m) {
    return generate<float>(m, shape, "", [](const Index& i) { return test_value(i); }).local();
  });
}

}  // namespace

TEST_CASE("generate fills each block from global coordinates, by dim name") {
  auto blocks = on_mesh("rows:2; cols:2", [](Mesh& m) {
    auto t = generate<int>(m, "x:6, y:4", "x:rows; y:cols",
                           [](const Index& i) { return int(10 * i["x"] + i[1]); });
    return local_block(t);
  });
  for (const auto& b : blocks)
    for (auto x = b.block.ranges[0].begin; x < b.block.ranges[0].end; ++x)
      for (auto y = b.block.ranges[1].begin; y < b.block.ranges[1].end; ++y)
        CHECK(b.data(x - b.block.ranges[0].begin, y - b.block.ranges[1].begin) == 10 * x + y);
}

TEST_CASE("scatter then gather gives the array back, on every layout class") {
  const auto reference = reference_array();
  for (const char* mesh : {"p:1", "p:2", "p:4", "p:8", "rows:2; cols:2", "rows:2; cols:4"}) {
    for (const auto& layout : all_layouts(shape, mesh)) {
      INFO(transport_under_test() << " transport, mesh " << mesh << ", layout " << layout);
      auto gathered = on_mesh(mesh, [&](Mesh& m) {
        auto t = scatter(m, shape, layout, reference);
        return std::pair(local_block(t), gather(t));
      });
      for (const auto& [block, full] : gathered) {
        CHECK(mismatch(block, reference, 0.0) == "");
        CHECK(full == reference);
      }
    }
  }
}

TEST_CASE("relayout moves data to any layout, and relayout back is the identity") {
  const auto reference = reference_array();
  int pairs = 0;
  for (const char* mesh_text :
       {"p:2", "p:3", "p:4", "rows:2; cols:2", "p:8", "rows:2; cols:4", "a:2; b:2; c:2"}) {
    const MeshShape mesh(mesh_text);
    if (!can_run(mesh)) continue;
    const auto layouts = all_layouts(shape, mesh);
    INFO(transport_under_test() << " transport, mesh " << mesh);
    auto failures = on_mesh(mesh, [&](Mesh& m) {
      std::vector<std::string> found;
      for (std::size_t a = 0; a < layouts.size(); ++a)
        for (std::size_t b = 0; b < layouts.size(); ++b) {
          // On the largest meshes every third pair is enough to keep the test quick.
          if (layouts.size() > 40 && (a + b) % 3 != 0) continue;
          auto t =
              generate<float>(m, shape, layouts[a], [](const Index& i) { return test_value(i); });
          auto moved = relayout(t, layouts[b]);
          auto back = relayout(moved, layouts[a]);
          const std::string where = layouts[a].to_string() + " -> " + layouts[b].to_string();
          if (moved.layout() != TensorLayout(shape, mesh, layouts[b]))
            found.push_back(where + ": wrong layout " + moved.layout().to_string());
          if (auto why = mismatch(local_block(moved), reference, 0.0); !why.empty())
            found.push_back(where + ": " + why);
          if (!(back.local() == t.local())) found.push_back(where + " and back: data changed");
        }
      return std::pair(found, layouts.size());
    });
    for (const auto& [found, count] : failures) {
      CHECK(found == std::vector<std::string>{});
      pairs += static_cast<int>(count);
    }
  }
  CHECK((pairs > 0 || transport_under_test() == "mpi"));
}

TEST_CASE("relayout to the same layout shares the data; clone copies it") {
  auto ok = on_mesh("p:2", [](Mesh& m) {
    auto t = zeros<float>(m, "x:4", "x:p");
    auto same = relayout(t, "x:p");
    auto copy = t.clone();
    t.local()(0) = 5;
    return same.local()(0) == 5 && copy.local()(0) == 0;
  });
  for (bool b : ok) CHECK(b);
}

TEST_CASE("a tensor computed on read writes its block at its first read, once, for every handle") {
  auto results = on_mesh("p:2", [](Mesh& m) {
    int runs = 0;
    const TensorLayout layout(Shape("x:6, y:2"), m.shape(), Layout("x:p"));
    auto recipe = std::make_shared<const Tensor<float>::Recipe>([&runs](float* into) {
      ++runs;
      const std::vector<float> values{0, 1, 2, 3, 4, 5};
      copy_from_host(values.data(), 6, into, memory_pool().source().space);  // a GPU's, under nccl
    });
    auto t = Tensor<float>::computed_on_read(m, layout, recipe);
    const auto in_use = memory_stats().in_use;
    auto view = t.detach();
    const bool unwritten = t.unwritten() && view.unwritten() && runs == 0;
    const bool recipe_kept = t.recipe() == recipe;
    const float read = view.local()(2, 1);  // a detached view writes the block for both handles
    const bool written_once = !t.unwritten() && t.array().data() == view.array().data() &&
                              t.local()(1, 0) == 2.0f && runs == 1;
    const bool block_held = memory_stats().in_use - in_use >= 6 * sizeof(float);
    auto other = Tensor<float>::computed_on_read(m, layout, recipe);
    other.set_block(Array<float>::from_shape({3, 2}));  // replaced before any read: never run
    other.array();
    return unwritten && recipe_kept && read == 5.0f && written_once && block_held && runs == 1 &&
           !other.unwritten();
  });
  for (bool ok : results) CHECK(ok);
}

TEST_CASE("tensor errors name the shapes involved") {
  auto errors = on_mesh("p:2", [](Mesh& m) {
    ErrorLog record;
    record([&] { scatter(m, "x:4, y:2", "x:p", xt::xarray<float>::from_shape({4, 3})); });
    record([&] {
      Tensor<float>(m, TensorLayout("x:4", m.shape(), "x:p"), xt::xarray<float>::from_shape({3}));
    });
    record([&] {
      Tensor<float>(m, TensorLayout("x:4", "q:2", "x:q"), xt::xarray<float>::from_shape({2}));
    });
    record([&] { zeros<float>(m, "x:4").item(); });
    record([&] { Tensor<float>().shape(); });
    record([&] { generate<float>(m, "x:4", "x:p", [](const Index& i) { return float(i["y"]); }); });
    return record.messages();
  });
  for (const auto& what : errors) {
    REQUIRE(what.size() == 6);
    CHECK_THAT(what[0], Contains("shape (4, 3)") && Contains("[x=4, y=2]"));
    CHECK_THAT(what[1], Contains("expected (2)") && Contains("got (3)"));
    CHECK_THAT(what[2], Contains("mesh [q=2]") && Contains("[p=2]"));
    CHECK_THAT(what[3], Contains("without dims") && Contains("[x=4]"));
    CHECK_THAT(what[4], Contains("empty meshtensor::Tensor"));
    CHECK_THAT(what[5], Contains("no dim \"y\""));
  }
}

TEST_CASE("relayout moves only what changes owner: slicing is free, gathers send each block once") {
  struct Move {
    const char* mesh;
    const char* shape;
    const char* from;
    const char* to;
    std::vector<std::uint64_t> messages, bytes;  // sent by each processor
  };
  constexpr std::uint64_t f = sizeof(float);
  const Move moves[] = {
      // Slicing: the new block is part of the old one.
      {"p:4", "x:8, y:3", "", "x:p", {0, 0, 0, 0}, {0, 0, 0, 0}},
      {"rows:2; cols:2", "x:8, y:8", "x:rows", "x:rows; y:cols", {0, 0, 0, 0}, {0, 0, 0, 0}},
      // All-gather: each 2x3 block goes to the 3 others.
      {"p:4", "x:8, y:3", "x:p", "", {3, 3, 3, 3}, {18 * f, 18 * f, 18 * f, 18 * f}},
      // All-to-all: a 2x2 piece to each of the 3 others.
      {"p:4", "x:8, y:8", "x:p", "y:p", {3, 3, 3, 3}, {12 * f, 12 * f, 12 * f, 12 * f}},
      // Transposing the mesh: the diagonal keeps its block, the two others swap theirs.
      {"rows:2; cols:2",
       "x:8, y:8",
       "x:rows; y:cols",
       "y:rows; x:cols",
       {0, 1, 1, 0},
       {0, 16 * f, 16 * f, 0}},
  };
  for (const auto& move : moves) {
    if (!can_run(move.mesh)) continue;
    INFO(transport_under_test() << " transport, " << move.shape << " on " << move.mesh << ": \""
                                << move.from << "\" -> \"" << move.to << "\"");
    auto sent = on_mesh(move.mesh, [&](Mesh& m) {
      auto t =
          generate<float>(m, move.shape, move.from, [](const Index& i) { return test_value(i); });
      const auto before = m.world().traffic();
      relayout(t, move.to);
      const auto after = m.world().traffic();
      return std::tuple(m.processor(), after.messages - before.messages,
                        after.bytes - before.bytes);
    });
    for (const auto& [processor, messages, bytes] : sent) {
      INFO("processor " << processor);
      CHECK(messages == move.messages[processor]);
      CHECK(bytes == move.bytes[processor]);
    }
  }
}

}  // namespace test_tensor
