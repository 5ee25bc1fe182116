#pragma once
// NumPy .npy files (format 1.0-3.0, little-endian, C order): whole arrays for checkpoints and small
// data, and one block of a large array, so that each processor reads only its own part. Files are
// written to a temporary name and renamed, so a reader never sees half a file.

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/io/durable_file.hpp"
#include "meshtensor/kernels/copy.hpp"
#include "meshtensor/kernels/transfer.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor {

namespace npy {

template <class T>
constexpr const char* descr() {
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, double>)
    return "<f8";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "<i4";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "<i8";
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return "|u1";
  else
    static_assert(sizeof(T) == 0, "no .npy type for this element type");
}

/// What a .npy header says.
struct Header {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::size_t data_offset = 0;  // bytes before the first element
};

namespace detail {
inline std::string field(const std::string& dict, const std::string& key, const std::string& path) {
  const auto at = dict.find("'" + key + "'");
  if (at == std::string::npos)
    throw IoError(path + ": the .npy header has no '" + key + "' entry; the header is garbage");
  auto colon = dict.find(':', at);
  if (colon == std::string::npos)
    throw IoError(path + ": malformed .npy header entry '" + key + "'");
  // The value itself, from its first character: a search further on would read the next
  // entry's value instead ('descr': <f4, 'fortran_order' read as a type 'fortran_order').
  const auto value = dict.find_first_not_of(' ', colon + 1);
  return value == std::string::npos ? std::string() : dict.substr(value);
}
}  // namespace detail

/// Reads and checks the header; throws IoError naming the file for anything that is not .npy.
inline Header read_header(std::ifstream& in, const std::string& path) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw IoError(path + ": not a .npy file (the magic bytes are missing)");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_length = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) throw IoError(path + ": truncated .npy header");
    header_length = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) throw IoError(path + ": truncated .npy header");
    header_length = b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t(b[3]) << 24);
  } else {
    throw IoError(path + ": .npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_length > (1u << 20)) throw IoError(path + ": the .npy header length is implausible");
  std::string dict(header_length, '\0');
  if (!in.read(dict.data(), header_length)) throw IoError(path + ": truncated .npy header");
  Header h;
  h.data_offset = (major == 1 ? 10 : 12) + header_length;
  const std::string d = detail::field(dict, "descr", path);
  const auto q1 = d.find('\''), q2 = d.find('\'', q1 + 1);
  if (q1 != 0 || q2 == std::string::npos)
    throw IoError(path + ": malformed 'descr' in the .npy header");
  h.descr = d.substr(q1 + 1, q2 - q1 - 1);
  const std::string f = detail::field(dict, "fortran_order", path);
  if (f.rfind("True", 0) == 0)
    throw IoError(path + ": Fortran-ordered arrays are not supported; save with C order");
  if (f.rfind("False", 0) != 0)
    throw IoError(path + ": malformed 'fortran_order' in the .npy header (True or False)");
  const std::string s = detail::field(dict, "shape", path);
  const auto open = s.find('('), close = s.find(')');
  if (open != 0 || close == std::string::npos)
    throw IoError(path + ": malformed 'shape' in the .npy header");
  std::string number;
  for (std::size_t i = open + 1; i <= close; ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      number += c;
    } else if (c == ',' || c == ')') {
      if (number.size() > 18)  // past what 64 bits hold, and past any array
        throw IoError(path + ": the .npy header's shape has a size of " + number +
                      ", more than 64 bits count");
      if (!number.empty()) h.shape.push_back(std::stoll(number));
      number.clear();
    } else if (c != ' ' && c != 'L') {
      throw IoError(path + ": malformed 'shape' in the .npy header");
    }
  }
  return h;
}

/// `path` opened to read; an IoError naming it when it is missing, unreadable, or not a regular
/// file (a FIFO would wait for a writer, a directory reads as empty).
inline std::ifstream open_for_reading(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) throw IoError(path + ": no such file");
  if (!S_ISREG(info.st_mode))
    throw IoError(path + ": not a regular file (a directory, FIFO or device); name a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open for reading");
  return in;
}

