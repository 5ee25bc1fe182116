// Halo exchange: every processor gets exactly its read range (padding outside the tensor), the
// gradient path is the exact adjoint, and the bytes sent are exactly the margins.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <tuple>

#include <meshtensor/core/window.hpp>
#include <meshtensor/kernels/transfer.hpp>
#include <meshtensor/ops/halo.hpp>

#include "support/blocks.hpp"
#include "support/spmd.hpp"
#include "support/windows.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

using namespace meshtensor::testing::windows;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_halo {

namespace {

// Read ranges of a conv-like window on every dim: windows[d] applies to dim d.
HaloNeeds conv_needs(const TensorLayout& layout, const std::vector<WindowDim>& windows) {
  HaloNeeds needs;
  for (std::size_t d = 0; d < layout.rank(); ++d) {
    const auto axis = layout.mesh_axis_of(d);
    const int parts = axis ? layout.mesh_shape()[*axis].size : 1;
    const auto n_out = windows[d].conv_output(layout.shape()[d].size);
    std::vector<Range> per_block;
    for (int j = 0; j < parts; ++j)
      per_block.push_back(windows[d].conv_reads(block_range(n_out, parts, j)));
    needs.push_back(per_block);
  }
  return needs;
}

struct Case {
  const char* name;
  const char* mesh;
  const char* layout;
  std::vector<WindowDim> windows;  // for dims batch, x, y, z
};

const Shape shape("batch:2, x:10, y:7, z:5");

std::vector<Case> cases() {
  return {
      {"x split 2, 3-tap", "p:2", "x:p", {none, conv3, conv3, conv3}},
      {"x split 4 (uneven), 3-tap", "p:4", "x:p", {none, conv3, conv3, none}},
      {"x, y on 2x2, 3-tap: corners",
       "rows:2; cols:2",
       "x:rows; y:cols",
       {none, conv3, conv3, conv3}},
      {"x, y, z on 2x2x2, 3-tap", "a:2; b:2; c:2", "x:a; y:b; z:c", {none, conv3, conv3, conv3}},
      {"batch + x hybrid", "rows:2; cols:2", "batch:rows; x:cols", {none, conv3, dilated, none}},
      {"halo wider than a block (x over 8)", "p:8", "x:p", {none, wide, none, none}},
      {"halo wider than a block on 2 axes",
       "rows:4; cols:2",
       "x:rows; y:cols",
       {none, wide, wide, conv3}},
      {"strided and dilated", "rows:2; cols:2", "x:rows; y:cols", {none, strided, dilated, none}},
      {"reads skip parts of blocks", "p:4", "x:p", {none, skipping, conv3, none}},
  };
}

// The values of a block or buffer (in GPU memory under nccl), on the host.
template <class A>
std::vector<double> values_of(const A& a) {
  std::vector<double> values(a.size());
  copy_to_host(a.data(), a.space(), std::int64_t(a.size()), values.data());
  return values;
}

Tensor<double> test_tensor(Mesh& m, const char* layout) {
  return generate<double>(m, shape, layout, [](const Index& i) { return double(test_value(i)); });
}

HaloExchange plan_of(Mesh& m, const Case& c) {
  const TensorLayout layout(shape, m.shape(), c.layout);
  return HaloExchange(layout, m.coord(), conv_needs(layout, c.windows));
}

struct Observed {
  std::string mismatch;
  double forward_dot = 0, adjoint_dot = 0;  // summed over processors
  std::int64_t sent = 0, margin = 0;        // bytes, summed over processors
  std::int64_t pieces = 0;                  // halo pieces received, summed over processors
  bool adjoint_checked = false;
};

}  // namespace

TEST_CASE("halo exchange fills each read range, its adjoint matches, and only margins move") {
  const auto global = on_one_processor([](Mesh& m) { return test_tensor(m, "").local(); });
  for (const auto& c : cases()) {
    if (!can_run(c.mesh)) continue;
    INFO(transport_under_test() << " transport, case " << c.name);
    auto observed = on_mesh(c.mesh, [&](Mesh& m) {
      Observed o;
      const HaloExchange plan = plan_of(m, c);
      const auto x = test_tensor(m, c.layout);
      const auto before = m.traffic();
      const auto filled_block = plan.exchange(m, HaloForm::padded, x.array(), -7.0).array;
      const std::vector<double> filled = values_of(filled_block);
      o.sent = m.traffic().bytes - before.bytes;

      // Inside the tensor: the global values; outside: the padding.
      const Block& box = plan.box();
      const auto strides = kernels::row_major_strides(shape.sizes());
      std::size_t k = 0;
      std::vector<std::int64_t> at(4);
      for (at[0] = box.ranges[0].begin; at[0] < box.ranges[0].end; ++at[0])
        for (at[1] = box.ranges[1].begin; at[1] < box.ranges[1].end; ++at[1])
          for (at[2] = box.ranges[2].begin; at[2] < box.ranges[2].end; ++at[2])
            for (at[3] = box.ranges[3].begin; at[3] < box.ranges[3].end; ++at[3], ++k) {
              bool inside = true;
              for (std::size_t d = 0; d < 4; ++d) inside &= at[d] >= 0 && at[d] < shape[d].size;
              const double want = inside ? global.data()[kernels::offset_of(at, strides)] : -7.0;
              if (filled[k] != want && o.mismatch.empty())
                o.mismatch = "processor " + std::to_string(m.processor()) + ": element " +
                             std::to_string(k) + " of the read box";
            }
      // The margin: read elements inside the tensor that this processor does not own.
      std::int64_t inside = 1, owned = 1;
      for (std::size_t d = 0; d < 4; ++d) {
        inside *= intersect(box.ranges[d], {0, shape[d].size}).size();
        owned *= intersect(box.ranges[d], plan.own().ranges[d]).size();
      }
      o.margin = static_cast<std::uint64_t>(inside - owned) * sizeof(double);

      // <exchange(x), y> summed over processors equals <x, exchange_add(y)> summed.
      std::vector<double> y(filled.size());
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = std::sin(1.0 + i + 7 * m.processor());
      const auto back = values_of(plan.exchange_adjoint(
          m, HaloForm::padded, HaloBox<double>{array_from_host(y, filled_block.shape()), {}}));
      const auto x_values = values_of(x.array());
      double forward = 0, adjoint = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        const double f = filled[i] == -7.0 ? 0.0 : filled[i];  // padding is constant
        forward += f * y[i];
      }
      for (std::size_t i = 0; i < back.size(); ++i) adjoint += x_values[i] * back[i];
      o.forward_dot = all_reduce_value(m.world(), forward, ReduceOp::sum);
      o.adjoint_dot = all_reduce_value(m.world(), adjoint, ReduceOp::sum);
      o.sent = all_reduce_value(m.world(), std::int64_t(o.sent), ReduceOp::sum);
      o.margin = all_reduce_value(m.world(), std::int64_t(o.margin), ReduceOp::sum);
      return o;
    });
    for (const auto& o : observed) {
      CHECK(o.mismatch == "");
      CHECK(o.forward_dot == Approx(o.adjoint_dot).epsilon(1e-12));
      CHECK(o.sent == o.margin);
    }
  }
}

