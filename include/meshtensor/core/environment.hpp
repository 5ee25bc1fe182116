#pragma once
// The one place the library reads the environment: the MESHTENSOR_ variables that override a
// run's default Settings (docs/LIBRARY.md's table), what a launcher tells its processes (MPI,
// Slurm), and where settings files go. Read here so that every variable is named, checked and
// documented in one place; the rest of the library takes its Settings from the processor.

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshtensor/core/byte_size.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/settings.hpp"

namespace meshtensor {

/// A variable's value, or null where it is not set: the process's environment, or a test's.
using EnvironmentLookup = std::function<const char*(const char*)>;

inline const char* process_environment(const char* name) { return std::getenv(name); }

namespace detail {

// The choice among `names` (index into it) that `variable`'s value `text` names.
inline std::size_t setting_choice(const char* variable, const std::string& text,
                                  const std::vector<const char*>& names) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (text == names[i]) return i;
  std::string valid;
  for (std::size_t i = 0; i < names.size(); ++i)
    valid += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  throw Error(std::string(variable) + "=" + text + ": expected " + valid);
}

inline bool on_off_setting(const char* variable, const std::string& text) {
  return setting_choice(variable, text, {"on", "off"}) == 0;
}

inline double seconds_setting(const char* variable, const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds >= 0) ||
      seconds > std::numeric_limits<double>::max())
    throw Error(std::string(variable) + " is \"" + text +
                "\"; give the seconds a processor may wait for its peers, e.g. 600 (the "
                "default), or 0 for no limit");
  return seconds;
}

inline long positive_setting(const char* variable, const std::string& text, const char* what) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1)
    throw Error(std::string(variable) + "=" + text + ": expected " + what);
  return n;
}

inline bool collective_checks_setting(const std::string& text) {
  if (text == "0" || text == "false" || text == "off" || text == "no") return false;
  if (text.empty() || text == "1" || text == "true" || text == "on" || text == "yes") return true;
  throw Error("MESHTENSOR_CHECK_COLLECTIVES is \"" + text +
              "\"; valid values are 1 (check every collective's op and sizes: the default) and 0");
}

inline void apply_kernel_variables(const EnvironmentLookup& lookup, KernelPolicy& k) {
  using K = KernelPolicy;
  const auto read = [&](const char* name, auto&& apply) {
    if (const char* text = lookup(name)) apply(name, std::string(text));
  };
  read("MESHTENSOR_KERNELS", [&](const char* v, const std::string& t) {
    k.choice = K::Choice(setting_choice(v, t, {"timed", "fixed"}));
  });
  read("MESHTENSOR_ONEDNN_FORMATS", [&](const char* v, const std::string& t) {
    k.onednn_formats =
        K::Formats(setting_choice(v, t, {"auto", "channels_last", "blocked", "by_channels"}));
  });
  read("MESHTENSOR_BF16_CONV", [&](const char* v, const std::string& t) {
    k.bf16_conv = K::Bf16Conv(setting_choice(v, t, {"auto", "native", "widened"}));
  });
  read("MESHTENSOR_BF16_PRODUCTS", [&](const char* v, const std::string& t) {
    k.bf16_products = K::Bf16Products(setting_choice(v, t, {"auto", "dot", "float"}));
  });
  read("MESHTENSOR_INPUT_GRADIENT_AS_FORWARD", [&](const char* v, const std::string& t) {
    k.input_gradient_as_forward = K::AsForward(setting_choice(v, t, {"auto", "always", "never"}));
  });
  read("MESHTENSOR_ROW_KERNELS",
       [&](const char* v, const std::string& t) { k.row_kernels = on_off_setting(v, t); });
  read("MESHTENSOR_ROW_BANDS", [&](const char* v, const std::string& t) {
    k.row_bands = t == "auto" ? 0
                  : t == "off"
                      ? -1
                      : positive_setting(v, t, "auto, off or a number of rows (1 or more)");
  });
  read("MESHTENSOR_MAPPED_INPUTS",
       [&](const char* v, const std::string& t) { k.mapped_inputs = on_off_setting(v, t); });
  read("MESHTENSOR_MATH", [&](const char* v, const std::string& t) {
    k.math = K::Math(setting_choice(v, t, {"fp32", "tf32"}));
  });
  // Kernel names are checked against their family's list where a call runs.
  read("MESHTENSOR_CONV_KERNEL",
       [&](const char*, const std::string& t) { k.conv_kernel = t == "auto" ? "" : t; });
  read("MESHTENSOR_POOL_KERNEL",
       [&](const char*, const std::string& t) { k.pool_kernel = t == "auto" ? "" : t; });
  read("MESHTENSOR_SUM_KERNEL",
       [&](const char*, const std::string& t) { k.sum_kernel = t == "auto" ? "" : t; });
  read("MESHTENSOR_MAX_CPU_ISA", [&](const char* v, const std::string& t) {
    k.cpu_instructions = K::CpuInstructions(
        setting_choice(v, t, {"best", "avx512_bf16", "avx512", "avx2", "baseline"}));
  });
}

}  // namespace detail

