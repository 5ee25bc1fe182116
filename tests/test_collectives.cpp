// Every collective and point-to-point operation, over the whole mesh and over groups of mesh axes,
// under the transport this run tests (threads by hand, MPI under mpirun).
#include <catch2/catch.hpp>

#include <numeric>

#include "support/environment.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_collectives {

namespace {

struct Observed {
  int processor = 0, group_rank = 0, group_size = 0;
  std::vector<double> sum, max, min;
  std::vector<std::int64_t> gathered, scattered, received_ring, received_posted_first;
  std::vector<std::vector<std::int32_t>> exchanged;
  std::vector<float> broadcasted;
  std::vector<std::uint8_t> bytes_in_order;
};

// Runs every operation on `group` (this processor is `processor`) and records what came back.
Observed exercise(Communicator& group, int processor) {
  Observed o;
  o.processor = processor;
  o.group_rank = group.rank();
  o.group_size = group.size();
  const int r = group.rank(), p = group.size();

  std::vector<double> values{double(r), -double(r) * 2, 0.5 + r};
  o.sum = values;
  all_reduce(group, o.sum, ReduceOp::sum);
  o.max = values;
  all_reduce(group, o.max, ReduceOp::max);
  o.min = values;
  all_reduce(group, o.min, ReduceOp::min);

  o.gathered = all_gather(group, std::vector<std::int64_t>(r + 1, r));  // uneven contributions

  std::vector<std::size_t> counts;
  std::size_t total = 0;
  for (int q = 0; q < p; ++q) counts.push_back(q + 1), total += q + 1;
  std::vector<std::int64_t> data(total);
  for (std::size_t i = 0; i < total; ++i) data[i] = 100 * r + std::int64_t(i);
  o.scattered = reduce_scatter(group, data, counts, ReduceOp::sum);

  std::vector<std::vector<std::int32_t>> to_each(p);
  for (int q = 0; q < p; ++q) to_each[q].assign(q + 1, 1000 * r + q);
  o.exchanged = all_to_all(group, to_each);

  std::vector<float> message;
  if (r == p - 1) message = {1.5f, 2.5f, float(processor)};
  broadcast(group, message, p - 1);
  o.broadcasted = message;

  // A ring of nonblocking messages: two sends to the same neighbour with one tag arrive in order.
  const int next = (r + 1) % p, previous = (r + p - 1) % p;
  std::int64_t first = 10 * r, second = 10 * r + 1, got_first = -1, got_second = -1;
  std::vector<Request> requests;
  requests.push_back(group.isend(&first, sizeof first, next, 7));
  requests.push_back(group.isend(&second, sizeof second, next, 7));
  requests.push_back(group.irecv(&got_first, sizeof got_first, previous, 7));
  requests.push_back(group.irecv(&got_second, sizeof got_second, previous, 7));
  wait_all(requests);
  o.received_ring = {got_first, got_second};

  // A receive posted before its message (filled straight from the send on threads), then one
  // posted after: they still match in the order sent. A transport that starts work in program
  // order (NCCL) would start the receive before the barrier and wait there forever.
  got_first = got_second = -1;
  if (!group.starts_in_program_order()) {
    Request early = group.irecv(&got_first, sizeof got_first, previous, 9);
    group.barrier();  // every receive above is posted before any send below
    requests.clear();
    requests.push_back(group.isend(&first, sizeof first, next, 9));
    requests.push_back(group.isend(&second, sizeof second, next, 9));
    requests.push_back(group.irecv(&got_second, sizeof got_second, previous, 9));
    early.wait();
    wait_all(requests);
  } else {
    got_first = 10 * previous, got_second = 10 * previous + 1;
  }
  o.received_posted_first = {got_first, got_second};

  // Zero-byte messages still match.
  auto empty_send = group.isend(nullptr, 0, next, 8);
  auto empty_recv = group.irecv(nullptr, 0, previous, 8);
  empty_recv.wait();
  empty_send.wait();
  group.barrier();
  return o;
}

void check(const Observed& o) {
  INFO("processor " << o.processor << ", rank " << o.group_rank << " of " << o.group_size);
  const int r = o.group_rank, p = o.group_size;
  const double ranks_sum = p * (p - 1) / 2.0;
  CHECK(o.sum == std::vector<double>{ranks_sum, -2 * ranks_sum, 0.5 * p + ranks_sum});
  CHECK(o.max == std::vector<double>{double(p - 1), 0.0, 0.5 + p - 1});
  CHECK(o.min == std::vector<double>{0.0, -2.0 * (p - 1), 0.5});

  std::vector<std::int64_t> gathered;
  for (int q = 0; q < p; ++q) gathered.insert(gathered.end(), q + 1, q);
  CHECK(o.gathered == gathered);

  std::size_t offset = 0;
  for (int q = 0; q < r; ++q) offset += q + 1;
  std::vector<std::int64_t> scattered;
  for (int i = 0; i < r + 1; ++i)
    scattered.push_back(100 * std::int64_t(ranks_sum) + p * std::int64_t(offset + i));
  CHECK(o.scattered == scattered);

  REQUIRE(o.exchanged.size() == std::size_t(p));
  for (int q = 0; q < p; ++q)
    CHECK(o.exchanged[q] == std::vector<std::int32_t>(r + 1, 1000 * q + r));

  REQUIRE(o.broadcasted.size() == 3);
  CHECK(o.broadcasted[0] == 1.5f);
  const int previous = (r + p - 1) % p;
  CHECK(o.received_ring == std::vector<std::int64_t>{10 * previous, 10 * previous + 1});
  CHECK(o.received_posted_first == std::vector<std::int64_t>{10 * previous, 10 * previous + 1});
}

}  // namespace

