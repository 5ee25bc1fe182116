// A failure on one processor ends the whole in-process run: the others stop waiting and the
// original error reaches the caller. Mistakes in SPMD order and in mesh size give clear errors.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#include "support/environment.hpp"

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_failures {
using Catch::Matchers::Contains;

TEST_CASE("an exception on one processor reaches the caller and releases the others") {
  std::mutex mutex;
  std::vector<std::string> released;  // what the other processors were told
  auto body = [&](Mesh& mesh) {
    if (mesh.processor() == 2) throw std::invalid_argument("deliberate failure on processor 2");
    try {
      if (mesh.processor() == 0) {
        double value = 0;
        mesh.world().irecv(&value, sizeof value, 2, 0).wait();  // a message that never comes
      } else {
        mesh.world().barrier();  // a collective processor 2 never joins
      }
    } catch (const PeerFailure& e) {
      std::lock_guard<std::mutex> lock(mutex);  // Catch2 assertions are not thread-safe
      released.push_back(e.what());
      throw;
    }
  };
  CHECK_THROWS_AS(threads::run("p:4", body), std::invalid_argument);
  CHECK_THROWS_WITH(threads::run("p:4", body), "deliberate failure on processor 2");
  REQUIRE(released.size() == 6);  // processors 0, 1 and 3, in each of the two runs
  for (const auto& what : released)
    CHECK_THAT(what, Contains("processor 2 failed") && Contains("deliberate failure"));
}

TEST_CASE("a thread the system will not start is an error, not the end of the program") {
  // A child process whose address space leaves room for a few threads' stacks: starting 256
  // processors fails part way, and those already started must be stopped and joined (a joinable
  // thread left behind calls std::terminate, which aborts).
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t room = pages * rlim_t(sysconf(_SC_PAGE_SIZE)) + (rlim_t{64} << 20);
    const rlimit limit{room, room};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(4);
    try {
      threads::spawn(256, [](std::unique_ptr<Communicator> world) { world->barrier(); });
      _exit(2);  // all started: the limit did not bite
    } catch (const Error& e) {
      const std::string what = e.what();
      _exit(what.find("could not start the thread of processor") != std::string::npos &&
                    what.find(" of 256 (") != std::string::npos
                ? 0
                : 3);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));  // not killed by an abort
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a processor that returns early while others wait in a collective is reported") {
  auto body = [](Mesh& mesh) {
    if (mesh.processor() != 1) mesh.world().barrier();
  };
  CHECK_THROWS_AS(threads::run("p:3", body), CommError);
  CHECK_THROWS_WITH(threads::run("p:3", body), Contains("processor 1") &&
                                                   Contains("already returned") &&
                                                   Contains("same ops in the same order"));
  auto receive_body = [](Mesh& mesh) {
    if (mesh.processor() == 0) {
      int value = 0;
      mesh.world().irecv(&value, sizeof value, 1, 3).wait();
    }
  };
  CHECK_THROWS_WITH(threads::run("p:2", receive_body),
                    Contains("message from processor 1") && Contains("already returned"));
}

TEST_CASE("a message of the wrong size is an error, not a silent truncation") {
  auto body = [](Mesh& mesh) {
    if (mesh.processor() == 0) {
      double big[2] = {1, 2};
      mesh.world().isend(big, sizeof big, 1, 5).wait();
    } else {
      double small = 0;
      mesh.world().irecv(&small, sizeof small, 0, 5).wait();
    }
  };
  CHECK_THROWS_WITH(threads::run("p:2", body),
                    Contains("expected 8 bytes") && Contains("16 bytes"));
}

TEST_CASE("a message of the wrong size for a receive posted before it is an error") {
  auto body = [](Mesh& mesh) {
    double small = 0;
    Request receive;
    if (mesh.processor() == 1) receive = mesh.world().irecv(&small, sizeof small, 0, 6);
    mesh.world().barrier();  // the receive is posted before the send
    if (mesh.processor() == 0) {
      double big[2] = {1, 2};
      mesh.world().isend(big, sizeof big, 1, 6).wait();
    }
    receive.wait();
    CHECK(small == 0);  // nothing was written past (or into) the receive's buffer
  };
  CHECK_THROWS_WITH(threads::run("p:2", body),
                    Contains("expected 8 bytes") && Contains("16 bytes"));
}

TEST_CASE("a receive abandoned unfinished is withdrawn: its message goes to the next receive") {
  auto body = [](Mesh& mesh) {
    double abandoned = 0, taken = 0;
    if (mesh.processor() == 1) {
      Request receive = mesh.world().irecv(&abandoned, sizeof abandoned, 0, 4);
    }  // destroyed without a wait, as when an error unwinds past it
    mesh.world().barrier();
    if (mesh.processor() == 0) {
      const double value = 42;
      mesh.world().isend(&value, sizeof value, 1, 4).wait();
    } else {
      mesh.world().irecv(&taken, sizeof taken, 0, 4).wait();
      CHECK(abandoned == 0);
      CHECK(taken == 42);
    }
  };
  threads::run("p:2", body);
}