inline Header read_header(const std::string& path) {
  std::ifstream in = open_for_reading(path);
  return read_header(in, path);
}

template <class T>
void check_type(const Header& h, const std::string& path) {
  if (h.descr != descr<T>())
    throw IoError(path + ": holds elements of type '" + h.descr + "' but '" + descr<T>() +
                  "' was expected");
}

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/// The bytes of the file its header promises (header and data); an IoError naming the file when
/// they pass 64 bits.
template <class T>
std::uint64_t promised_bytes(const Header& h, const std::string& path) {
  std::optional<std::uint64_t> bytes = sizeof(T);
  for (const std::int64_t size : h.shape)
    if (bytes) bytes = meshtensor::detail::checked_product(*bytes, std::uint64_t(size));
  if (bytes && *bytes > std::numeric_limits<std::uint64_t>::max() - h.data_offset) bytes.reset();
  if (!bytes)
    throw IoError(path + ": its header's shape " + shape_text(h.shape) +
                  " holds more bytes than 64 bits count");
  // Strides multiply the sizes after each axis, zeros or not: an empty array of shape
  // (0, 10^17, 10^17) promises no data, but its strides overflowed (found by tests/fuzz).
  std::optional<std::int64_t> strides = 1;
  for (const std::int64_t size : h.shape)
    if (strides)
      strides = meshtensor::detail::checked_product(*strides, std::max<std::int64_t>(size, 1));
  if (!strides)
    throw IoError(path + ": its header's shape " + shape_text(h.shape) +
                  " has sizes whose product passes 64 bits");
  return h.data_offset + *bytes;
}

/// Refuses a file whose size is not what its header promises, before anything is allocated for it.
template <class T>
void check_file_size(std::istream& in, const Header& h, const std::string& path) {
  const std::uint64_t promised = promised_bytes<T>(h, path);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size != promised)
    throw IoError(path + ": is " + std::to_string(size) + " bytes, but its header promises " +
                  std::to_string(promised) +
                  (size < promised ? " (truncated or corrupted)" : " (data after it)"));
  in.seekg(static_cast<std::streamoff>(h.data_offset));
}

/// Runs `allocate` for the file `path`; an error that does not name the file (a block over
/// MESHTENSOR_MAX_BLOCK_BYTES, memory the system refuses) comes out as an IoError that does.
template <class Allocate>
auto naming_the_file(const std::string& path, Allocate&& allocate) -> decltype(allocate()) {
  try {
    return allocate();
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(path + ": " + e.what());
  } catch (const std::bad_alloc&) {
    throw IoError(path + ": not enough memory to read its data");
  }
}

/// Refuses a NaN or infinite element, as the NIfTI reader refuses such a voxel: it would spread
/// through every computation that reads it. `index_of(i)` is the index of values[i] in the file.
template <class T, class IndexOf>
void refuse_nonfinite(const T* values, std::int64_t count, const std::string& path,
                      IndexOf&& index_of) {
  if constexpr (std::is_floating_point_v<T>)
    for (std::int64_t i = 0; i < count; ++i)
      if (!std::isfinite(values[i])) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", double(values[i]));
        throw IoError(path + ": element " + shape_text(index_of(i)) + " is " + text +
                      "; meshtensor reads finite values only (NaN and infinity are refused)");
      }
}

/// The index of element `flat` of an array of `shape` in C order.
inline std::vector<std::int64_t> index_in(const std::vector<std::int64_t>& shape,
                                          std::int64_t flat) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