TEST_CASE("on a 2x2 mesh a 3-tap halo takes two messages per processor, corners included") {
  auto sent = on_mesh("rows:2; cols:2", [](Mesh& m) {
    const TensorLayout layout("x:8, y:6", m.shape(), "x:rows; y:cols");
    HaloNeeds needs;
    for (std::size_t d = 0; d < 2; ++d) {
      std::vector<Range> per_block;
      for (int j = 0; j < 2; ++j)
        per_block.push_back(conv3.conv_reads(block_range(layout.shape()[d].size, 2, j)));
      needs.push_back(per_block);
    }
    const HaloExchange plan(layout, m.coord(), needs);
    auto x = zeros<float>(m, "x:8, y:6", "x:rows; y:cols");
    const auto before = m.traffic();
    plan.exchange(m, HaloForm::padded, x.array(), 0.0f);
    return std::pair(m.traffic().messages - before.messages, m.traffic().bytes - before.bytes);
  });
  // A 4x3 block reads 5x4 inside the tensor: 3 elements along x, then 5 along y with the corner.
  for (const auto& [messages, bytes] : sent) {
    CHECK(messages == 2);
    CHECK(bytes == 8 * sizeof(float));
  }
}

TEST_CASE(
    "the halo comes as pieces beside the block, split along any dims; with one, the exact "
    "adjoint") {
  const auto global = on_one_processor([](Mesh& m) { return test_tensor(m, "").local(); });
  for (const auto& c : cases()) {
    if (!can_run(c.mesh)) continue;
    INFO(transport_under_test() << " transport, case " << c.name);
    auto observed = on_mesh(c.mesh, [&](Mesh& m) {
      Observed o;
      const HaloExchange plan = plan_of(m, c);
      const auto x = test_tensor(m, c.layout);
      const auto pieces = plan.finish(m, plan.begin(m, HaloForm::pieces, x.array())).pieces;
      // Each piece holds the global values of its box; with the own block they tile inside().
      const auto strides = kernels::row_major_strides(shape.sizes());
      std::int64_t covered = plan.own().num_elements();
      HaloPieces<double> gradients;
      double forward = 0;
      for (const auto& [box, piece] : pieces) {
        covered += box.num_elements();
        const std::vector<double> data = values_of(piece);
        std::vector<double> want(data.size());
        kernels::reference::copy_box(box.sizes(),
                                     global.data() + kernels::offset_of(box.offsets(), strides),
                                     strides, want.data(), kernels::row_major_strides(box.sizes()));
        if (!std::equal(want.begin(), want.end(), data.begin()) && o.mismatch.empty())
          o.mismatch = "processor " + std::to_string(m.processor()) + ": a piece's values";
        std::vector<double> gradient(data.size());
        for (std::size_t i = 0; i < gradient.size(); ++i) {
          gradient[i] = std::sin(1.0 + i + 7 * m.processor() + box.ranges[1].begin);
          forward += data[i] * gradient[i];
        }
        gradients.emplace_back(box, buffer_from_host(gradient));
      }
      // (Where reads skip parts of the block, inside() does not contain it: no tiling then.)
      const bool tiles = plan.inside_work() == plan.inside();
      if (tiles && covered != plan.inside().num_elements() && o.mismatch.empty())
        o.mismatch = "processor " + std::to_string(m.processor()) + ": pieces and block cover " +
                     std::to_string(covered) + " of " +
                     std::to_string(plan.inside().num_elements()) + " elements";
      o.pieces = all_reduce_value(m.world(), std::int64_t(pieces.size()), ReduceOp::sum);
      if (plan.exchanged().size() != 1) return o;  // the adjoint of pieces: one split dim
      // <pieces, gradients> summed over processors equals <x, what the adjoint adds> summed.
      Array<double> back = Array<double>::from_shape(x.array().shape());
      on_host(back).fill(0.0);
      auto pending = plan.begin_adjoint(
          m, HaloForm::pieces, HaloBox<double>{empty_array<double>(), std::move(gradients)});
      back = plan.finish(m, std::move(pending), std::move(back)).array;
      const auto back_values = values_of(back), x_values = values_of(x.array());
      double adjoint = 0;
      for (std::size_t i = 0; i < back.size(); ++i) adjoint += x_values[i] * back_values[i];
      o.forward_dot = all_reduce_value(m.world(), forward, ReduceOp::sum);
      o.adjoint_dot = all_reduce_value(m.world(), adjoint, ReduceOp::sum);
      o.adjoint_checked = true;
      return o;
    });
    for (const auto& o : observed) {
      CHECK(o.mismatch == "");
      if (!o.adjoint_checked) continue;
      CHECK(o.forward_dot == Approx(o.adjoint_dot).epsilon(1e-12));
      if (o.pieces > 0) CHECK(o.forward_dot != 0.0);  // the dots compared something
    }
  }
}

