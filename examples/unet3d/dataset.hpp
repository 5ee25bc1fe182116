#pragma once
// A folder of CT scans with their label volumes: LiTS names (volume-N.nii[.gz] beside
// segmentation-N.nii[.gz], as the seeds' liver-tumour data come) or a pairs.csv listing
// "image,label" per line. A seeded split holds some pairs out for validation; the training pairs
// are visited in a fresh seeded order every epoch.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

struct ScanFiles {
  std::string image, label;
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
    pairs.push_back({resolve(image), resolve(label)});
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
    pairs.push_back({image, label});
  }
  return pairs;
}

}  // namespace pairs

/**
 * The pairs of `dir`, `validation_count` of them (chosen by `seed`) held out. Throws IoError naming
 * the folder when it is missing or holds no pair, a listed file is missing, or too few pairs are
 * left for training.
 */
inline Dataset read_dataset(const std::string& dir, std::int64_t validation_count,
                            std::uint64_t seed) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw mt::IoError("--data " + dir + ": no such directory");
  const fs::path csv = fs::path(dir) / "pairs.csv";
  std::vector<ScanFiles> pairs =
      fs::exists(csv) ? pairs::read_pairs_csv(csv) : pairs::find_lits_pairs(dir);
  if (pairs.empty())
    throw mt::IoError("--data " + dir +
                      ": no image/label pairs; expected LiTS names (volume-N.nii[.gz] with "
                      "segmentation-N.nii[.gz]) or a pairs.csv with \"image,label\" per line");
  for (const auto& p : pairs)
    for (const auto& file : {p.image, p.label})
      if (!fs::exists(file)) throw mt::IoError("--data " + dir + ": " + file + ": no such file");
  if (validation_count >= static_cast<std::int64_t>(pairs.size()))
    throw mt::Error("--validation-volumes " + std::to_string(validation_count) + ": --data " + dir +
                    " has " + std::to_string(pairs.size()) +
                    " pairs; hold out fewer so that some are left for training");
  // A seeded shuffle decides which pairs are held out; the rest train, in the folder's order.
  const auto order = seeded_order(pairs.size(), mt::RandomStream(seed, "validation-split"));
  std::vector<bool> held_out(pairs.size(), false);
  for (std::int64_t k = 0; k < validation_count; ++k) held_out[order[std::size_t(k)]] = true;
  Dataset d;
  d.seed = seed;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    (held_out[i] ? d.validation : d.train).push_back(pairs[i]);
  return d;
}

}  // namespace unet3d