/// The whole array, in the host's memory; the file must hold exactly the data its header promises,
/// and finite values where they are floats.
template <class T>
xt::xarray<T> read(const std::string& path) {
  std::ifstream in = open_for_reading(path);
  const Header h = read_header(in, path);
  check_type<T>(h, path);
  check_file_size<T>(in, h, path);
  std::vector<std::size_t> shape(h.shape.begin(), h.shape.end());
  xt::xarray<T> out = naming_the_file(path, [&] { return xt::xarray<T>::from_shape(shape); });
  const std::size_t bytes = out.size() * sizeof(T);
  if (!in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes)))
    throw IoError(path + ": could not read the " + std::to_string(bytes) + " bytes of its data");
  refuse_nonfinite(out.data(), std::int64_t(out.size()), path,
                   [&](std::int64_t i) { return index_in(h.shape, i); });
  return out;
}

/// One block of the array (global index ranges per axis), read row by row without loading the rest,
/// into the calling processor's memory; float values must be finite.
template <class T>
Array<T> read_block(const std::string& path, const Block& block) {
  std::ifstream in = open_for_reading(path);
  const Header h = read_header(in, path);
  check_type<T>(h, path);
  if (h.shape.size() != block.ranges.size())
    throw IoError(path + ": holds an array of shape " + shape_text(h.shape) + " but one with " +
                  std::to_string(block.ranges.size()) + " axes was expected");
  for (std::size_t d = 0; d < h.shape.size(); ++d)
    if (block.ranges[d].begin < 0 || block.ranges[d].end > h.shape[d])
      throw IoError(path + ": block outside the array of shape " + shape_text(h.shape));
  check_file_size<T>(in, h, path);
  std::vector<std::size_t> sizes;
  for (const auto& r : block.ranges) sizes.push_back(static_cast<std::size_t>(r.size()));
  Array<T> out = naming_the_file(path, [&] { return Array<T>::from_shape(sizes); });
  if (out.size() == 0 || out.space() == MemorySpace::none) return out;  // none: a plan's block
  std::vector<T> staging;  // the host reads the file: see writable_on_host
  T* into = writable_on_host(out, staging);
  // Row by row: the last axis is contiguous in the file, the others are walked like an odometer.
  const std::size_t rank = h.shape.size();
  std::vector<std::int64_t> strides(rank, 1);
  for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * h.shape[d];
  const std::int64_t row = rank ? block.ranges[rank - 1].size() : 1;
  const std::int64_t rows = static_cast<std::int64_t>(out.size()) / row;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t offset = rank ? block.ranges[rank - 1].begin : 0, rest = r;
    for (std::size_t d = rank ? rank - 1 : 0; d-- > 0;) {
      offset += (block.ranges[d].begin + rest % block.ranges[d].size()) * strides[d];
      rest /= block.ranges[d].size();
    }
    in.seekg(static_cast<std::streamoff>(h.data_offset + offset * sizeof(T)));
    if (!in.read(reinterpret_cast<char*>(into + r * row),
                 static_cast<std::streamsize>(row * sizeof(T))))
      throw IoError(path + ": read failed inside the data");
    refuse_nonfinite(into + r * row, row, path,
                     [&](std::int64_t i) { return index_in(h.shape, offset + i); });
  }
  written_on_host(staging, out);
  return out;
}

/// The header of a version 1.0 .npy file for elements T and `shape`, padded so that the data
/// starts at a multiple of 64 bytes.
template <class T>
std::string header(const std::vector<std::int64_t>& shape) {
  std::string dict = "{'descr': '" + std::string(descr<T>()) +
                     "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

/// Writes `array` (any row-major xtensor container) to `path` durably (io/durable_file.hpp):
/// through a temporary file in the same directory, flushed to the disk, and a rename.
template <class Container>
void write(const std::string& path, const Container& array) {
  using T = typename Container::value_type;
  const std::string head =
      header<T>(std::vector<std::int64_t>(array.shape().begin(), array.shape().end()));
  io::write_durably(path, head, array.data(), array.size() * sizeof(T));
}

}  // namespace npy
}  // namespace meshtensor