TEST_CASE("halo rows that are one run of the block are sent from it, unpacked") {
  // Split along its outermost dim, a block's boundary rows lie in one run of memory: they leave
  // from there, so the exchange takes pool memory only for what it receives. Split along an inner
  // dim, each sent box is strided and packed into a buffer of its own first.
  for (const char* layout : {"x:p", "y:p"}) {
    INFO(transport_under_test() << " transport, layout " << layout);
    auto counts = on_mesh("p:2", [&](Mesh& m) {
      const TensorLayout tl("x:8, y:6, z:5", m.shape(), layout);
      const HaloExchange plan(tl, m.coord(), conv_needs(tl, {conv3, conv3, none}));
      const auto x = generate<float>(m, tl.shape(), layout,
                                     [](const Index& i) { return float(test_value(i)); });
      const auto allocated = memory_stats().allocations;
      const auto sent = m.traffic().messages;
      const auto pieces = plan.finish(m, plan.begin(m, HaloForm::pieces, x.array())).pieces;
      return std::tuple(memory_stats().allocations - allocated, pieces.size(),
                        m.traffic().messages - sent);
    });
    for (const auto& [allocations, received, sent] : counts) {
      CHECK(received == 1);
      CHECK(sent == 1);
      CHECK(allocations == (std::string(layout) == "x:p" ? received : received + sent));
    }
  }
}

