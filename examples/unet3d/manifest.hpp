#pragma once
// A checkpoint's manifest checked against its schema before anything in it is used: every key,
// its type and its range, tensor files that are plain names inside the checkpoint's directory,
// and a `latest` that names a checkpoint directory beside it. A manifest edited by hand, damaged
// or crafted is an IoError naming the file, the key and what would be valid, never a missing key
// read as undefined behaviour or a file read from elsewhere.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include <meshtensor/core/error.hpp>

namespace unet3d {

namespace mt = meshtensor;

/// The checks of one manifest file, each naming `path` and the key in error.
class ManifestSchema {
 public:
  using json = nlohmann::json;

  explicit ManifestSchema(std::string path) : path_(std::move(path)) {}

  /// The member `key` of the object `object` (at `where`), which must be there.
  const json& member(const json& object, const std::string& where, const std::string& key) const {
    if (!object.is_object()) refuse(where, object, "an object");
    const auto found = object.find(key);
    if (found == object.end()) throw mt::IoError(path_ + ": " + where + " has no \"" + key + "\"");
    return *found;
  }

  /// An integer in [low, high].
  std::int64_t integer(const json& value, const std::string& where, std::int64_t low,
                       std::int64_t high) const {
    const auto refuse_it = [&] {
      refuse(where, value,
             "an integer from " + std::to_string(low) + " to " + std::to_string(high));
    };
    if (!value.is_number_integer()) refuse_it();
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t(high)) refuse_it();
    const auto n = value.get<std::int64_t>();
    if (n < low || n > high) refuse_it();
    return n;
  }

  /// An integer of 0 or more (64 bits unsigned).
  void unsigned_integer(const json& value, const std::string& where) const {
    if (!value.is_number_unsigned() &&
        !(value.is_number_integer() && value.get<std::int64_t>() >= 0))
      refuse(where, value, "an integer of 0 or more");
  }

  /// A finite number above zero.
  void positive(const json& value, const std::string& where) const {
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0)
      refuse(where, value, "a finite number above 0");
  }

  /// One of `valid`.
  void one_of(const json& value, const std::string& where,
              std::initializer_list<const char*> valid) const {
    std::string names;
    for (const char* name : valid) {
      if (value.is_string() && value.get<std::string>() == name) return;
      names += std::string(names.empty() ? "" : ", ") + "\"" + name + "\"";
    }
    refuse(where, value, "one of " + names);
  }

  /// A non-empty string.
  const std::string& text(const json& value, const std::string& where) const {
    if (!value.is_string() || value.get_ref<const std::string&>().empty())
      refuse(where, value, "a non-empty string");
    return value.get_ref<const std::string&>();
  }

  /// An array of `count` elements (any count when 0), each checked by `each(element, where)`.
  template <class Each>
  void array(const json& value, const std::string& where, std::size_t count, Each&& each) const {
    if (!value.is_array() || (count && value.size() != count))
      refuse(where, value,
             count ? "an array of " + std::to_string(count) : std::string("an array"));
    for (std::size_t i = 0; i < value.size(); ++i)
      each(value[i], where + "[" + std::to_string(i) + "]");
  }

  [[noreturn]] void refuse(const std::string& where, const json& value,
                           const std::string& valid) const {
    std::string shown = value.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    throw mt::IoError(path_ + ": " + where + " is " + shown + "; it must be " + valid);
  }

 private:
  std::string path_;
};

