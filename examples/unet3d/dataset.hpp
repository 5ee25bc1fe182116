#pragma once
// A dataset of scans with their label volumes: a Medical Segmentation Decathlon dataset.json (what
// MONAI and nnU-Net read: training and test lists, modality and label names), LiTS names
// (volume-N.nii[.gz] beside segmentation-N.nii[.gz], as the seeds' liver-tumour data come) or a
// pairs.csv listing "image,label" per line. A seeded split holds some pairs out for validation;
// the training pairs are visited in a fresh seeded order every epoch.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

#include "manifest.hpp"

namespace unet3d {

namespace mt = meshtensor;

/// One case: its image file(s), one 4-D file with every channel or one 3-D file per channel, and
/// its label file (empty: none).
struct ScanFiles {
  std::vector<std::string> images;
  std::string label;
};

/// 0 .. n-1 shuffled (Fisher-Yates) by draws `first + 1 .. first + n - 1` of `stream`.
inline std::vector<std::size_t> seeded_order(std::size_t n, const mt::RandomStream& stream,
                                             std::uint64_t first = 0) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  for (std::size_t i = n; i-- > 1;) std::swap(order[i], order[stream.bits(first + i) % (i + 1)]);
  return order;
}

struct Dataset {
  std::vector<ScanFiles> train, validation;
  std::uint64_t seed = 1;
  // What a dataset.json says of its task (empty for LiTS names and pairs.csv).
  std::vector<std::string> classes, modalities;

  /// The pair for training step `step`: epochs are seeded permutations of the training pairs.
  const ScanFiles& for_step(std::int64_t step) const {
    const auto n = static_cast<std::int64_t>(train.size());
    const auto epoch = std::uint64_t(step / n);
    const auto order =
        seeded_order(train.size(), mt::RandomStream(seed, "epoch-order"), epoch * train.size());
    return train[order[std::size_t(step % n)]];
  }
};

namespace pairs {

inline std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// The fields of one CSV row (RFC 4180: a field in double quotes may hold commas, and "" for a
// quote), each trimmed; `where` ("pairs.csv:3") names the row in errors.
inline std::vector<std::string> csv_fields(const std::string& row, const std::string& where) {
  std::vector<std::string> fields(1);
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const char c = row[i];
    if (quoted) {
      if (c != '"')
        fields.back() += c;
      else if (i + 1 < row.size() && row[i + 1] == '"')
        fields.back() += row[++i];
      else
        quoted = false;
    } else if (c == '"' && trim(fields.back()).empty()) {
      quoted = was_quoted = true;
      fields.back().clear();
    } else if (c == ',') {
      if (!was_quoted) fields.back() = trim(fields.back());
      fields.emplace_back();
      was_quoted = false;
    } else if (was_quoted && c != ' ' && c != '\t') {
      throw mt::IoError(where + ": text after a quoted field's closing quote in \"" + row + "\"");
    } else if (!was_quoted) {
      fields.back() += c;
    }
  }
  if (quoted) throw mt::IoError(where + ": a quote is not closed in \"" + row + "\"");
  if (!was_quoted) fields.back() = trim(fields.back());
  return fields;
}

// pairs.csv: "image,label" per line, relative to the folder; a first line "image,label" is a
// header. Spreadsheets' ways are read too: a byte-order mark, quoted fields, CRLF line ends.
inline std::vector<ScanFiles> read_pairs_csv(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  if (!in) throw mt::IoError(csv.string() + ": cannot open for reading");
  std::vector<ScanFiles> pairs;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8's BOM
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = csv.string() + ":" + std::to_string(number);
    const auto fields = csv_fields(line, where);
    if (fields.size() != 2 || fields[0].empty() || fields[1].empty())
      throw mt::IoError(where + ": \"" + line + "\" is not \"image,label\" (two file names)");
    const std::string &image = fields[0], &label = fields[1];
    if (number == 1 && image == "image" && label == "label") continue;
    auto resolve = [&](const std::string& name) {
      const std::filesystem::path p(name);
      return (p.is_absolute() ? p : csv.parent_path() / p).string();
    };
    pairs.push_back({{resolve(image)}, resolve(label)});
  }
  return pairs;
}

