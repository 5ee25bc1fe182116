#pragma once
// Draws who owns what: one row per processor with its mesh coordinates and its block of every dim.

#include <algorithm>
#include <string>
#include <vector>

#include "meshtensor/core/tensor_layout.hpp"

namespace meshtensor {

/**
 * A table of every processor's block, e.g. for `[x=10@rows, y=6@cols]` on `rows:2; cols:2`:
 * ```
 * processor  rows  cols  x       y
 *         0     0     0  [0,5)   [0,3)
 *         1     0     1  [0,5)   [3,6)
 *         2     1     0  [5,10)  [0,3)
 *         3     1     1  [5,10)  [3,6)
 * ```
 */
inline std::string ownership_table(const TensorLayout& layout) {
  const auto& mesh = layout.mesh_shape();
  const auto& shape = layout.shape();
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"processor"};
  for (const auto& axis : mesh) header.push_back(axis.name);
  for (const auto& dim : shape) header.push_back(dim.name);
  rows.push_back(header);
  for (int p = 0; p < mesh.num_processors(); ++p) {
    std::vector<std::string> row{std::to_string(p)};
    for (int c : mesh.coord_of(p)) row.push_back(std::to_string(c));
    for (const auto& r : layout.block(p).ranges)
      row.push_back("[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")");
    rows.push_back(row);
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  // Numbers (processor and coordinates) align right, ranges and dim names left.
  const std::size_t numeric_columns = 1 + mesh.rank();
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::string line;
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      const auto& cell = rows[r][c];
      const std::string pad(width[c] - cell.size(), ' ');
      const bool right = c < numeric_columns && r > 0;
      line += (c ? "  " : "") + (right ? pad + cell : cell + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace meshtensor
