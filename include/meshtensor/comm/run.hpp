#pragma once
// The entry points: run one SPMD function on every processor of a mesh, on the transport the start
// implies — threads when started by hand, MPI under mpirun or srun. The same program runs on both.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "meshtensor/comm/compute_threads.hpp"
#include "meshtensor/comm/launcher.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/threads.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/memory/pool.hpp"

#ifdef MESHTENSOR_WITH_MPI
#include "meshtensor/comm/mpi.hpp"
#endif

namespace meshtensor {

namespace threads {
/// Runs `fn(Mesh&)` on one thread per processor of `shape`; rethrows the first failure.
template <class F>
void run(const MeshShape& shape, F&& fn) {
  const int kernel_threads = threads_per_processor(shape.num_processors());
  spawn(shape.num_processors(), [&](std::unique_ptr<Communicator> world) {
    ProcessorMemory memory;  // this processor's pool, released after its Mesh
    set_compute_threads(kernel_threads);
    Mesh mesh(shape, std::move(world));
    fn(mesh);
  });
}
}  // namespace threads

#ifdef MESHTENSOR_WITH_MPI
namespace mpi {
/// Runs `fn(Mesh&)` on this rank of MPI_COMM_WORLD (initialising MPI if nobody has). An exception
/// propagates to the caller on this rank only; `meshtensor::run` turns it into a job abort.
template <class F>
void run(const MeshShape& shape, F&& fn) {
  boost::mpi::environment environment(boost::mpi::threading::funneled,
                                      /*abort_on_exception=*/false);
  Mesh mesh(shape, std::make_unique<MpiCommunicator>(boost::mpi::communicator()));
  fn(mesh);
}
}  // namespace mpi
#endif

/// The transport `run` will use: MESHTENSOR_TRANSPORT if set, else "mpi" under an MPI launcher,
/// else "threads".
inline std::string chosen_transport() {
  if (const char* forced = std::getenv("MESHTENSOR_TRANSPORT")) {
    const std::string name = forced;
    if (name == "threads" || name == "mpi") return name;
    throw Error("MESHTENSOR_TRANSPORT is \"" + name +
                "\"; valid values are \"threads\" and \"mpi\"");
  }
  return mpi_launcher_variable() ? "mpi" : "threads";
}

/**
 * Runs `fn(Mesh&)` as SPMD on every processor of the mesh `shape` and returns an exit status for
 * `main`. Started by hand it runs one thread per processor; under `mpirun -np N` it runs on the N
 * ranks, and N must equal the mesh size. A failure on any processor ends the whole run with its
 * message on stderr — under MPI by aborting the job, so no rank waits forever.
 *
 * ```cpp
 * int main(int argc, char** argv) {
 *   return meshtensor::run(argc, argv, "rows:2; cols:2", [](meshtensor::Mesh& mesh) { ... });
 * }
 * ```
 */
template <class F>
int run(int argc, char** argv, const MeshShape& shape, F&& fn) {
  (void)argc;
  (void)argv;
  std::string transport;
  try {
    transport = chosen_transport();
    if (transport == "threads") {
      threads::run(shape, fn);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtensor: error: %s\n", e.what());
    return 1;
  }
#ifdef MESHTENSOR_WITH_MPI
  boost::mpi::environment environment(argc, argv, boost::mpi::threading::funneled,
                                      /*abort_on_exception=*/false);
  try {
    mpi::run(shape, fn);
    return 0;
  } catch (const std::exception& e) {
    boost::mpi::communicator world;
    std::fprintf(stderr, "meshtensor: error on processor %d of %d: %s\n", world.rank(),
                 world.size(), e.what());
    std::fflush(stderr);
    // The other ranks may be waiting for this one; only an abort releases them.
    environment.abort(1);
  }
  return 1;
#else
  std::fprintf(stderr,
               "meshtensor: error: this program was started by an MPI launcher (%s is set) but "
               "built without MPI support; link the target meshtensor::mpi, or start it without "
               "the launcher, or set MESHTENSOR_TRANSPORT=threads\n",
               mpi_launcher_variable().value_or("MESHTENSOR_TRANSPORT=mpi").c_str());
  return 1;
#endif
}

}  // namespace meshtensor
