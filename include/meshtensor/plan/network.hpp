#pragma once
// The network a plan's messages would cross: latency and bandwidth of one link, per direction.
// Presets for shared memory (as measured on the machine this was written on), InfiniBand HDR and
// NDR and NVLink live in a text file the user may edit (networks_file(): written with the presets
// on first use), one "name latency_us bandwidth_GBps  # what it is" line each.

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "meshtensor/core/error.hpp"
#include "meshtensor/plan/settings_files.hpp"

namespace meshtensor {

/// One kind of link between processors.
struct Link {
  std::string name;
  double latency_s = 0;         // per message, or per round of a collective
  double bytes_per_second = 1;  // per direction
  std::string about;

  double seconds(double messages, double bytes) const {
    return messages * latency_s + bytes / bytes_per_second;
  }
};

/// The presets, as networks_file() is first written.
inline std::string network_presets_text() {
  return "# meshtensor networks: name, latency per message (microseconds), bandwidth per "
         "direction (GB/s)\n"
         "shared-memory 3 4    # MPI between processes of one node: a 2-core AMD EPYC, "
         "bench_communication (all-reduce of 1k floats 3 us, of 1M floats ~5 GB/s)\n"
         "ib-hdr 1.5 24        # InfiniBand HDR, 200 Gb/s per port\n"
         "ib-ndr 1.5 48        # InfiniBand NDR, 400 Gb/s per port\n"
         "nvlink 5 450         # NVLink 4 (H100 SXM) through NCCL, 900 GB/s both ways\n";
}

/// The links of a networks file's text; `source` is named in errors with the line.
inline std::vector<Link> read_networks(const std::string& text, const std::string& source) {
  std::vector<Link> links;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    std::string about;
    if (const auto hash = line.find('#'); hash != std::string::npos) {
      about = line.substr(hash + 1);
      about.erase(0, about.find_first_not_of(' '));
      line.resize(hash);
    }
    std::istringstream words(line);
    Link link;
    double latency_us = 0, gigabytes = 0;
    if (!(words >> link.name)) continue;
    if (!(words >> latency_us >> gigabytes) || !std::isfinite(latency_us) ||
        !std::isfinite(gigabytes) || latency_us < 0 || gigabytes <= 0)
      throw Error(source + ", line " + std::to_string(number) + ": network \"" + link.name +
                  "\" needs a latency in microseconds (>= 0) and a bandwidth in GB/s (> 0), "
                  "e.g. \"ib-hdr 1.5 24\"");
    link.latency_s = latency_us * 1e-6;
    link.bytes_per_second = gigabytes * 1e9;
    link.about = about;
    links.push_back(link);
  }
  return links;
}

/// Where meshtensor keeps its settings: MESHTENSOR_CONFIG_DIR, else $XDG_CONFIG_HOME/meshtensor,
/// else ~/.config/meshtensor.
inline std::filesystem::path config_directory() {
  return settings_directory("MESHTENSOR_CONFIG_DIR", "XDG_CONFIG_HOME", ".config");
}

/// The networks file, written with the presets if there is none yet.
inline std::filesystem::path networks_file() {
  const auto path = config_directory() / "networks.txt";
  if (!std::filesystem::exists(path)) write_text_file(path, network_presets_text());
  return path;
}

/// The link called `name` in the networks file; an unknown name is refused, listing the known.
inline Link network_named(const std::string& name) {
  const auto path = networks_file();
  std::string known;
  for (const Link& link : read_networks(read_text_file(path, "networks"), path.string())) {
    if (link.name == name) return link;
    known += (known.empty() ? "" : ", ") + link.name;
  }
  throw Error("network \"" + name + "\" is not in " + path.string() + "; its networks are " +
              known + " (add a line \"name latency_us bandwidth_GBps\" for another)");
}

}  // namespace meshtensor
