// Catch2 main for the test programs that run on every transport. Started by an MPI launcher (or
// with MESHTENSOR_TRANSPORT=mpi or nccl) it starts MPI for the whole test run, so that every test
// case can build meshes on it; started by hand it tests the threads transport, as meshtensor's
// own run() chooses. Built with meshtensor::cuda and run with MESHTENSOR_TRANSPORT=nccl, the same
// tests run on NCCL, one GPU per rank; without enough GPUs they are skipped (exit status 77,
// which ctest reports as skipped) with the reason on stdout.
#define CATCH_CONFIG_RUNNER
// The emulated GPU's page tracking (MESHTENSOR_EMULATED_GPU_PAGES, under which ctest runs these on
// the nccl transport) takes SIGSEGV for itself; Catch2 would put its own handler first for every
// test case and report the faults the tracking expects as crashes. A real crash still ends the
// process with its signal, which mpirun and ctest report.
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#include <catch2/catch.hpp>

#include <boost/mpi/environment.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/spmd.hpp"

namespace {

#ifdef MESHTENSOR_WITH_CUDA
int run_on_nccl(int argc, char** argv) {
  try {
    meshtensor::testing::nccl_world() = meshtensor::nccl::start(boost::mpi::communicator());
  } catch (const meshtensor::NoGpuError& e) {
    if (boost::mpi::communicator().rank() == 0)
      std::printf("SKIPPED: the nccl transport needs one GPU per rank here: %s\n", e.what());
    return 77;
  }
  // Outside a mesh (a test's set-up), this rank computes on its GPU as its meshes do.
  meshtensor::LocalProcessor gpu(meshtensor::testing::nccl_world()->device());
  const int status = Catch::Session().run(argc, argv);
  meshtensor::testing::nccl_world().reset();  // before MPI ends
  return status;
}
#endif

int run_mpi_job(int argc, char** argv, const std::string& transport) {
  boost::mpi::environment environment(argc, argv, boost::mpi::threading::funneled);
#ifdef MESHTENSOR_WITH_CUDA
  if (transport == "nccl") return run_on_nccl(argc, argv);
#endif
  return Catch::Session().run(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  // Every collective of the tests is checked (comm/collective_call.hpp) unless the run says
  // otherwise: two processors in different collectives fail with both named.
  setenv("MESHTENSOR_CHECK_COLLECTIVES", "1", /*overwrite=*/0);
  // The transport as run() would choose it; nccl only where the GPU backend is built.
  std::string transport;
  try {
    transport = meshtensor::chosen_transport();
  } catch (const meshtensor::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (transport == "threads") return Catch::Session().run(argc, argv);
  return run_mpi_job(argc, argv, transport);
}
