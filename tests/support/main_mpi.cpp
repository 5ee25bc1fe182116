// Catch2 main for the MPI builds of the tests: MPI lives for the whole test run, so that every
// test case can build meshes on it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <boost/mpi/environment.hpp>

int main(int argc, char** argv) {
  boost::mpi::environment environment(argc, argv, boost::mpi::threading::funneled);
  return Catch::Session().run(argc, argv);
}
