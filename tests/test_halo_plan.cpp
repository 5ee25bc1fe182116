// Halo planning as pure arithmetic: the plans of every processor of a mesh, made without a mesh or
// a message, agree with each other (what one sends is what its peer receives), and carrying them
// out on plain arrays gives each processor exactly its read range, every element from its owner.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <meshtensor/core/halo_plan.hpp>

#include "support/windows.hpp"

using namespace meshtensor;

using namespace meshtensor::testing::windows;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_halo_plan {

namespace {

struct Case {
  const char* name;
  const char* mesh;
  const char* layout;
  std::vector<WindowDim> windows;  // for dims x, y, z
  bool transposed = false;
};

const Shape shape("x:10, y:7, z:5");
const WindowDim up2{2, 2, 1, 0, 0};  // a transposed convolution's: twice the size

std::vector<Case> cases() {
  return {
      {"x split 2, 3-tap", "p:2", "x:p", {conv3, conv3, conv3}},
      {"x split 4 (uneven), 3-tap", "p:4", "x:p", {conv3, conv3, none}},
      {"x, y on 2x2: corners", "rows:2; cols:2", "x:rows; y:cols", {conv3, conv3, conv3}},
      {"x, y, z on 2x2x2", "a:2; b:2; c:2", "x:a; y:b; z:c", {conv3, conv3, conv3}},
      {"halo wider than a block", "p:8", "x:p", {wide, none, none}},
      {"wider than a block on 2 axes", "rows:4; cols:2", "x:rows; y:cols", {wide, wide, conv3}},
      {"strided and dilated", "rows:2; cols:2", "x:rows; y:cols", {strided, dilated, none}},
      {"reads skip parts of blocks", "p:4", "x:p", {skipping, conv3, none}},
      {"transposed, stride 2", "rows:2; cols:2", "x:rows; y:cols", {up2, up2, none}, true},
  };
}

std::vector<HaloPlan> plans_of(const Case& c) {
  const MeshShape mesh(c.mesh);
  const TensorLayout input(shape, mesh, Layout(c.layout));
  std::vector<Dim> out_dims;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    const auto n = shape[d].size;
    const auto& w = c.windows[d];
    out_dims.push_back(
        Dim(shape[d].name, c.transposed ? w.transposed_output(n) : w.conv_output(n)));
  }
  const Shape output(out_dims);
  const HaloNeeds needs = window_needs(input, output, {"x", "y", "z"}, c.windows, c.transposed);
  std::vector<HaloPlan> plans;
  for (int p = 0; p < mesh.num_processors(); ++p)
    plans.emplace_back(input, mesh.coord_of(p), needs);
  return plans;
}

// The processor with block index `peer` along `axis` whose other coordinates are p's.
int peer_of(const MeshShape& mesh, int p, std::size_t axis, int peer) {
  MeshCoord coord = mesh.coord_of(p);
  coord[axis] = peer;
  return mesh.processor_of(coord);
}

std::int64_t value_at(const std::vector<std::int64_t>& index) {
  return index[0] * 10000 + index[1] * 100 + index[2];
}

// The values a processor holds, by global index.
struct Held {
  std::map<std::vector<std::int64_t>, std::int64_t> values;

  bool has(const std::vector<std::int64_t>& i) const { return values.count(i) > 0; }
};

template <class F>
void for_each_index(const Block& b, F&& f) {
  if (b.empty()) return;
  std::vector<std::int64_t> i;
  for (const auto& r : b.ranges) i.push_back(r.begin);
  while (true) {
    f(i);
    std::size_t d = i.size();
    while (d-- > 0) {
      if (++i[d] < b.ranges[d].end) break;
      i[d] = b.ranges[d].begin;
      if (d == 0) return;
    }
  }
}

}  // namespace

TEST_CASE("halo plans agree: what one processor sends its peer is what the peer receives") {
  for (const auto& c : cases()) {
    INFO(c.name);
    const MeshShape mesh(c.mesh);
    const auto plans = plans_of(c);
    for (int p = 0; p < int(plans.size()); ++p)
      for (std::size_t step = 0; step < plans[p].exchanged().size(); ++step)
        for (bool adjoint : {false, true})
          for (const auto& m : plans[p].step_messages(step, adjoint)) {
            const int q = peer_of(mesh, p, plans[p].step_axis(step), m.peer);
            const auto back = plans[q].step_messages(step, adjoint);
            const auto it = std::find_if(back.begin(), back.end(), [&](const HaloMessage& b) {
              return peer_of(mesh, q, plans[q].step_axis(step), b.peer) == p;
            });
            REQUIRE(it != back.end());
            CHECK(it->receive == m.send);
            CHECK(it->send == m.receive);
          }
  }
}

TEST_CASE("carried out on plain arrays, a halo plan gives each processor exactly its read range") {
  for (const auto& c : cases()) {
    INFO(c.name);
    const MeshShape mesh(c.mesh);
    const auto plans = plans_of(c);
    std::vector<Held> held(plans.size());
    for (std::size_t p = 0; p < plans.size(); ++p)
      for_each_index(plans[p].own(), [&](const auto& i) { held[p].values[i] = value_at(i); });
    const std::size_t steps = plans[0].exchanged().size();
    std::int64_t received = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      auto next = held;  // a step's messages carry what the sender held before it
      for (int p = 0; p < int(plans.size()); ++p)
        for (const auto& m : plans[p].step_messages(step, false)) {
          const int q = peer_of(mesh, p, plans[p].step_axis(step), m.peer);
          for_each_index(m.receive, [&](const auto& i) {
            REQUIRE(held[q].has(i));      // the sender holds what it sends
            CHECK_FALSE(next[p].has(i));  // and it is new to the receiver
            next[p].values[i] = held[q].values.at(i);
            ++received;
          });
          // Only what the receiver reads.
          CHECK(intersect(m.receive, plans[p].inside()) == m.receive);
        }
      held = std::move(next);
    }
    std::int64_t read_from_others = 0;
    for (std::size_t p = 0; p < plans.size(); ++p) {
      for_each_index(plans[p].inside(), [&](const auto& i) {
        REQUIRE(held[p].has(i));
        CHECK(held[p].values.at(i) == value_at(i));
      });
      read_from_others += plans[p].inside().num_elements() -
                          intersect(plans[p].inside(), plans[p].own()).num_elements();
    }
    // One element may travel twice (a corner, through a face neighbour), but never more than
    // the halos hold in all.
    CHECK(received >= read_from_others);
  }
}

TEST_CASE("a split dim read only in its own block sends nothing; the box has the padding") {
  const MeshShape mesh("p:2");
  const TensorLayout input(shape, mesh, Layout("y:p"));
  const std::vector<WindowDim> windows{conv3, none, none};
  const HaloNeeds needs = window_needs(input, shape, {"x", "y", "z"}, windows, false);
  const HaloPlan plan(input, mesh.coord_of(0), needs);
  REQUIRE(plan.exchanged() == std::vector<std::size_t>{1});  // y is split...
  for (bool adjoint : {false, true})
    CHECK(plan.step_messages(0, adjoint).empty());  // ...but each block reads only itself
  CHECK(plan.box().ranges[0] == Range{-1, 11});
  CHECK(plan.inside().ranges[0] == Range{0, 10});
  CHECK_FALSE(plan.local_only());  // the padding makes the box larger than the block
}

}  // namespace test_halo_plan