TEST_CASE("collectives over the whole mesh") {
  for (const char* mesh : {"p:1", "p:2", "p:3", "p:4", "rows:2; cols:2", "p:8"}) {
    INFO(transport_under_test() << " transport, mesh " << mesh);
    auto observed = on_mesh(mesh, [](Mesh& m) { return exercise(m.world(), m.processor()); });
    for (const auto& o : observed) {
      CHECK(o.group_size == MeshShape(mesh).num_processors());
      CHECK(o.group_rank == o.processor);
      check(o);
    }
  }
}

TEST_CASE("collectives over each set of mesh axes reach exactly the processors along them") {
  for (const char* mesh_text : {"rows:2; cols:2", "rows:2; cols:4", "a:2; b:2; c:2"}) {
    const MeshShape mesh(mesh_text);
    const AxisSet all = (AxisSet{1} << mesh.rank()) - 1;
    for (AxisSet set = 0; set <= all; ++set) {
      INFO(transport_under_test() << " transport, mesh " << mesh << ", axis set " << set);
      auto observed = on_mesh(mesh, [&](Mesh& m) {
        auto o = exercise(m.group(set), m.processor());
        // Which processors share the group: the all-gathered processor numbers tell.
        auto members = all_gather(m.group(set), std::vector<std::int64_t>{m.processor()});
        o.received_ring.insert(o.received_ring.end(), members.begin(), members.end());
        return o;
      });
      for (auto o : observed) {
        const auto me = mesh.coord_of(o.processor);
        std::vector<std::int64_t> members(o.received_ring.begin() + 2, o.received_ring.end());
        o.received_ring.resize(2);
        int expected_size = 1, expected_rank = 0;
        for (std::size_t a = 0; a < mesh.rank(); ++a)
          if (set >> a & 1) {
            expected_size *= mesh[a].size;
            expected_rank = expected_rank * mesh[a].size + me[a];
          }
        CHECK(o.group_size == expected_size);
        CHECK(o.group_rank == expected_rank);
        REQUIRE(members.size() == std::size_t(expected_size));
        for (std::size_t k = 0; k < members.size(); ++k) {
          const auto them = mesh.coord_of(int(members[k]));
          for (std::size_t a = 0; a < mesh.rank(); ++a)
            if (!(set >> a & 1)) CHECK(them[a] == me[a]);  // same coordinates off the set
        }
        check(o);
      }
    }
  }
}

TEST_CASE("split leaves out ranks with a negative color") {
  auto observed = on_mesh("p:4", [](Mesh& m) {
    auto part = m.world().split(m.processor() % 2 == 0 ? 0 : -1, -m.processor());
    return part ? std::vector<int>{m.processor(), part->rank(), part->size()}
                : std::vector<int>{m.processor(), -1, -1};
  });
  // Processors 0 and 2 form a group ordered by key (processor 2 first); 1 and 3 are left out.
  const std::vector<int> expected[] = {{0, 1, 2}, {1, -1, -1}, {2, 0, 2}, {3, -1, -1}};
  for (const auto& o : observed) CHECK(o == expected[o[0]]);
}

TEST_CASE("the mesh knows this processor's coordinates and its transport") {
  auto observed = on_mesh("rows:2; cols:4", [](Mesh& m) {
    return std::vector<int>{m.processor(), m.coord("rows"), m.coord("cols"), m.num_processors(),
                            m.transport() == transport_under_test()};
  });
  for (const auto& o : observed) {
    CHECK(o[1] == o[0] / 4);
    CHECK(o[2] == o[0] % 4);
    CHECK(o[3] == 8);
    CHECK(o[4] == 1);
  }
}