// LiTS names: volume-N with segmentation-N, either .nii or .nii.gz, in the order of N.
inline std::vector<ScanFiles> find_lits_pairs(const std::filesystem::path& dir) {
  static const std::regex volume_name(R"(volume-(\d+)\.nii(\.gz)?)", std::regex::icase);
  std::map<long long, std::string> volumes;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, volume_name)) volumes[std::stoll(m[1])] = entry.path().string();
  }
  std::vector<ScanFiles> pairs;
  for (const auto& [number, image] : volumes) {
    const std::string stem = "segmentation-" + std::to_string(number);
    std::string label;
    for (const char* ext : {".nii", ".nii.gz", ".NII", ".NII.GZ"})
      if (std::filesystem::exists(dir / (stem + ext))) label = (dir / (stem + ext)).string();
    if (label.empty())
      throw mt::IoError(image + ": has no label volume " + (dir / stem).string() + ".nii[.gz]");
    pairs.push_back({{image}, label});
  }
  return pairs;
}

}  // namespace pairs

namespace decathlon {

using json = nlohmann::json;

/// What a Decathlon dataset.json holds: the classes and modalities in the order of their
/// numbers, the training cases and the test scans.
struct Description {
  std::vector<std::string> classes, modalities;
  std::vector<ScanFiles> training, test;
};

// The names of {"0": "a", "1": "b", ...}, in the order of the numbers, which must run from 0.
inline std::vector<std::string> numbered_names(const json& object, const std::string& where) {
  if (!object.is_object() || object.empty())
    throw mt::IoError(where + " must be an object {\"0\": name, \"1\": name, ...}");
  std::vector<std::string> names(object.size());
  std::vector<bool> seen(object.size(), false);
  for (const auto& [key, value] : object.items()) {
    std::size_t used = 0;
    long long number = -1;
    try {
      number = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || number < 0 || number >= (long long)names.size() || seen[number])
      throw mt::IoError(where + " has the key \"" + key + "\"; its keys must be the numbers 0 to " +
                        std::to_string(names.size() - 1) + ", each once");
    if (!value.is_string() || value.get<std::string>().empty())
      throw mt::IoError(where + "[\"" + key + "\"] must be a non-empty name");
    seen[number] = true;
    names[number] = value.get<std::string>();
  }
  return names;
}

// A path of the file, relative to its folder: "./imagesTr/a.nii.gz" as the Decathlon writes them.
inline std::string resolve(const std::filesystem::path& folder, const json& value,
                           const std::string& where) {
  if (!value.is_string() || value.get<std::string>().empty())
    throw mt::IoError(where + " must be a file name");
  const std::filesystem::path p(value.get<std::string>());
  return (p.is_absolute() ? p : folder / p).lexically_normal().string();
}

// "image": one file, or a list of one file per channel (MONAI's way).
inline std::vector<std::string> images_of(const std::filesystem::path& folder, const json& value,
                                          const std::string& where) {
  if (!value.is_array()) return {resolve(folder, value, where)};
  if (value.empty()) throw mt::IoError(where + " is an empty list; name the channels' files");
  std::vector<std::string> images;
  for (std::size_t i = 0; i < value.size(); ++i)
    images.push_back(resolve(folder, value[i], where + "[" + std::to_string(i) + "]"));
  return images;
}

/// Reads and checks `path` (a dataset.json). Throws IoError naming the file and the key at fault.
inline Description read(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw mt::IoError(path.string() + ": cannot open for reading");
  json doc;
  try {
    doc = json::parse(in, refuse_deep_nesting(path.string()));
  } catch (const json::exception& e) {
    throw mt::IoError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  const std::string name = path.string();
  const std::filesystem::path folder = path.parent_path();
  if (!doc.is_object()) throw mt::IoError(name + ": must hold a JSON object");
  for (const char* key : {"labels", "modality", "training"})
    if (!doc.contains(key))
      throw mt::IoError(name + ": has no \"" + key +
                        "\" (a Decathlon dataset.json names its labels, modality and training "
                        "cases)");
  Description d;
  d.classes = numbered_names(doc["labels"], name + ": \"labels\"");
  d.modalities = numbered_names(doc["modality"], name + ": \"modality\"");
  if (d.classes.size() < 2)
    throw mt::IoError(name +
                      ": \"labels\" names one class; a segmentation needs the background "
                      "(0) and at least one more");
  const json& training = doc["training"];
  if (!training.is_array())
    throw mt::IoError(name + ": \"training\" must be a list of {\"image\": ..., \"label\": ...}");
  for (std::size_t i = 0; i < training.size(); ++i) {
    const std::string where = name + ": training[" + std::to_string(i) + "]";
    const json& entry = training[i];
    if (!entry.is_object() || !entry.contains("image") || !entry.contains("label"))
      throw mt::IoError(where + " must be {\"image\": ..., \"label\": ...}");
    d.training.push_back({images_of(folder, entry["image"], where + ".image"),
                          resolve(folder, entry["label"], where + ".label")});
  }
  const json test = doc.value("test", json::array());
  if (!test.is_array()) throw mt::IoError(name + ": \"test\" must be a list of scans");
  for (std::size_t i = 0; i < test.size(); ++i) {
    const std::string where = name + ": test[" + std::to_string(i) + "]";
    const json& entry =
        test[i].is_object() && test[i].contains("image") ? test[i]["image"] : test[i];
    d.test.push_back({images_of(folder, entry, where), ""});
  }
  return d;
}

/// The Decathlon description of `data` (a dataset.json, or a folder holding one); none when it is
/// neither.
inline std::optional<std::filesystem::path> find(const std::string& data) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(data) && fs::path(data).extension() == ".json") return fs::path(data);
  if (fs::is_directory(data) && fs::is_regular_file(fs::path(data) / "dataset.json"))
    return fs::path(data) / "dataset.json";
  return std::nullopt;
}

