#pragma once
// Which transport and device a run takes: asked for, set in the environment, or implied by the
// start (threads by hand, MPI under a launcher). run() starts what these choose; a plan asks them
// which run it stands for.

#include <string>

#include "meshtensor/core/environment.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/settings.hpp"
#include "meshtensor/device/device.hpp"
#include "meshtensor/device/processor.hpp"

namespace meshtensor {

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

/// The error for `source` naming a transport this program was built without (`missing`), and
/// what to link instead (`remedy`).
inline Error transport_not_built(const std::string& source, const std::string& name,
                                 const std::string& missing, const std::string& remedy) {
  return Error(source + " is \"" + name + "\" but this program was built without " + missing +
               "; " + remedy + " (it has " + available_transports() + ")");
}

/// Checks a transport's name: one of threads, mpi and nccl, and built into this program.
inline std::string valid_transport(const std::string& name, const std::string& source) {
  if (name != "threads" && name != "mpi" && name != "nccl")
    throw Error(source + " is \"" + name +
                "\"; valid values are \"threads\", \"mpi\" and \"nccl\"");
#ifndef MESHTENSOR_WITH_MPI
  if (name == "mpi") throw transport_not_built(source, name, "MPI", "link meshtensor::mpi");
#endif
#ifndef MESHTENSOR_WITH_CUDA
  if (name == "nccl")
    throw transport_not_built(
        source, name, "the GPU backend",
        "link meshtensor::cuda, found when CUDA, cuDNN and NCCL are installed");
#endif
  return name;
}

/// The transport `run` will use: `settings.transport` if not empty (the program's, or
/// MESHTENSOR_TRANSPORT's), else "mpi" under an MPI launcher, else "threads". "nccl" is never
/// chosen by itself.
inline std::string chosen_transport(const Settings& settings = environment_settings()) {
  if (!settings.transport.empty())
    return valid_transport(settings.transport, "the transport asked for");
  return mpi_launcher_variable() ? "mpi" : "threads";
}

/// The device a transport's processors compute on unless asked otherwise: a GPU each under nccl,
/// the host's cores under threads and mpi.
inline DeviceKind default_device(const std::string& transport) {
  return transport == "nccl" ? DeviceKind::cuda : DeviceKind::cpu;
}

/// The device `run` puts the processors on: `settings.device` ("cpu", "cuda"; empty: the
/// transport's default), checked against the transport, which carries messages from that device's
/// memory: threads and mpi from the host's, nccl from GPUs'.
inline DeviceKind chosen_device(const std::string& transport,
                                const Settings& settings = environment_settings(),
                                const std::string& source = "the device asked for") {
  const std::string& name = settings.device;
  if (name.empty()) return default_device(transport);
  const DeviceKind kind = parse_device_kind(name, source);
  if (kind == DeviceKind::plan)
    throw Error(source +
                " is \"plan\", a device without data, which no transport of run() carries; "
                "valid devices here are \"cpu\" and \"cuda\"");
  if (kind != default_device(transport))
    throw Error(source + " is \"" + name + "\" but the " + transport + " transport carries " +
                (transport == "nccl" ? "GPU memory" : "host memory") +
                "; valid pairs are threads or mpi with cpu, and nccl with cuda");
  return kind;
}

/// Whether plans made with `settings` stand for a run on devices (GPUs): the device run() would
/// choose with them. A plan's processors compute on the plan device, but the ops whose road
/// depends on where blocks live must take the predicted run's road, or the plan counts messages
/// the run never sends.
inline bool plans_stand_for_devices(const Settings& settings = current_processor().settings()) {
  return chosen_device(chosen_transport(settings), settings) == DeviceKind::cuda;
}

}  // namespace meshtensor
