#pragma once
// Runs test code as SPMD on the transport under test and brings each processor's result back to
// the code that checks it. A test program of the distributed ops is built once and tests the
// transport its start implies, as every meshtensor program does: run by hand, the threads
// transport (all processors in this process); under mpirun, MPI (one processor per rank;
// main_mpi.cpp starts MPI). Checks happen after the run, on the calling thread, because Catch2
// assertions are not thread-safe. With meshtensor::cuda and MESHTENSOR_TRANSPORT=nccl the MPI job
// runs on the nccl transport (one GPU per rank); main_mpi.cpp then starts NCCL once for the job.

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#ifdef MESHTENSOR_WITH_MPI
#include <boost/mpi/environment.hpp>
#include <meshtensor/comm/mpi.hpp>
#endif
#if defined(MESHTENSOR_WITH_MPI) && defined(MESHTENSOR_WITH_CUDA)
#include <meshtensor/comm/nccl.hpp>
#endif

namespace meshtensor::testing {

/// Whether this run is an MPI job: the test program's main started MPI, because a launcher
/// started the program or MESHTENSOR_TRANSPORT asks for mpi or nccl. Otherwise the tests run on
/// the threads transport.
inline bool in_mpi_job() {
#ifdef MESHTENSOR_WITH_MPI
  return boost::mpi::environment::initialized() && !boost::mpi::environment::finalized();
#else
  return false;
#endif
}

#if defined(MESHTENSOR_WITH_MPI) && defined(MESHTENSOR_WITH_CUDA)
/// The job's NCCL communicator when the tests run on the nccl transport (set by main_mpi.cpp),
/// else null.
inline std::unique_ptr<nccl::NcclCommunicator>& nccl_world() {
  static std::unique_ptr<nccl::NcclCommunicator> world;
  return world;
}
#endif

inline std::string transport_under_test() {
  if (!in_mpi_job()) return "threads";
#if defined(MESHTENSOR_WITH_MPI) && defined(MESHTENSOR_WITH_CUDA)
  if (nccl_world()) return "nccl";
#endif
  return "mpi";
}

/// Whether the transport under test can run this mesh: threads always; MPI when the job has at
/// least as many ranks (ranks beyond the mesh sit the run out).
inline bool can_run(const MeshShape& shape) {
#ifdef MESHTENSOR_WITH_MPI
  if (in_mpi_job()) return shape.num_processors() <= boost::mpi::communicator().size();
#endif
  (void)shape;
  return true;
}

namespace spmd {

#ifdef MESHTENSOR_WITH_MPI
// This rank's part of an MPI job's run of `fn` (nothing on ranks outside the mesh). A failure on
// one rank ends the job, so that no rank waits for it until ctest's timeout.
template <class Result, class F>
void on_mesh_of_ranks(const MeshShape& shape, F& fn, std::vector<Result>& results) {
  boost::mpi::communicator world;
  const bool inside = world.rank() < shape.num_processors();
  std::unique_ptr<Communicator> part;
#ifdef MESHTENSOR_WITH_CUDA
  if (nccl_world()) part = nccl_world()->split(inside ? 0 : -1, world.rank());
#endif
  if (transport_under_test() == "mpi")
    part = mpi::MpiCommunicator(world).split(inside ? 0 : -1, world.rank());
  if (!part) return;
  Mesh mesh(shape, std::move(part));
  try {
    results.push_back(fn(mesh));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d failed: %s; aborting the job\n", world.rank(), e.what());
    std::fflush(stderr);
    world.abort(1);
  }
}
#endif

// Every processor's result, each processor a thread of this process.
template <class Result, class F>
void on_mesh_of_threads(const MeshShape& shape, F& fn, std::vector<Result>& results) {
  std::vector<std::unique_ptr<Result> > slots(shape.num_processors());
  threads::run(shape,
               [&](Mesh& mesh) { slots[mesh.processor()] = std::make_unique<Result>(fn(mesh)); });
  for (auto& slot : slots) results.push_back(std::move(*slot));
}

}  // namespace spmd

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
  if (!can_run(shape)) return results;
#ifdef MESHTENSOR_WITH_MPI
  if (in_mpi_job()) {
    spmd::on_mesh_of_ranks(shape, fn, results);
    return results;
  }
#endif
  spmd::on_mesh_of_threads(shape, fn, results);
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
