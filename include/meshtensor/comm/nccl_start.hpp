#pragma once
// Starting the `nccl` transport on the ranks of an MPI job: each rank takes its own GPU, the ranks
// agree that all of them can run, and NCCL's world communicator is built from an id that rank 0
// broadcasts over MPI. When any rank cannot run (no driver, no GPU, two ranks on one GPU, NCCL
// libraries that differ), every rank throws the same DeviceError naming the rank, its host and the
// problem, before any of them enters NCCL's set-up, where it would wait for the others forever.

#include <mpi.h>
#include <nccl.h>

#include <boost/mpi/collectives/all_gather.hpp>
#include <boost/mpi/communicator.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "meshtensor/comm/nccl.hpp"
#include "meshtensor/device/cuda.hpp"

namespace meshtensor::nccl {
namespace detail {

/// NCCL's version code (22809 for 2.28.9) as "2.28.9".
inline std::string nccl_version_string(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

/// What one rank found out about itself before NCCL starts.
struct Readiness {
  std::string host;
  int gpu = -1;
  int gpus = 0;  // visible to this rank
  cuda::GpuIdentity identity;
  int nccl_version = 0;
  std::string problem;     // empty when this rank can run
  bool lacks_gpu = false;  // the problem is a missing GPU (NoGpuError), not a broken installation
};

inline Readiness examine_this_rank(const boost::mpi::communicator& host_ranks) {
  Readiness r;
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  r.host.assign(name, length);
  try {
    if (ncclGetVersion(&r.nccl_version) != ncclSuccess)
      throw DeviceError("ncclGetVersion failed: the NCCL library did not load");
    // The library must be at least as new as the headers this program was compiled with: the
    // calls it makes (ncclCommSplit, non-blocking communicators) do not exist in older ones.
    if (r.nccl_version / 100 < NCCL_VERSION_CODE / 100)
      throw DeviceError("the NCCL library loaded (libnccl.so." + std::to_string(NCCL_MAJOR) +
                        ", version " + nccl_version_string(r.nccl_version) +
                        ") is older than the NCCL " + nccl_version_string(NCCL_VERSION_CODE) +
                        " this program was built with; put the matching libnccl first on "
                        "LD_LIBRARY_PATH or rebuild against the installed NCCL");
    r.gpus = cuda::visible_gpus();
    // Ranks of a host take its GPUs in turn; when each rank sees its own single GPU (srun
    // --gpus-per-task=1) they all take GPU 0, which is a different device for each.
    r.gpu = host_ranks.rank() % r.gpus;
    r.identity = cuda::identify_gpu(r.gpu);
    cuda::check(cudaSetDevice(r.gpu), "cudaSetDevice");
  } catch (const NoGpuError& e) {
    r.problem = e.what();
    r.lacks_gpu = true;
  } catch (const Error& e) {
    r.problem = e.what();
  }
  return r;
}

// Ranks of one host that would share a GPU: NCCL needs a GPU per rank.
inline void find_shared_gpus(const boost::mpi::communicator& host_ranks, Readiness& mine) {
  std::vector<std::string> uuids;
  boost::mpi::all_gather(host_ranks, mine.problem.empty() ? mine.identity.uuid : std::string(),
                         uuids);
  if (!mine.problem.empty()) return;
  std::vector<int> sharing;
  for (int q = 0; q < host_ranks.size(); ++q)
    if (uuids[q] == mine.identity.uuid) sharing.push_back(q);
  if (sharing.size() < 2) return;
  const int gpus = mine.gpus;
  mine.lacks_gpu = true;
  mine.problem = std::to_string(sharing.size()) + " processors of host " + mine.host +
                 " would share " + mine.identity.description + ": this host shows " +
                 std::to_string(gpus) + " GPU(s) to each of its " +
                 std::to_string(host_ranks.size()) +
                 " processors, and the nccl transport needs one GPU per processor; start at most " +
                 std::to_string(gpus) +
                 " processors per host (mpirun --map-by ppr:N:node, srun --ntasks-per-node), or "
                 "make more GPUs visible (CUDA_VISIBLE_DEVICES)";
}

// One message for every rank: the problems found, each with the ranks that have it.
inline std::string describe_problems(const std::vector<std::string>& problems,
                                     const std::vector<std::string>& hosts) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (int q = 0; q < static_cast<int>(problems.size()); ++q)
    if (!problems[q].empty()) ranks_of[problems[q]].push_back(q);
  std::string text = "the nccl transport cannot start";
  for (const auto& [problem, ranks] : ranks_of) {
    std::string who;
    if (ranks.size() == problems.size()) {
      who = "every processor";
    } else {
      who = ranks.size() == 1 ? "processor " : "processors ";
      for (std::size_t i = 0; i < ranks.size() && i < 8; ++i)
        who += (i ? ", " : "") + std::to_string(ranks[i]);
      if (ranks.size() > 8) who += ", ...";
      who += " (host " + hosts[ranks.front()] + (ranks.size() > 1 ? ", ..." : "") + ")";
    }
    text += "; " + who + ": " + problem;
  }
  return text;
}

}  // namespace detail

/**
 * Collective over `world`: gives each rank its GPU and returns the NCCL communicator over all of
 * them. Throws the same DeviceError on every rank when any rank cannot run (NoGpuError when the
 * only problem is missing GPUs), and CommError when
 * NCCL's own set-up fails or takes longer than MESHTENSOR_TIMEOUT seconds.
 */
inline std::unique_ptr<NcclCommunicator> start(const boost::mpi::communicator& world) {
  MPI_Comm host_comm = MPI_COMM_NULL;
  MPI_Comm_split_type(static_cast<MPI_Comm>(world), MPI_COMM_TYPE_SHARED, world.rank(),
                      MPI_INFO_NULL, &host_comm);
  const boost::mpi::communicator host_ranks(host_comm, boost::mpi::comm_take_ownership);

  detail::Readiness mine = detail::examine_this_rank(host_ranks);
  detail::find_shared_gpus(host_ranks, mine);

  std::vector<std::string> problems, hosts;
  std::vector<int> versions, lacking;
  boost::mpi::all_gather(world, mine.problem, problems);
  boost::mpi::all_gather(world, mine.problem.empty() || mine.lacks_gpu ? 1 : 0, lacking);
  boost::mpi::all_gather(world, mine.host, hosts);
  boost::mpi::all_gather(world, mine.nccl_version, versions);
  bool any_problem = false;
  for (const auto& p : problems) any_problem |= !p.empty();
  for (int q = 0; q < world.size() && !any_problem; ++q)
    if (versions[q] != versions[0]) {
      problems[q] = "its NCCL is " + detail::nccl_version_string(versions[q]) +
                    " but processor 0's is " + detail::nccl_version_string(versions[0]) +
                    "; every processor must load the same NCCL";
      lacking[q] = 0;
      any_problem = true;
    }
  if (any_problem) {
    bool only_missing_gpus = true;
    for (int q = 0; q < world.size(); ++q) only_missing_gpus &= lacking[q] == 1;
    const std::string text = detail::describe_problems(problems, hosts);
    if (only_missing_gpus) throw NoGpuError(text);
    throw DeviceError(text);
  }

  ncclUniqueId id{};
  if (world.rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess)
    std::memset(&id, 0, sizeof id);  // an all-zero id tells the others below
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, static_cast<MPI_Comm>(world));
  const ncclUniqueId zero{};
  if (std::memcmp(&id, &zero, sizeof id) == 0)
    throw CommError("the nccl transport cannot start: ncclGetUniqueId failed on processor 0 (" +
                    hosts[0] + "); NCCL_DEBUG=INFO shows why");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;    // set-up and every later call can then be given up after a timeout
  config.splitShare = 1;  // the mesh's groups, split from this one, share its buffers (NCCL
                          // takes this from the parent's configuration)
  ncclComm_t comm = nullptr;
  try {
    // Two statements: settle() needs the communicator the call makes, and the order in which a
    // function's arguments are evaluated is unspecified.
    const ncclResult_t started =
        ncclCommInitRankConfig(&comm, world.size(), id, world.rank(), &config);
    detail::settle(comm, started, "ncclCommInitRankConfig");
  } catch (const CommError& e) {
    if (comm) (void)ncclCommAbort(comm);
    throw CommError("the nccl transport cannot start on processor " + std::to_string(world.rank()) +
                    " (" + mine.host + ", " + mine.identity.description + "): " + e.what() +
                    "; NCCL_DEBUG=INFO shows why");
  }
  return std::make_unique<NcclCommunicator>(comm, mine.gpu);
}

}  // namespace meshtensor::nccl