TEST_CASE("a mesh whose size differs from the number of processors is rejected") {
  auto body = [](std::unique_ptr<Communicator> world) {
    Mesh mesh("rows:2; cols:2", std::move(world));
  };
  CHECK_THROWS_AS(threads::spawn(3, body), MeshError);
  CHECK_THROWS_WITH(threads::spawn(3, body),
                    Contains("[rows=2, cols=2] needs 4 processors") && Contains("has 3"));
  CHECK_THROWS_WITH(threads::spawn(0, body), Contains("at least 1"));
  CHECK_THROWS_WITH(threads::run("a:1;b:1;c:1;d:1;e:1;f:1;g:1;h:1;i:1", [](Mesh&) {}),
                    Contains("9 axes") && Contains("at most 8"));
}

TEST_CASE("run() turns a failure into an exit status and checks the transport") {
  char name[] = "test";
  char* argv[] = {name, nullptr};
  CHECK(run(1, argv, "p:2", [](Mesh&) {}) == 0);
  CHECK(run(1, argv, "p:2", [](Mesh& mesh) {
          if (mesh.processor() == 1) throw std::runtime_error("boom");
          mesh.world().barrier();
        }) == 1);
  Settings pigeon;
  pigeon.transport = "carrier-pigeon";
  CHECK(run(
            1, argv, "p:2", [](Mesh&) {}, pigeon) == 1);
  CHECK_THROWS_WITH(chosen_transport(pigeon),
                    Contains("\"carrier-pigeon\"") && Contains("\"threads\""));
  CHECK_THROWS_WITH(testing::Setting("MESHTENSOR_TRANSPORT", "carrier-pigeon"),
                    Contains("MESHTENSOR_TRANSPORT=carrier-pigeon: expected threads, mpi or nccl"));
  Settings threads;
  threads.transport = "threads";
  CHECK(chosen_transport(threads) == "threads");
}

TEST_CASE("a wait for a processor that never comes ends after MESHTENSOR_TIMEOUT, naming it") {
  const testing::Setting timeout("MESHTENSOR_TIMEOUT", "0.3");
  SECTION("a collective, unchecked: the processors that did not arrive are named") {
    const testing::Setting unchecked("MESHTENSOR_CHECK_COLLECTIVES", "0");
    auto body = [](Mesh& mesh) {
      // Processor 2 arrives after the others gave up: it is told they stopped (PeerFailure).
      if (mesh.processor() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(900));
      mesh.world().barrier();
    };
    CHECK_THROWS_WITH(threads::run("p:3", body),
                      Contains("waited 0.3 s (MESHTENSOR_TIMEOUT) in a collective op for "
                               "processor(s) 2, which did not reach it"));
  }
  SECTION("a collective, checked: the op is named") {
    const testing::Setting checked("MESHTENSOR_CHECK_COLLECTIVES", "1");
    auto body = [](Mesh& mesh) {
      if (mesh.processor() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
      float value = 0;
      mesh.world().all_reduce(&value, 1, DType::f32, ReduceOp::max);
    };
    CHECK_THROWS_WITH(threads::run("p:2", body),
                      Contains("processor 0, entering all_reduce #0 of 1 float32 elements (max): "
                               "threads transport: a receive (tag 103) waited 0.3 s "
                               "(MESHTENSOR_TIMEOUT) for a message from processor 1"));
  }
  SECTION("a message") {
    auto body = [](Mesh& mesh) {
      int value = 0;
      if (mesh.processor() == 0) mesh.world().irecv(&value, sizeof value, 1, 5).wait();
      if (mesh.processor() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
    };
    CHECK_THROWS_WITH(threads::run("p:2", body),
                      Contains("a receive (tag 5) waited 0.3 s (MESHTENSOR_TIMEOUT) for a message "
                               "from processor 1, which did not send it"));
  }
  SECTION("a bad value is named") {
    CHECK_THROWS_WITH(testing::Setting("MESHTENSOR_TIMEOUT", "ten minutes"),
                      Contains("MESHTENSOR_TIMEOUT is \"ten minutes\"; give the seconds"));
  }
}

TEST_CASE("a malformed mesh given to run() is an error and status 1, never an abort") {
  char name[] = "test_failures";
  char* argv[] = {name, nullptr};
  bool ran = false;
  const auto body = [&](Mesh&) { ran = true; };
  CHECK(run(1, argv, "rows:two", body) == 1);
  CHECK(run(1, argv, std::string("rows:2; rows:2"), body) == 1);
  CHECK_FALSE(ran);
  Settings threads;
  threads.transport = "threads";
  CHECK(run(1, argv, "rows:2", body, threads) == 0);
  CHECK(ran);
}

}  // namespace test_failures
