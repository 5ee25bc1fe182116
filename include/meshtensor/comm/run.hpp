#pragma once
// The entry points: run one SPMD function on every processor of a mesh, on the transport the start
// implies — threads when started by hand, MPI under mpirun or srun — or the one asked for (nccl:
// one GPU per MPI rank). The same program runs on all of them.

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
#ifdef MESHTENSOR_WITH_CUDA
#include "meshtensor/comm/nccl_start.hpp"
#include "meshtensor/device/memory.hpp"
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

#ifdef MESHTENSOR_WITH_CUDA
namespace nccl {
/// Runs `fn(Mesh&)` on this rank of MPI_COMM_WORLD with its own GPU, over NCCL: the processor
/// computes on that GPU (where a kernel has a GPU version) and keeps its blocks in its memory.
template <class F>
void run(const MeshShape& shape, F&& fn) {
  boost::mpi::environment environment(boost::mpi::threading::funneled,
                                      /*abort_on_exception=*/false);
  auto world = start(boost::mpi::communicator());
  cuda::ComputeOnGpu gpu(world->device());
  ProcessorMemory memory(cuda::managed_memory());  // released after the mesh
  Mesh mesh(shape, std::move(world));
  fn(mesh);
}
}  // namespace nccl
#endif

/// The transports this program was built with.
inline std::string available_transports() {
  std::string names = "\"threads\"";
#ifdef MESHTENSOR_WITH_MPI
  names += ", \"mpi\"";
#endif
#ifdef MESHTENSOR_WITH_CUDA
  names += ", \"nccl\"";
#endif
  return names;
}

/// Checks a transport's name: one of threads, mpi and nccl, and built into this program.
inline std::string valid_transport(const std::string& name, const std::string& source) {
  if (name != "threads" && name != "mpi" && name != "nccl")
    throw Error(source + " is \"" + name +
                "\"; valid values are \"threads\", \"mpi\" and \"nccl\"");
#ifndef MESHTENSOR_WITH_MPI
  if (name == "mpi")
    throw Error(source +
                " is \"mpi\" but this program was built without MPI; link "
                "meshtensor::mpi (it has " +
                available_transports() + ")");
#endif
#ifndef MESHTENSOR_WITH_CUDA
  if (name == "nccl")
    throw Error(source +
                " is \"nccl\" but this program was built without the GPU backend; "
                "link meshtensor::cuda, found when CUDA, cuDNN and NCCL are installed (it has " +
                available_transports() + ")");
#endif
  return name;
}

/// The transport `run` will use: `requested` if not empty, else MESHTENSOR_TRANSPORT if set, else
/// "mpi" under an MPI launcher, else "threads". "nccl" is never chosen by itself.
inline std::string chosen_transport(const std::string& requested = "") {
  if (!requested.empty()) return valid_transport(requested, "the transport asked for");
  if (const char* forced = std::getenv("MESHTENSOR_TRANSPORT"))
    return valid_transport(forced, "MESHTENSOR_TRANSPORT");
  return mpi_launcher_variable() ? "mpi" : "threads";
}

/**
 * Runs `fn(Mesh&)` as SPMD on every processor of the mesh `shape` and returns an exit status for
 * `main`. Started by hand it runs one thread per processor; under `mpirun -np N` it runs on the N
 * ranks, and N must equal the mesh size. `transport` ("threads", "mpi" or "nccl"; empty: see
 * chosen_transport()) overrides the choice. A failure on any processor ends the whole run with its
 * message on stderr — under MPI and NCCL by aborting the job, so no rank waits forever.
 *
 * ```cpp
 * int main(int argc, char** argv) {
 *   return meshtensor::run(argc, argv, "rows:2; cols:2", [](meshtensor::Mesh& mesh) { ... });
 * }
 * ```
 */
template <class F>
int run(int argc, char** argv, const MeshShape& shape, F&& fn,
        const std::string& requested_transport = "") {
  (void)argc;
  (void)argv;
  std::string transport;
  try {
    transport = chosen_transport(requested_transport);
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
#ifdef MESHTENSOR_WITH_CUDA
    if (transport == "nccl") {
      nccl::run(shape, fn);
      return 0;
    }
#endif
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
