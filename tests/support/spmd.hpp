#pragma once
// Runs test code as SPMD on the transport under test and brings each processor's result back to
// the code that checks it. Test files are compiled twice: for the threads transport (all processors
// in this process) and for MPI (MESHTENSOR_TEST_MPI; one processor per rank, run by mpirun).
// Checks happen after the run, on the calling thread, because Catch2 assertions are not
// thread-safe. The MPI build also runs on the nccl transport (one GPU per rank) when it links
// meshtensor::cuda and MESHTENSOR_TRANSPORT=nccl; main_mpi.cpp then starts NCCL once for the job.

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#ifdef MESHTENSOR_TEST_MPI
#include <meshtensor/comm/mpi.hpp>
#endif
#if defined(MESHTENSOR_TEST_MPI) && defined(MESHTENSOR_WITH_CUDA)
#include <meshtensor/comm/nccl.hpp>
#endif

namespace meshtensor::testing {

#if defined(MESHTENSOR_TEST_MPI) && defined(MESHTENSOR_WITH_CUDA)
/// The job's NCCL communicator when the tests run on the nccl transport (set by main_mpi.cpp),
/// else null.
inline std::unique_ptr<nccl::NcclCommunicator>& nccl_world() {
  static std::unique_ptr<nccl::NcclCommunicator> world;
  return world;
}
#endif

inline std::string transport_under_test() {
#ifdef MESHTENSOR_TEST_MPI
#ifdef MESHTENSOR_WITH_CUDA
  if (nccl_world()) return "nccl";
#endif
  return "mpi";
#else
  return "threads";
#endif
}

/// Whether the transport under test can run this mesh: threads always; MPI when the job has at
/// least as many ranks (ranks beyond the mesh sit the run out).
inline bool can_run(const MeshShape& shape) {
#ifdef MESHTENSOR_TEST_MPI
  return shape.num_processors() <= boost::mpi::communicator().size();
#else
  (void)shape;
  return true;
#endif
}

/**
 * Runs `fn(Mesh&)` on every processor of `shape` and returns the results this process can see:
 * every processor's under threads (indexed by processor), this rank's under MPI (empty on ranks
 * outside the mesh, and for a mesh larger than the job). Under MPI a failure on one rank aborts the
 * job, so that no rank waits for it.
 */
template <class F>
auto on_mesh(const MeshShape& shape, F&& fn) {
  using Result = std::invoke_result_t<F, Mesh&>;
  std::vector<Result> results;
#ifdef MESHTENSOR_TEST_MPI
  boost::mpi::communicator world;
  if (!can_run(shape)) return results;
  const bool inside = world.rank() < shape.num_processors();
  std::unique_ptr<Communicator> part;
#ifdef MESHTENSOR_WITH_CUDA
  if (nccl_world()) part = nccl_world()->split(inside ? 0 : -1, world.rank());
#endif
  if (transport_under_test() == "mpi")
    part = mpi::MpiCommunicator(world).split(inside ? 0 : -1, world.rank());
  if (part) {
    Mesh mesh(shape, std::move(part));
    try {
      results.push_back(fn(mesh));
    } catch (const std::exception& e) {
      // The other ranks may be waiting for this one: end the job rather than hang until ctest's
      // timeout.
      std::fprintf(stderr, "rank %d failed: %s; aborting the job\n", world.rank(), e.what());
      std::fflush(stderr);
      world.abort(1);
    }
  }
#else
  std::vector<std::unique_ptr<Result> > slots(shape.num_processors());
  threads::run(shape,
               [&](Mesh& mesh) { slots[mesh.processor()] = std::make_unique<Result>(fn(mesh)); });
  for (auto& slot : slots) results.push_back(std::move(*slot));
#endif
  return results;
}

/// Runs `fn(Mesh&)` on a mesh of one processor (in this process, whatever the transport): the
/// reference every distributed result is compared with.
template <class F>
auto on_one_processor(F&& fn) {
  using Result = std::invoke_result_t<F, Mesh&>;
  std::unique_ptr<Result> result;
  threads::run(MeshShape{}, [&](Mesh& mesh) { result = std::make_unique<Result>(fn(mesh)); });
  return std::move(*result);
}

}  // namespace meshtensor::testing