/// Throws naming the description and the entry unless every file it lists exists.
inline void check_files_exist(const std::vector<ScanFiles>& cases, const std::string& listed_in) {
  for (const auto& c : cases) {
    std::vector<std::string> files = c.images;
    if (!c.label.empty()) files.push_back(c.label);
    for (const auto& file : files)
      if (!std::filesystem::exists(file))
        throw mt::IoError(listed_in + " lists " + file + ": no such file");
  }
}

}  // namespace decathlon

/**
 * The pairs of `dir`, `validation_count` of them (chosen by `seed`) held out. Throws IoError naming
 * the folder when it is missing or holds no pair, a listed file is missing, or too few pairs are
 * left for training.
 */
inline Dataset read_dataset(const std::string& dir, std::int64_t validation_count,
                            std::uint64_t seed) {
  namespace fs = std::filesystem;
  Dataset d;
  std::vector<ScanFiles> pairs;
  if (const auto description = decathlon::find(dir)) {
    auto read = decathlon::read(*description);
    decathlon::check_files_exist(read.training, description->string());
    pairs = std::move(read.training);
    d.classes = std::move(read.classes);
    d.modalities = std::move(read.modalities);
  } else {
    if (!fs::is_directory(dir)) throw mt::IoError("--data " + dir + ": no such directory");
    const fs::path csv = fs::path(dir) / "pairs.csv";
    pairs = fs::exists(csv) ? pairs::read_pairs_csv(csv) : pairs::find_lits_pairs(dir);
    decathlon::check_files_exist(pairs, "--data " + dir);
  }
  if (pairs.empty())
    throw mt::IoError("--data " + dir +
                      ": no image/label pairs; expected a Decathlon dataset.json, LiTS names "
                      "(volume-N.nii[.gz] with segmentation-N.nii[.gz]) or a pairs.csv with "
                      "\"image,label\" per line");
  if (validation_count >= static_cast<std::int64_t>(pairs.size()))
    throw mt::Error("--validation-volumes " + std::to_string(validation_count) + ": --data " + dir +
                    " has " + std::to_string(pairs.size()) +
                    " pairs; hold out fewer so that some are left for training");
  // A seeded shuffle decides which pairs are held out; the rest train, in the folder's order.
  const auto order = seeded_order(pairs.size(), mt::RandomStream(seed, "validation-split"));
  std::vector<bool> held_out(pairs.size(), false);
  for (std::int64_t k = 0; k < validation_count; ++k) held_out[order[std::size_t(k)]] = true;
  d.seed = seed;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    (held_out[i] ? d.validation : d.train).push_back(pairs[i]);
  return d;
}

}  // namespace unet3d