TEST_CASE("an exchange along several dims travels a step at a time under progress()") {
  // Begun, only its first step travels; progress() starts each next step once the one before has
  // arrived, so a caller computing under the exchange has every step travel meanwhile, forward
  // and adjoint, with the results of an exchange run at once. Under a transport that starts work
  // in program order (nccl) it starts none: arrival comes at different points on each rank, and
  // a step started there would cross another group's collective the other way round elsewhere.
  for (const auto& c : cases()) {
    if (!can_run(c.mesh)) continue;
    INFO(transport_under_test() << " transport, case " << c.name);
    auto observed = on_mesh(c.mesh, [&](Mesh& m) {
      Observed o;
      const HaloExchange plan = plan_of(m, c);
      const std::size_t steps = plan.exchanged().size();
      if (steps < 2) return o;
      const auto x = test_tensor(m, c.layout);
      const bool in_order = m.world().starts_in_program_order();
      auto run_by_progress = [&](auto&& pending, const char* what) {
        if (pending.transfer.steps_left() != steps - 1 && o.mismatch.empty())
          o.mismatch = std::string(what) + ": begun with " +
                       std::to_string(steps - pending.transfer.steps_left()) + " steps started";
        // In program order: long enough for the first step to arrive, and no step may start.
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(in_order ? 300 : 60000);
        while ((in_order || pending.transfer.steps_left() > 0) &&
               std::chrono::steady_clock::now() < deadline)
          pending.progress();
        const std::size_t want_left = in_order ? steps - 1 : 0;
        if (pending.transfer.steps_left() != want_left && o.mismatch.empty())
          o.mismatch = std::string(what) + ": progress() left " +
                       std::to_string(pending.transfer.steps_left()) + " steps unstarted, not " +
                       std::to_string(want_left);
        return plan.finish(m, std::move(pending)).array;
      };
      const auto inside = run_by_progress(plan.begin(m, HaloForm::inside, x.array()), "forward");
      const auto want = plan.exchange(m, HaloForm::inside, x.array()).array;
      std::vector<double> y_values(inside.size());
      for (std::size_t i = 0; i < y_values.size(); ++i) y_values[i] = std::cos(1.0 + i);
      Array<double> y = array_from_host(y_values, inside.shape());
      const auto back = run_by_progress(
          plan.begin_adjoint(m, HaloForm::inside, HaloBox<double>{kernels::copy_of(y), {}}),
          "adjoint");
      const auto back_want =
          plan.exchange_adjoint(m, HaloForm::inside, HaloBox<double>{std::move(y), {}});
      if ((values_of(want) != values_of(inside) || values_of(back_want) != values_of(back)) &&
          o.mismatch.empty())
        o.mismatch = "processor " + std::to_string(m.processor()) + ": another result";
      o.pieces = int(steps);
      return o;
    });
    for (const auto& o : observed) CHECK(o.mismatch == "");
  }
}

TEST_CASE(
    "the inside form is the padded box within the tensor, overlapped, with its exact adjoint") {
  for (const auto& c : cases()) {
    if (!can_run(c.mesh)) continue;
    INFO(transport_under_test() << " transport, case " << c.name);
    auto observed = on_mesh(c.mesh, [&](Mesh& m) {
      Observed o;
      const HaloExchange plan = plan_of(m, c);
      const auto x = test_tensor(m, c.layout);
      const auto padded = plan.exchange(m, HaloForm::padded, x.array(), -7.0).array;
      auto pending = plan.begin(m, HaloForm::inside, x.array());
      const auto inside_block = plan.finish(m, std::move(pending)).array;  // last step overlapped
      const auto inside = values_of(inside_block), padded_values = values_of(padded);
      const auto padded_strides = kernels::row_major_strides(plan.box().sizes());
      std::vector<double> want(plan.inside().num_elements());
      kernels::reference::copy_box(
          plan.inside().sizes(),
          padded_values.data() + kernels::offset_of_box(plan.inside(), plan.box(), padded_strides),
          padded_strides, want.data(), kernels::row_major_strides(plan.inside().sizes()));
      if ((inside.size() != want.size() || !std::equal(want.begin(), want.end(), inside.data())) &&
          o.mismatch.empty())
        o.mismatch = "processor " + std::to_string(m.processor()) + ": the inside box";
      // <inside(x), y> summed over processors equals <x, adjoint(y)> summed.
      std::vector<double> y(inside.size());
      double forward = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        y[i] = std::cos(2.0 + i + 5 * m.processor());
        forward += inside[i] * y[i];
      }
      auto returning = plan.begin_adjoint(
          m, HaloForm::inside, HaloBox<double>{array_from_host(y, inside_block.shape()), {}});
      const auto back = values_of(plan.finish(m, std::move(returning)).array);
      const auto x_values = values_of(x.array());
      double adjoint = 0;
      for (std::size_t i = 0; i < back.size(); ++i) adjoint += x_values[i] * back[i];
      o.forward_dot = all_reduce_value(m.world(), forward, ReduceOp::sum);
      o.adjoint_dot = all_reduce_value(m.world(), adjoint, ReduceOp::sum);
      o.adjoint_checked = true;
      return o;
    });
    for (const auto& o : observed) {
      CHECK(o.mismatch == "");
      CHECK(o.forward_dot == Approx(o.adjoint_dot).epsilon(1e-12));
      CHECK(o.forward_dot != 0.0);
    }
  }
}

}  // namespace test_halo
