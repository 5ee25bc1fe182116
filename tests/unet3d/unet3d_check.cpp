// Helpers for the unet3d tests:
//   unet3d_check losses TOLERANCE A.jsonl B.jsonl...  loss sequences agree within a relative
//                                                     tolerance
//   unet3d_check same-npy A.npy B.npy                 two .npy files hold the same array
//   unet3d_check close-npy TOLERANCE A.npy B.npy      two float arrays of one shape differ by at
//                                                     most TOLERANCE times A's largest magnitude
//   unet3d_check same-dir A B                         every .npy in A equals the one of that name
//                                                     in B
//   unet3d_check corrupt MODE IN.npy OUT.npy          truncate | zeros | dtype | shape | garbage | nan
//   unet3d_check task CHECKPOINT CLASSES MODALITIES   the latest checkpoint's task has these
//                                                     class names and input modalities (a,b,c)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/io/npy.hpp>

namespace fs = std::filesystem;
namespace mt = meshtensor;

std::vector<double> losses_of(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int main(int argc, char** argv) try {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "losses" && argc >= 5) {
    const double tolerance = std::stod(argv[2]);
    const auto reference = losses_of(argv[3]);
    double largest = 0;
    for (int k = 4; k < argc; ++k) {
      const auto other = losses_of(argv[k]);
      if (other.size() != reference.size()) {
        std::printf("%s has %zu losses, %s has %zu\n", argv[3], reference.size(), argv[k],
                    other.size());
        return 1;
      }
      for (std::size_t s = 0; s < other.size(); ++s)
        largest = std::max(
            largest, std::abs(other[s] - reference[s]) / std::max(1e-12, std::abs(reference[s])));
    }
    std::printf("%zu steps, %d runs: largest relative loss difference %.3g (tolerance %g)\n",
                reference.size(), argc - 3, largest, tolerance);
    return largest <= tolerance ? 0 : 1;
  }
  if (command == "same-npy" && argc == 4) {
    const auto a = mt::npy::read_header(argv[2]), b = mt::npy::read_header(argv[3]);
    const std::string da = bytes_of(argv[2]).substr(a.data_offset),
                      db = bytes_of(argv[3]).substr(b.data_offset);
    const bool same = a.descr == b.descr && a.shape == b.shape && da == db;
    std::size_t differing = 0;
    for (std::size_t i = 0; i < std::min(da.size(), db.size()); ++i) differing += da[i] != db[i];
    std::printf("%s and %s: %s (%zu of %zu bytes differ)\n", argv[2], argv[3],
                same ? "identical" : "DIFFERENT", differing, da.size());
    return same ? 0 : 1;
  }
  if (command == "close-npy" && argc == 5) {
    const double tolerance = std::stod(argv[2]);
    const auto a = mt::npy::read<float>(argv[3]), b = mt::npy::read<float>(argv[4]);
    if (a.shape() != b.shape()) {
      std::printf("%s and %s have different shapes\n", argv[3], argv[4]);
      return 1;
    }
    double scale = 0, largest = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double(std::abs(a.data()[i])));
      largest = std::max(largest, double(std::abs(a.data()[i] - b.data()[i])));
    }
    const double gap = largest / std::max(scale, 1e-30);
    std::printf("%s and %s: largest difference %.3g of the largest magnitude (tolerance %g)\n",
                argv[3], argv[4], gap, tolerance);
    return gap <= tolerance ? 0 : 1;
  }
  if (command == "same-dir" && argc == 4) {
    int checked = 0, different = 0;
    for (const auto& entry : fs::directory_iterator(argv[2])) {
      if (entry.path().extension() != ".npy") continue;
      const fs::path other = fs::path(argv[3]) / entry.path().filename();
      ++checked;
      if (!fs::exists(other) || bytes_of(entry.path().string()) != bytes_of(other.string())) {
        std::printf("differs: %s\n", entry.path().filename().string().c_str());
        ++different;
      }
    }
    std::printf("%d arrays compared, %d differ\n", checked, different);
    return checked > 0 && different == 0 ? 0 : 1;
  }
  if (command == "corrupt" && argc == 5) {
    const std::string mode = argv[2], in = argv[3], out = argv[4];
    std::string bytes = bytes_of(in);
    const auto header = mt::npy::read_header(in);
    if (mode == "truncate") {
      bytes.resize(header.data_offset + (bytes.size() - header.data_offset) / 2);
    } else if (mode == "zeros") {  // what a power loss can leave: the right size, no data
      std::fill(bytes.begin() + std::ptrdiff_t(header.data_offset), bytes.end(), '\0');
    } else if (mode == "nan") {  // float32 data with a NaN at the last element
      const float nan = std::nanf("");
      std::memcpy(&bytes[bytes.size() - sizeof nan], &nan, sizeof nan);
    } else if (mode == "garbage") {
      for (std::size_t i = 10; i < header.data_offset; ++i) bytes[i] = char('a' + i % 26);
    } else if (mode == "dtype" || mode == "shape") {
      const auto array = mt::npy::read<float>(in);
      if (mode == "dtype") {
        xt::xarray<double> wider = xt::xarray<double>::from_shape(array.shape());
        std::copy(array.begin(), array.end(), wider.begin());
        mt::npy::write(out, wider);
      } else {  // the same values, flattened and repeated twice
        xt::xarray<float> longer = xt::xarray<float>::from_shape({2 * array.size()});
        std::copy(array.begin(), array.end(), longer.begin());
        std::copy(array.begin(), array.end(), longer.begin() + array.size());
        mt::npy::write(out, longer);
      }
      return 0;
    } else {
      std::fprintf(stderr, "unknown corruption %s\n", mode.c_str());
      return 2;
    }
    std::ofstream(out, std::ios::binary | std::ios::trunc) << bytes;
    return 0;
  }
  if (command == "task" && argc == 5) {
    std::ifstream latest(fs::path(argv[2]) / "latest");
    std::string name;
    std::getline(latest, name);
    std::ifstream in(fs::path(argv[2]) / name / "manifest.json");
    const auto flags = nlohmann::json::parse(in).at("flags");
    std::string classes, modalities;
    for (const auto& c : flags.at("classes"))
      classes += (classes.empty() ? "" : ",") + c.get<std::string>();
    for (const auto& c : flags.at("inputs"))
      modalities += (modalities.empty() ? "" : ",") + c.at("modality").get<std::string>();
    std::printf("classes %s, modalities %s\n", classes.c_str(), modalities.c_str());
    return classes == argv[3] && modalities == argv[4] ? 0 : 1;
  }
  std::fprintf(stderr, "usage: unet3d_check losses|same-npy|close-npy|same-dir|corrupt|task ...\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "unet3d_check: %s\n", e.what());
  return 2;
}