TEST_CASE("a mesh whose size differs from the number of processors is rejected") {
#ifdef MESHTENSOR_WITH_MPI
  if (in_mpi_job()) {
    boost::mpi::communicator world;
    const int ranks = world.size();
    auto make = [&] {
      Mesh mesh(MeshShape{{"p", ranks + 1}}, std::make_unique<mpi::MpiCommunicator>(world));
    };
    CHECK_THROWS_AS(make(), MeshError);
    CHECK_THROWS_WITH(
        make(), Catch::Matchers::Contains("needs " + std::to_string(ranks + 1) +
                                          " processors but the run has " + std::to_string(ranks) +
                                          " (mpi transport)"));
    return;
  }
#endif
  auto body = [](std::unique_ptr<Communicator> comm) {
    Mesh mesh("rows:2; cols:2", std::move(comm));
  };
  CHECK_THROWS_WITH(
      threads::spawn(3, body),
      Catch::Matchers::Contains("needs 4 processors but the run has 3 (threads transport)"));
}

namespace {

// What each processor of a 2-processor mesh was told when its collective disagreed with its
// peer's, in the checking mode; `call(mesh, processor)` makes the calls.
template <class Call>
std::vector<std::string> disagreements(Call&& call) {
  const testing::Setting checking("MESHTENSOR_CHECK_COLLECTIVES", "1");
  return on_mesh(MeshShape{{"p", 2}}, [&](Mesh& mesh) {
    try {
      call(mesh.world(), mesh.processor());
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
}

}  // namespace

TEST_CASE("in the checking mode, processors in different collectives get an error naming both") {
  if (!can_run(MeshShape{{"p", 2}})) return;
  using Catch::Matchers::Matches;
  const std::string both_sides =
      "every processor must call the same collective ops in the same order, with the same sizes";
  SECTION("different ops") {
    for (const auto& what : disagreements([](Communicator&world, int processor) {
           float value[4] = {};
           if (processor == 0) world.all_reduce(value, 4, DType::f32, ReduceOp::sum);
           if (processor == 1) world.broadcast(value, 16, 0);
         }))
      CHECK_THAT(what,
                 Matches(".*the collective ops of a group of 2 disagree: processor [01] calls "
                         "(all_reduce #0 of 4 float32 elements \\(sum\\)|broadcast #0 of 16 "
                         "bytes from rank 0) but processor [01] calls (broadcast #0|all_reduce "
                         "#0).*" +
                         both_sides + ".*"));
  }
  SECTION("the same op with other sizes, types or reductions") {
    for (const auto& what : disagreements([](Communicator&world, int processor) {
           double value[5] = {};
           world.all_reduce(value, processor == 0 ? 4 : 5, DType::f64, ReduceOp::sum);
         }))
      CHECK_THAT(what,
                 Matches(".*processor [01] calls all_reduce #0 of [45] float64 elements "
                         "\\(sum\\) but processor [01] calls all_reduce #0 of [54] float64.*"));
    for (const auto& what : disagreements([](Communicator&world, int processor) {
           double value[4] = {};
           world.all_reduce(value, 4, DType::f64, processor == 0 ? ReduceOp::max : ReduceOp::sum);
         }))
      CHECK_THAT(what, Matches(".*all_reduce #0 of 4 float64 elements \\((max|sum)\\) but .*"
                               "all_reduce #0 of 4 float64 elements \\((sum|max)\\).*"));
  }
  SECTION("a processor that skipped a collective is caught at the next one") {
    for (const auto& what : disagreements([](Communicator&world, int processor) {
           if (processor == 0) world.barrier();
           std::int32_t value = 1;
           world.all_reduce(&value, 1, DType::i32, ReduceOp::sum);
         }))
      CHECK_THAT(what, Matches(".*(barrier #0|all_reduce #0 of 1 int32 elements \\(sum\\)) but "
                               "processor [01] calls (all_reduce #0|barrier #0).*"));
  }
  SECTION("an all_to_all whose sender and receiver disagree on a pair's bytes") {
    const auto told = disagreements([](Communicator& world, int processor) {
      std::vector<std::uint8_t> out(8), in(8);
      // Processor 0 sends 3 bytes to 1, which expects 4; 1 sends 1 byte to 0, which expects 2.
      using Sizes = std::vector<std::size_t>;
      const Sizes sends = processor == 0 ? Sizes{2, 3} : Sizes{1, 2};
      const Sizes receives = processor == 0 ? Sizes{2, 2} : Sizes{4, 2};
      world.all_to_all(out.data(), sends, in.data(), receives);
    });
    for (const auto& what : told)
      CHECK_THAT(what, Matches(".*processor 0's all_to_all #0 sends 3 bytes to processor 1, which "
                               "expects 4.*|.*processor 1's all_to_all #0 sends 1 bytes to "
                               "processor 0, which expects 2.*"));
  }
}

}  // namespace test_collectives
