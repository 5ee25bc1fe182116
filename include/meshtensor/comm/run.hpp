#pragma once
// The entry points: run one SPMD function on every processor of a mesh, on the transport the start
// implies — threads when started by hand, MPI under mpirun or srun — or the one asked for (nccl:
// one GPU per MPI rank). The same program runs on all of them.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/threads.hpp"
#include "meshtensor/comm/transport_choice.hpp"
#include "meshtensor/core/environment.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/core/settings.hpp"

#ifdef MESHTENSOR_WITH_MPI
#include "meshtensor/comm/mpi.hpp"
#endif
#ifdef MESHTENSOR_WITH_CUDA
#include "meshtensor/comm/mpi_watch.hpp"
#include "meshtensor/comm/nccl_start.hpp"
#endif

namespace meshtensor {

namespace threads {
/// Runs `fn(Mesh&)` on one thread per processor of `shape`, each with `settings`; rethrows the
/// first failure.
template <class F>
void run(const MeshShape& shape, F&& fn,
         const Settings& settings = current_processor().settings()) {
  spawn(shape.num_processors(), [&](std::unique_ptr<Communicator> world) {
    Mesh mesh(shape, std::move(world), {}, settings);
    fn(mesh);
  });
}
}  // namespace threads

#ifdef MESHTENSOR_WITH_MPI
namespace mpi {
/// Runs `fn(Mesh&)` on this rank of MPI_COMM_WORLD (initialising MPI if nobody has). An exception
/// propagates to the caller on this rank only; `meshtensor::run` turns it into a job abort. Once
/// `fn` returns, this rank waits until every rank has returned (MESHTENSOR_TIMEOUT at most); one
/// that was waiting for this rank fails then, naming it.
template <class F>
void run(const MeshShape& shape, F&& fn,
         const Settings& settings = current_processor().settings()) {
  boost::mpi::environment environment(boost::mpi::threading::funneled,
                                      /*abort_on_exception=*/false);
  auto world = std::make_unique<MpiCommunicator>(boost::mpi::communicator());
  const auto watch = world->watch();
  Mesh mesh(shape, std::move(world), {}, settings);
  fn(mesh);
  // A rank still waiting for this one learns that it returned, and fails instead of hanging.
  watch->finish();
}
}  // namespace mpi
#endif

#ifdef MESHTENSOR_WITH_CUDA
namespace nccl {
/// Runs `fn(Mesh&)` on this rank of MPI_COMM_WORLD with its own GPU, over NCCL: the processor
/// computes on that GPU (where a kernel has a GPU version) and keeps its blocks in its memory.
template <class F>
void run(const MeshShape& shape, F&& fn,
         const Settings& settings = current_processor().settings()) {
  boost::mpi::environment environment(boost::mpi::threading::funneled,
                                      /*abort_on_exception=*/false);
  mpi::Watch watch(MPI_COMM_WORLD);
  watch.meet("the start of the nccl transport");  // whose checks are blocking MPI collectives
  Mesh mesh(shape, start(boost::mpi::communicator()), {}, settings);  // on the rank's GPU
  fn(mesh);
  // As under mpi: no rank enters MPI's end while another may still fail and abort the job (Open
  // MPI's mpirun can hang when an abort meets ranks that are ending).
  watch.finish();
}
}  // namespace nccl
#endif

#ifdef MESHTENSOR_WITH_MPI
namespace detail {
// Ends a job whose every rank failed alike (AgreedError): rank 0 says it once and aborts the job;
// the others wait for that abort, so no other rank's abort cuts the message short.
[[noreturn]] inline void end_agreed_failure(boost::mpi::environment& environment,
                                            const std::string& what) {
  boost::mpi::communicator world;
  if (world.rank() == 0) {
    std::fprintf(stderr, "meshtensor: error on all %d processors: %s\n", world.size(),
                 what.c_str());
    std::fflush(stderr);
    environment.abort(1);
  }
  std::this_thread::sleep_for(std::chrono::seconds(30));  // rank 0's abort ends this one first
  environment.abort(1);
  std::abort();  // not reached: abort ends the job
}
}  // namespace detail
#endif

/**
 * Ends a program that failed before `run` (bad flags, say) with `status`, whose message was
 * printed: returns it for `main`. Under an MPI launcher each rank first joins the job and then
 * aborts it: a launcher that sees ranks exit early while it still starts others can hang (Open
 * MPI's mpirun does, from about 32 ranks), and the abort also ends ranks that did not fail.
 */
inline int end_before_run(int argc, char** argv, int status) {
#ifdef MESHTENSOR_WITH_MPI
  if (status != 0 && launcher_world_size()) {
    boost::mpi::environment environment(argc, argv, boost::mpi::threading::funneled,
                                        /*abort_on_exception=*/false);
    environment.abort(status);
  }
#else
  (void)argc;
  (void)argv;
#endif
  return status;
}

/**
 * Prints `what` as `program`'s error and ends the program as end_before_run() does.
 *
 * ```cpp
 * catch (const std::exception& e) { return meshtensor::fail_before_run(argc, argv, e.what()); }
 * ```
 */
inline int fail_before_run(int argc, char** argv, const std::string& what, int status = 2,
                           const std::string& program = "meshtensor") {
  std::fprintf(stderr, "%s: error: %s\n", program.c_str(), what.c_str());
  std::fflush(stderr);
  return end_before_run(argc, argv, status);
}

/**
 * Runs `fn(Mesh&)` as SPMD on every processor of the mesh `shape` and returns an exit status for
 * `main`. Started by hand it runs one thread per processor; under `mpirun -np N` it runs on the N
 * ranks, and N must equal the mesh size. Every processor runs with `settings` (by default the
 * environment's, core/environment.hpp): their `transport` ("threads", "mpi" or "nccl"; empty: see
 * chosen_transport()) overrides the choice, and `device` ("cpu" or "cuda"; empty: see
 * chosen_device()) says where the processors compute. A failure on any processor ends the whole run
 * with its message on stderr — under MPI and NCCL by aborting the job, so no rank waits forever; a
 * failure every processor learnt (agree_on) is printed once.
 *
 * ```cpp
 * int main(int argc, char** argv) {
 *   return meshtensor::run(argc, argv, "rows:2; cols:2", [](meshtensor::Mesh& mesh) { ... });
 * }
 * ```
 */
template <class F>
int run(int argc, char** argv, const MeshShape& shape, F&& fn,
        const Settings& settings = environment_settings()) {
  (void)argc;
  (void)argv;
  std::string transport;
  try {
    transport = chosen_transport(settings);
    chosen_device(transport, settings);
    if (transport == "threads") {
      threads::run(shape, fn, settings);
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
      nccl::run(shape, fn, settings);
      return 0;
    }
#endif
    mpi::run(shape, fn, settings);
    return 0;
  } catch (const AgreedError& e) {
    detail::end_agreed_failure(environment, e.what());
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

/// run() with the mesh given as text ("rows:2; cols:2"): a malformed one ends the program with its
/// message and status 1, as any failure before the processors start (parsed at the call, it would
/// throw before run() could report it, and end the program by std::terminate).
template <class F>
int run(int argc, char** argv, const std::string& mesh, F&& fn,
        const Settings& settings = environment_settings()) {
  MeshShape shape;
  try {
    shape = MeshShape(mesh);
  } catch (const std::exception& e) {
    return fail_before_run(argc, argv, e.what(), 1);
  }
  return run(argc, argv, shape, std::forward<F>(fn), settings);
}
template <class F>
int run(int argc, char** argv, const char* mesh, F&& fn,
        const Settings& settings = environment_settings()) {
  return run(argc, argv, std::string(mesh), std::forward<F>(fn), settings);
}

}  // namespace meshtensor