/// `base` with each MESHTENSOR_ variable that `lookup` finds applied over it; an Error names a
/// variable whose value is not valid, and says what would be.
inline Settings settings_from(const EnvironmentLookup& lookup, Settings base = {}) {
  Settings s = std::move(base);
  detail::apply_kernel_variables(lookup, s.kernels);
  if (const char* t = lookup("MESHTENSOR_TRANSPORT")) {
    detail::setting_choice("MESHTENSOR_TRANSPORT", t, {"threads", "mpi", "nccl"});
    s.transport = t;
  }
  if (const char* t = lookup("MESHTENSOR_DEVICE"); t && *t) {
    detail::setting_choice("MESHTENSOR_DEVICE", t, {"cpu", "cuda"});
    s.device = t;
  }
  if (const char* t = lookup("MESHTENSOR_THREADS_PER_PROCESSOR"))
    s.threads_per_processor = static_cast<int>(detail::positive_setting(
        "MESHTENSOR_THREADS_PER_PROCESSOR", t, "a number of threads (1 or more)"));
  if (const char* t = lookup("MESHTENSOR_HALO_OVERLAP"))
    s.halo_overlap = detail::on_off_setting("MESHTENSOR_HALO_OVERLAP", t);
  if (const char* t = lookup("MESHTENSOR_TIMEOUT"); t && *t)
    s.timeout_seconds = detail::seconds_setting("MESHTENSOR_TIMEOUT", t);
  if (const char* t = lookup("MESHTENSOR_CHECK_COLLECTIVES"))
    s.check_collectives = detail::collective_checks_setting(t);
  if (const char* t = lookup("MESHTENSOR_MAX_BLOCK_BYTES"))
    s.max_block_bytes = parse_bytes(t, "MESHTENSOR_MAX_BLOCK_BYTES");
  // OpenMP's own variables are a choice of how its threads wait: left to it.
  if (lookup("OMP_WAIT_POLICY") || lookup("GOMP_SPINCOUNT"))
    s.thread_waiting = ThreadWaiting::openmp;
  if (const char* t = lookup("MESHTENSOR_THREAD_WAITING"))
    s.thread_waiting = static_cast<ThreadWaiting>(
        detail::setting_choice("MESHTENSOR_THREAD_WAITING", t, {"adaptive", "openmp", "brief"}));
  return s;
}

/// The settings this process's environment gives over the defaults: read at the first call, the
/// same afterwards (a variable set later changes nothing).
inline const Settings& environment_settings() {
  static const Settings settings = settings_from(process_environment);
  return settings;
}

/// The launcher variable that marks an MPI start (mpirun, mpiexec, an srun step), or nullopt when
/// the program was started by hand. Inside a Slurm allocation (sbatch, salloc) but outside an srun
/// step, SLURM_NTASKS says what the allocation holds, not that this process is one of them.
inline std::optional<std::string> mpi_launcher_variable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                           "HYDRA_CONTROL_FD", "SLURM_STEP_NUM_TASKS"})
    if (process_environment(name)) return std::string(name);
  return std::nullopt;
}

namespace detail {
inline std::optional<int> first_positive(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* value = process_environment(name)) {
      const int n = std::atoi(value);
      if (n > 0) return n;
    }
  return std::nullopt;
}
}  // namespace detail

/// The number of processes the launcher started (its world size), or nullopt when not launched.
inline std::optional<int> launcher_world_size() {
  return detail::first_positive(
      {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"});
}

/// The processes the launcher placed on this node, where it says.
inline std::optional<int> launcher_ranks_on_node() {
  return detail::first_positive(
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"});
}

/// Slurm's CPUs per task inside an srun step, or nullopt.
inline std::optional<int> slurm_cpus_per_task() {
  if (!process_environment("SLURM_STEP_NUM_TASKS")) return std::nullopt;
  return detail::first_positive({"SLURM_CPUS_PER_TASK"});
}

/// CUDA_VISIBLE_DEVICES, for messages about the GPUs a process sees.
inline std::optional<std::string> cuda_visible_devices() {
  if (const char* visible = process_environment("CUDA_VISIBLE_DEVICES")) return visible;
  return std::nullopt;
}

/// `forced` (an environment variable naming the directory) if set, else $`xdg`/meshtensor, else
/// ~/`home_default`/meshtensor.
inline std::filesystem::path settings_directory(const char* forced, const char* xdg,
                                                const char* home_default) {
  if (const char* dir = process_environment(forced)) return dir;
  if (const char* base = process_environment(xdg))
    return std::filesystem::path(base) / "meshtensor";
  const char* home = process_environment("HOME");
  return std::filesystem::path(home ? home : ".") / home_default / "meshtensor";
}

}  // namespace meshtensor
