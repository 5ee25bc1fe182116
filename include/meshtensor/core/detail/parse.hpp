#pragma once
// The Mesh-TensorFlow string syntax shared by shapes, mesh shapes and layouts:
// `name:value` pairs separated by ',' or ';', surrounded by optional white space.

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor::detail {

inline std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

// A name is what a C identifier allows: a letter or '_' first, then letters, digits or '_'.
inline bool is_valid_name(std::string_view name) {
  if (name.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(name.front())) || name.front() == '_'))
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// Splits on ',' and ';' and trims each piece. An empty or all-blank text yields no pieces; an empty
// piece between separators is kept so that the caller can report it.
inline std::vector<std::string_view> split_list(std::string_view text) {
  std::vector<std::string_view> pieces;
  if (trim(text).empty()) return pieces;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',' || text[i] == ';') {
      pieces.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  // A trailing separator ("x:2;") is common in hand-written strings; accept it.
  if (!pieces.empty() && pieces.back().empty()) pieces.pop_back();
  return pieces;
}

// Parses `name:value` pairs; `what` ("shape", "mesh shape", "layout") and `example` go into errors.
inline std::vector<std::pair<std::string, std::string>> parse_pairs(std::string_view text,
                                                                    std::string_view what,
                                                                    std::string_view example) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (auto piece : split_list(text)) {
    auto colon = piece.find(':');
    auto fail = [&](const std::string& why) {
      throw ParseError("cannot parse " + std::string(what) + " " + quote(text) + ": " + why +
                       "; expected name:value pairs separated by ',' or ';', e.g. " +
                       quote(example));
    };
    if (piece.empty()) fail("empty entry between separators");
    if (colon == std::string_view::npos) fail("entry " + quote(piece) + " has no ':'");
    auto name = trim(piece.substr(0, colon));
    auto value = trim(piece.substr(colon + 1));
    if (!is_valid_name(name))
      fail("entry " + quote(piece) + " has name " + quote(name) +
           ", which is not a name (a letter or '_', then letters, digits or '_')");
    if (value.empty()) fail("entry " + quote(piece) + " has no value after ':'");
    pairs.emplace_back(std::string(name), std::string(value));
  }
  return pairs;
}

// Parses a positive decimal size; `context` names the entry in the error.
inline std::int64_t parse_size(std::string_view value, std::string_view text, std::string_view what,
                               std::string_view name) {
  std::int64_t result = 0;
  // At most 18 digits fit 64 bits; checked before the loop, which would overflow on a 19th.
  bool ok = !value.empty() && value.size() <= 18;
  for (std::size_t i = 0; ok && i < value.size(); ++i) {
    ok = std::isdigit(static_cast<unsigned char>(value[i])) != 0;
    if (ok) result = result * 10 + (value[i] - '0');
  }
  if (!ok)
    throw ParseError("cannot parse " + std::string(what) + " " + quote(text) + ": the size of " +
                     quote(name) + " is " + quote(value) + ", which is not a positive integer");
  return result;
}

}  // namespace meshtensor::detail