/// A file or directory name that stays where it is put: no separators, not "." or "..", and no
/// control characters (a NUL ends the name the system sees: "checkpoint-000001\0x" opened the
/// directory checkpoint-000001 as the manifest; found by tests/fuzz/fuzz_manifest).
inline bool plain_name(const std::string& name) {
  for (const char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

/// The flags a checkpoint's model was built with, as the writer (model_flags) writes them.
inline void check_model_flags(const ManifestSchema& s, const nlohmann::json& flags) {
  const std::string at = "flags";
  s.integer(s.member(flags, at, "depth"), at + ".depth", 1, 6);
  s.integer(s.member(flags, at, "channels"), at + ".channels", 1, 1 << 16);
  s.one_of(s.member(flags, at, "norm"), at + ".norm", {"batch", "instance", "group", "none"});
  s.unsigned_integer(s.member(flags, at, "seed"), at + ".seed");
  const auto optional = [&](const char* key, auto&& check) {
    if (flags.contains(key)) check(flags[key], at + "." + key);
  };
  const auto positive_integer = [&](const nlohmann::json& v, const std::string& where) {
    s.integer(v, where, 1, INT64_MAX);
  };
  // The task (task.hpp): class names (before tasks, the count 3), the input channels, and a
  // weight per class.
  std::size_t classes = 3;
  optional("classes", [&](const auto& v, const std::string& w) {
    if (v.is_array()) {
      if (v.size() < 2 || v.size() > 1000) s.refuse(w, v, "a list of 2 to 1000 class names");
      s.array(v, w, 0, [&](const auto& e, const std::string& we) { s.text(e, we); });
      classes = v.size();
    } else {
      s.integer(v, w, 3, 3);
    }
  });
  optional("inputs", [&](const auto& v, const std::string& w) {
    if (!v.is_array() || v.empty() || v.size() > 1000)
      s.refuse(w, v, "a list of 1 to 1000 input channels");
    s.array(v, w, 0, [&](const auto& e, const std::string& we) {
      s.text(s.member(e, we, "modality"), we + ".modality");
      if (!e.contains("window")) return;
      const auto& window = e["window"];
      s.array(window, we + ".window", 2, [&](const auto& bound, const std::string& wb) {
        if (!bound.is_number() || !std::isfinite(bound.template get<double>()))
          s.refuse(wb, bound, "a finite number of HU");
      });
      if (!(window[0].template get<double>() < window[1].template get<double>()))
        s.refuse(we + ".window", window, "[low, high] with low below high");
    });
  });
  optional("size",
           [&](const auto& v, const std::string& w) { s.array(v, w, 3, positive_integer); });
  optional("batch", positive_integer);
  optional("steps", positive_integer);
  optional("lr", [&](const auto& v, const std::string& w) { s.positive(v, w); });
  optional("class_weights", [&](const auto& v, const std::string& w) {
    s.array(v, w, classes, [&](const auto& e, const std::string& we) { s.positive(e, we); });
  });
  optional("data", [&](const auto& v, const std::string& w) { s.text(v, w); });
  optional("biases_before_norm", [&](const auto& v, const std::string& w) {
    if (!v.is_boolean()) s.refuse(w, v, "true or false");
  });
  optional("augment", [&](const auto& v, const std::string& w) { s.text(v, w); });
  optional("spacing", [&](const auto& v, const std::string& w) {  // 0: each scan's own
    s.array(v, w, 3, [&](const auto& e, const std::string& we) {
      if (!e.is_number() || !std::isfinite(e.template get<double>()) ||
          e.template get<double>() < 0)
        s.refuse(we, e, "a finite number, 0 or above");
    });
  });
  optional("resize", [&](const auto& v, const std::string& w) {  // 0: the scan's own
    s.array(v, w, 3, [&](const auto& e, const std::string& we) { s.integer(e, we, 0, INT64_MAX); });
  });
}

/// Throws an IoError naming `path` unless `manifest` is a version-1 unet3d checkpoint manifest.
inline void check_manifest(const nlohmann::json& manifest, const std::string& path) {
  const ManifestSchema s(path);
  s.one_of(s.member(manifest, "the manifest", "format"), "format",
           {"meshtensor-unet3d-checkpoint-1"});
  s.integer(s.member(manifest, "the manifest", "step"), "step", 0, INT64_MAX);
  const auto& optimizer = s.member(manifest, "the manifest", "optimizer");
  s.one_of(s.member(optimizer, "optimizer", "type"), "optimizer.type", {"adam"});
  if (optimizer.contains("steps"))  // Adam's step count; older checkpoints lack it
    s.integer(optimizer["steps"], "optimizer.steps", 0, INT64_MAX);
  check_model_flags(s, s.member(manifest, "the manifest", "flags"));
  if (manifest.contains("validation_mean_dice")) {  // what made it the best checkpoint
    const auto& dice = manifest["validation_mean_dice"];
    if (!dice.is_number() || !(dice.get<double>() >= 0 && dice.get<double>() <= 1))
      s.refuse("validation_mean_dice", dice, "a number from 0 to 1");
  }
  std::set<std::string> names;
  s.array(
      s.member(manifest, "the manifest", "tensors"), "tensors", 0,
      [&](const nlohmann::json& entry, const std::string& at) {
        if (!names.insert(s.text(s.member(entry, at, "name"), at + ".name")).second)
          s.refuse(at + ".name", entry["name"], "a name no other tensor has");
        const std::string& file = s.text(s.member(entry, at, "file"), at + ".file");
        if (!plain_name(file) || file.size() < 5 || file.compare(file.size() - 4, 4, ".npy"))
          s.refuse(at + ".file", entry["file"],
                   "the name of a .npy file inside the checkpoint's directory");
        const auto& dims = s.member(entry, at, "dims");
        s.array(dims, at + ".dims", 0, [&](const auto& d, const std::string& w) { s.text(d, w); });
        const auto& shape = s.member(entry, at, "shape");
        s.array(shape, at + ".shape", dims.size(),
                [&](const auto& n, const std::string& w) { s.integer(n, w, 1, INT64_MAX); });
        // array()'s count 0 takes any: dims [] with shape [4] passed (found by tests/fuzz).
        if (shape.size() != dims.size())
          s.refuse(at + ".shape", shape, "an array of " + std::to_string(dims.size()));
        s.one_of(s.member(entry, at, "dtype"), at + ".dtype", {"float32"});
        s.one_of(s.member(entry, at, "kind"), at + ".kind", {"parameter", "state", "optimizer"});
        if (entry.contains("crc32"))  // the file's CRC-32; older checkpoints kept none
          s.integer(entry["crc32"], at + ".crc32", 0, 0xffffffffLL);
      });
}

/// `text` with its control characters shown as '?': a NUL would end the message there.
inline std::string printable(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

/// The checkpoint directory `latest` (the file at `path`) names: a plain name beside it.
inline std::string checked_latest(const std::string& name, const std::string& path) {
  if (!plain_name(name) || name.rfind("checkpoint-", 0) != 0)
    throw mt::IoError(path + ": names \"" + printable(name) +
                      "\"; it must name a checkpoint-NNNNNN directory beside it");
  return name;
}

/// How deep a manifest's arrays and objects may nest: a manifest nests 3 deep. Printing a value
/// in an error recurses once per level, and 200000 levels (400 KB of brackets) overflowed the
/// stack (found by tests/fuzz/fuzz_manifest).
constexpr int most_manifest_depth = 32;

/// A parser callback (nlohmann::json::parse) that stops at nesting past most_manifest_depth.
inline nlohmann::json::parser_callback_t refuse_deep_nesting(const std::string& path) {
  return [path](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > most_manifest_depth)
      throw mt::IoError(path + ": arrays or objects nest more than " +
                        std::to_string(most_manifest_depth) +
                        " deep; a manifest nests 3 deep, a dataset.json 4");
    return true;
  };
}

/// The manifest of the checkpoint under `dir` that the file `pointer` names ("latest": the newest;
/// "best": the best by validation Dice), and the directory it lives in.
inline std::pair<nlohmann::json, std::filesystem::path> read_manifest(
    const std::string& dir, const std::string& pointer = "latest") {
  namespace fs = std::filesystem;
  using json = nlohmann::json;
  const fs::path latest = fs::path(dir) / pointer;
  std::ifstream in;
  std::error_code unreadable;  // a name too long, a directory not searchable: not a file
  if (fs::is_regular_file(latest, unreadable)) in.open(latest);
  if (!in.is_open())
    throw mt::IoError(dir + ": no checkpoint here (" + latest.string() + " is missing)");
  std::string name;
  std::getline(in, name);
  const fs::path where = fs::path(dir) / checked_latest(name, latest.string());
  const fs::path manifest_path = where / "manifest.json";
  // Only a regular file: a directory opens, then its read throws what is not an IoError.
  std::ifstream manifest_in;
  if (fs::is_regular_file(manifest_path, unreadable)) manifest_in.open(manifest_path);
  if (name.empty() || !manifest_in.is_open())
    throw mt::IoError(manifest_path.string() +
                      ": missing; the checkpoint is incomplete or corrupted");
  try {
    json manifest = json::parse(manifest_in, refuse_deep_nesting(manifest_path.string()));
    check_manifest(manifest, manifest_path.string());
    return {manifest, where};
  } catch (const json::exception& e) {
    throw mt::IoError(manifest_path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace unet3d
