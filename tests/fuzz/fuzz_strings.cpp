// libFuzzer target: the strings people write — shapes ("batch:2, x:256"), mesh shapes
// ("rows:2; cols:4"), layouts ("x:rows"), layout schedules ("x:p | channels:p", the U-Net's
// --layouts), dim name lists and memory sizes ("2GiB") — and a tensor layout made of the first
// three lines of the input. Any string parses, or is one of meshtensor's errors. Where it parses:
// written out and parsed again it is the same, and the blocks of a tensor layout tile its shape.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/core/byte_size.hpp>
#include <meshtensor/core/dim_names.hpp>
#include <meshtensor/core/layout_schedule.hpp>
#include <meshtensor/core/tensor_layout.hpp>

#include "fuzz_support.hpp"

namespace mt = meshtensor;
using mt::fuzz::require;

namespace {

// Calls parse(); an mt::Error is an answer, anything else escapes to libFuzzer as a bug.
template <class Parse>
void parse_or_refuse(Parse&& parse) {
  try {
    parse();
  } catch (const mt::Error&) {
  }
}

// `name:size, ...`: the syntax Shape and MeshShape parse (their to_string prints [name=size]).
template <class Entries>
std::string pairs_text(const Entries& entries) {
  std::string text;
  for (const auto& e : entries)
    text += (text.empty() ? "" : ", ") + e.name + ":" + std::to_string(e.size);
  return text;
}

void check_shape(const std::string& text) {
  const mt::Shape shape(text);
  require(mt::Shape(pairs_text(shape)) == shape, "a shape written out parses to itself");
  std::int64_t product = 1;
  for (const auto& dim : shape) {
    require(dim.size >= 1, "a dim's size is positive");
    product *= dim.size;  // checked at construction to fit
  }
  require(shape.num_elements() == product, "a shape's elements are its sizes' product");
}

void check_mesh(const std::string& text) {
  const mt::MeshShape mesh(text);
  require(mt::MeshShape(pairs_text(mesh)) == mesh, "a mesh written out parses to itself");
  const int processors = mesh.num_processors();
  require(processors >= 1, "a mesh has a processor");
  for (int p : {0, processors / 2, processors - 1})
    require(mesh.processor_of(mesh.coord_of(p)) == p, "a processor's coordinates lead back to it");
}

void check_layout(const std::string& text) {
  const mt::Layout layout(text);
  require(mt::Layout(layout.to_string()) == layout, "a layout written out parses to itself");
}

void check_schedule(const std::string& text) {
  const mt::LayoutSchedule schedule(text);
  require(mt::LayoutSchedule(schedule.to_string()) == schedule,
          "a layout schedule written out parses to itself");
}

void check_dim_names(const std::string& text) {
  const mt::DimNames names(text);
  std::string joined;
  for (const auto& n : names) joined += (joined.empty() ? "" : "; ") + n;
  require(mt::DimNames(joined).names() == names.names(),
          "dim names written out parse to themselves");
}

void check_bytes(const std::string& text) {
  const double bytes = mt::parse_bytes(text, "--memory-per-processor");
  require(std::isfinite(bytes) && bytes > 0, "a memory size is a finite number of bytes above 0");
  (void)mt::format_bytes(bytes);
}

// Along each split dim the blocks of the processors at coordinates 0, 1, ... of its mesh axis
// follow each other from 0 to the dim's size; replicated dims are whole everywhere.
void check_tiling(const mt::TensorLayout& t) {
  const mt::MeshShape& mesh = t.mesh_shape();
  for (std::size_t d = 0; d < t.rank(); ++d) {
    const std::int64_t size = t.shape()[d].size;
    const auto axis = t.mesh_axis_of(d);
    if (!axis) {
      require(t.block(0).ranges[d] == mt::Range{0, size}, "a replicated dim is whole");
      continue;
    }
    const int parts = mesh[*axis].size;
    if (parts > 4096) continue;  // the run stays fast
    mt::MeshCoord coord(mesh.rank(), 0);
    std::int64_t next = 0;
    for (int c = 0; c < parts; ++c) {
      coord[*axis] = c;
      const mt::Range r = t.block(coord).ranges[d];
      require(r.begin == next && r.end >= r.begin && r.end <= size, "blocks follow each other");
      next = r.end;
    }
    require(next == size, "the blocks along a dim cover it");
  }
}

void check_tensor_layout(const std::string& shape, const std::string& mesh,
                         const std::string& layout) {
  const mt::TensorLayout t{mt::Shape(shape), mt::MeshShape(mesh), mt::Layout(layout)};
  check_tiling(t);
  require(mt::TensorLayout(t.shape(), t.mesh_shape(), t.layout()) == t,
          "a tensor layout's own rules give it back");
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (out.size() < 3) {
    const std::size_t end = text.find('\n', start);
    out.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  out.resize(3);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse_or_refuse([&] { check_shape(text); });
  parse_or_refuse([&] { check_mesh(text); });
  parse_or_refuse([&] { check_layout(text); });
  parse_or_refuse([&] { check_schedule(text); });
  parse_or_refuse([&] { check_dim_names(text); });
  parse_or_refuse([&] { check_bytes(text); });
  const auto parts = lines(text);
  parse_or_refuse([&] { check_tensor_layout(parts[0], parts[1], parts[2]); });
  return 0;
}
