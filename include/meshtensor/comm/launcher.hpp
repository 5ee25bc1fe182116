#pragma once
// Tells whether this process was started by an MPI launcher, which decides the default transport.

#include <cstdlib>
#include <optional>
#include <string>

namespace meshtensor {

/// The launcher variable that marks an MPI start (mpirun, mpiexec, an srun step), or nullopt when
/// the program was started by hand. Inside a Slurm allocation (sbatch, salloc) but outside an srun
/// step, SLURM_NTASKS says what the allocation holds, not that this process is one of them.
inline std::optional<std::string> mpi_launcher_variable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                           "HYDRA_CONTROL_FD", "SLURM_STEP_NUM_TASKS"})
    if (std::getenv(name)) return std::string(name);
  return std::nullopt;
}

/// The number of processes the launcher started (its world size), or nullopt when not launched.
inline std::optional<int> launcher_world_size() {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"})
    if (const char* value = std::getenv(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  return std::nullopt;
}

}  // namespace meshtensor
