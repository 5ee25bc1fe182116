#pragma once
// NIfTI-1 and NIfTI-2 files (.nii, .nii.gz) through niftilib (Debian: libnifti2-dev; link
// meshtensor::nifti): the header, any box of voxels read without the rest of the file, and a
// volume written as a stream under a temporary name that becomes the file's name only once it is
// complete. Knows nothing of meshes: io/tensor_nifti.hpp splits volumes over processors with it.
//
// niftilib reports problems on stderr in its own words; it is kept quiet, and every problem is
// thrown as an IoError that names the file and what is wrong with it.

#include <sys/stat.h>

#include <nifti2_io.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/core/block.hpp"
#include "meshtensor/core/detail/checked.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/io/durable_file.hpp"
#include "meshtensor/io/orientation.hpp"

namespace meshtensor::nifti {

namespace detail {

struct ImageDeleter {
  void operator()(nifti_image* image) const { nifti_image_free(image); }
};
using Image = std::unique_ptr<nifti_image, ImageDeleter>;

struct ZnzCloser {
  void operator()(znzFile f) const {
    if (f) Xznzclose(&f);
  }
};
using Stream = std::unique_ptr<std::remove_pointer_t<znzFile>, ZnzCloser>;

// Whether `s` ends with `tail` (lower case), in either case: scanners write SCAN.NII.GZ too.
inline bool ends_with(const std::string& s, const std::string& tail) {
  if (s.size() < tail.size()) return false;
  for (std::size_t i = 0; i < tail.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - tail.size() + i])) != tail[i])
      return false;
  return true;
}

// Calls f(Stored{}) with the C++ type of a voxel of `datatype`; false for types meshtensor does
// not read (complex, RGB, float128, bits).
template <class F>
bool with_stored_type(int datatype, F&& f) {
  switch (datatype) {
    case NIFTI_TYPE_UINT8:
      return f(std::uint8_t{}), true;
    case NIFTI_TYPE_INT8:
      return f(std::int8_t{}), true;
    case NIFTI_TYPE_INT16:
      return f(std::int16_t{}), true;
    case NIFTI_TYPE_UINT16:
      return f(std::uint16_t{}), true;
    case NIFTI_TYPE_INT32:
      return f(std::int32_t{}), true;
    case NIFTI_TYPE_UINT32:
      return f(std::uint32_t{}), true;
    case NIFTI_TYPE_INT64:
      return f(std::int64_t{}), true;
    case NIFTI_TYPE_UINT64:
      return f(std::uint64_t{}), true;
    case NIFTI_TYPE_FLOAT32:
      return f(float{}), true;
    case NIFTI_TYPE_FLOAT64:
      return f(double{}), true;
    default:
      return false;
  }
}

// The header's dim[0..3] (how many dims follow, then the first three sizes), in the file's byte
// order, which its sizeof_hdr tells (348 or 540 either way round).
inline std::array<std::int64_t, 4> raw_dims(const char* head, int version) {
  std::array<std::int64_t, 4> dims{};
  if (version == 2) {
    nifti_2_header h;
    std::memcpy(&h, head, sizeof h);
    if (h.sizeof_hdr != int(sizeof h)) nifti_swap_8bytes(4, h.dim);
    std::copy(h.dim, h.dim + 4, dims.begin());
  } else {
    nifti_1_header h;
    std::memcpy(&h, head, sizeof h);
    if (h.sizeof_hdr != int(sizeof h)) nifti_swap_2bytes(4, h.dim);
    std::copy(h.dim, h.dim + 4, dims.begin());
  }
  return dims;
}

// Checked before niftilib reads the header: it copies dim[1..dim[0]] into arrays of 8 without a
// bound (a NIfTI-2 header with dim[0] = 65539 overwrote its stack: found by tests/fuzz), and it
// silently makes sizes of 0 or less into 1, so a damaged header would read as another volume.
inline void check_raw_dims(const char* head, int version, const std::string& path) {
  const auto dims = raw_dims(head, version);
  if (dims[0] < 1 || dims[0] > 7)
    throw IoError(path + ": the header's dim[0] is " + std::to_string(dims[0]) +
                  "; a NIfTI image has 1 to 7 dims (damaged header)");
  for (int d = 1; d <= 3 && d <= dims[0]; ++d)
    if (dims[d] < 1)
      throw IoError(path + ": the header gives a dim of size " + std::to_string(dims[d]) +
                    " (dim[" + std::to_string(d) + "]); sizes are at least 1 (damaged header)");
}

// niftilib allocates each header extension at the size its header gives, up to the data's offset,
// before reading it (a damaged file of 691 bytes asked for 1.1 GiB: found by tests/fuzz). So each
// extension niftilib would accept must lie within the file's bytes: walked here, a chunk at a time.
inline void check_extensions(const std::string& path, bool gz, const char* head, int version) {
  std::int64_t header_bytes = 348, data_offset = 0;
  bool swapped = false;
  if (version == 2) {
    nifti_2_header h;
    std::memcpy(&h, head, sizeof h);
    swapped = h.sizeof_hdr != int(sizeof h);
    if (swapped) nifti_swap_8bytes(1, &h.vox_offset);
    header_bytes = sizeof h;
    data_offset = h.vox_offset;
  } else {
    nifti_1_header h;
    std::memcpy(&h, head, sizeof h);
    swapped = h.sizeof_hdr != int(sizeof h);
    if (swapped) nifti_swap_4bytes(1, &h.vox_offset);
    // A float: beyond int64's range (or NaN) it cannot be converted as it is.
    const float offset = h.vox_offset;
    data_offset = !(offset > 0)     ? 0
                  : offset >= 9e18f ? std::numeric_limits<std::int64_t>::max()
                                    : std::int64_t(offset);
  }
  Stream stream(znzopen(path.c_str(), "rb", gz ? 1 : 0));
  if (!stream) throw IoError(path + ": cannot open for reading");
  std::vector<char> chunk(1 << 16);
  // Reads `bytes` bytes, or fewer where the file ends (or zlib fails): how many.
  auto read = [&](std::int64_t bytes) {
    std::int64_t done = 0;
    while (done < bytes) {
      const std::size_t want = std::size_t(std::min<std::int64_t>(bytes - done, chunk.size()));
      const std::size_t got = znzread(chunk.data(), 1, want, stream.get());
      if (got == 0 || got > want) break;
      done += std::int64_t(got);
    }
    return done;
  };
  // The extender follows the header: its first byte says whether extensions follow.
  if (read(header_bytes) < header_bytes || read(4) < 4 || chunk[0] == 0) return;
  std::int64_t at = header_bytes + 4;
  // Without an offset past them, niftilib reads extensions as far as the file goes.
  const std::int64_t end =
      data_offset > at ? data_offset : std::numeric_limits<std::int64_t>::max();
  while (at <= end - 16) {
    std::int32_t sizes[2];
    if (read(8) < 8) return;
    std::memcpy(sizes, chunk.data(), sizeof sizes);
    if (swapped) nifti_swap_4bytes(2, sizes);
    const std::int64_t size = sizes[0];
    if (size < 16 || size % 16 != 0 || size > end - at) return;  // niftilib stops there too
    if (read(size - 8) < size - 8)
      throw IoError(path + ": the header's extension at byte " + std::to_string(at) + " is " +
                    std::to_string(size) +
                    " bytes long, past the end of the file (truncated or damaged)");
    at += size;
  }
}

inline std::string value_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.7g", value);  // a float's digits: what headers hold
  return text;
}

// Voxel spacings and offsets a scanner could have written, in millimetres: values far outside
// come from damaged headers, and the quaternion niftilib writes them back through loses them (a
// spacing of 1e-154 came back as 0: found by tests/fuzz/fuzz_nifti).
constexpr double least_spacing = 1e-6, most_spacing = 1e6, most_offset = 1e12;

// Voxel spacing and orientation come from the affine: a NaN or a zero column would spread into
// every resampled voxel. `which`: "sform" or "qform", where the affine came from.
inline void check_affine(const Affine& affine, const std::string& path, const char* which) {
  const std::string where = path + ": the header's voxel-to-world affine (" + which + ")";
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      if (!std::isfinite(affine[r][c]))
        throw IoError(where + " holds " + std::to_string(affine[r][c]) + "; it must be finite");
  for (int c = 0; c < 3; ++c) {
    const double spacing = std::hypot(affine[0][c], affine[1][c], affine[2][c]);
    if (spacing == 0)
      throw IoError(path + ": the header's voxel spacing along axis " + std::to_string(c) +
                    " is 0; it must be above 0");
    if (spacing < least_spacing || spacing > most_spacing)
      throw IoError(path + ": the header's voxel spacing along axis " + std::to_string(c) + " is " +
                    value_text(spacing) +
                    " mm; meshtensor reads spacings from 1e-06 to 1e+06 mm "
                    "(a damaged header?)");
  }
  for (int r = 0; r < 3; ++r)
    if (std::abs(affine[r][3]) > most_offset)
      throw IoError(where + " places voxel (0, 0, 0) " + value_text(affine[r][3]) +
                    " mm from the origin; meshtensor reads offsets up to 1e+12 mm (a damaged "
                    "header?)");
}

inline void quiet() {
  static const bool once = [] {
    nifti_set_debug_level(0);
    return true;
  }();
  (void)once;
}

}  // namespace detail

/// The voxel types meshtensor reads: the integer and real types of NIfTI, not complex or RGB.
inline bool readable_datatype(int datatype) {
  return detail::with_stored_type(datatype, [](auto) {});
}

/// Whether `path` names a NIfTI file meshtensor reads and writes: .nii or .nii.gz.
inline bool is_nifti_name(const std::string& path) {
  return detail::ends_with(path, ".nii") || detail::ends_with(path, ".nii.gz");
}

/// The NIfTI datatype code that stores T.
template <class T>
constexpr int datatype_of() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return NIFTI_TYPE_UINT8;
  if constexpr (std::is_same_v<T, std::int8_t>) return NIFTI_TYPE_INT8;
  if constexpr (std::is_same_v<T, std::int16_t>) return NIFTI_TYPE_INT16;
  if constexpr (std::is_same_v<T, std::uint16_t>) return NIFTI_TYPE_UINT16;
  if constexpr (std::is_same_v<T, std::int32_t>) return NIFTI_TYPE_INT32;
  if constexpr (std::is_same_v<T, std::uint32_t>) return NIFTI_TYPE_UINT32;
  if constexpr (std::is_same_v<T, std::int64_t>) return NIFTI_TYPE_INT64;
  if constexpr (std::is_same_v<T, std::uint64_t>) return NIFTI_TYPE_UINT64;
  if constexpr (std::is_same_v<T, float>) return NIFTI_TYPE_FLOAT32;
  if constexpr (std::is_same_v<T, double>) return NIFTI_TYPE_FLOAT64;
  static_assert(std::is_arithmetic_v<T>, "a NIfTI voxel is a number");
  return 0;
}

/// An open NIfTI file: what its header says, checked. Copies share the header.
struct File {
  std::string path;
  int version = 1;  // NIfTI-1 or NIfTI-2
  bool compressed = false;
  std::array<std::int64_t, 3> size{};  // voxels along the file's axes i, j, k
  std::int64_t volumes = 1;            // dim 4: channels (MRI sequences) or time points
  int datatype = 0;
  int bytes_per_voxel = 0;
  double slope = 1, intercept = 0;    // value = slope * stored + intercept
  Affine affine = identity_affine();  // the sform if the file has one, else the qform
  std::int64_t data_offset = 0;
  bool swapped = false;  // stored in the other byte order
  std::shared_ptr<const nifti_image> header;

  std::int64_t num_voxels() const { return size[0] * size[1] * size[2]; }
};

/**
 * Reads and checks the header of `path`. Throws IoError naming the file for a missing or unreadable
 * file, a name that is not .nii or .nii.gz, a header that is not NIfTI-1 or -2, a datatype that is
 * not a real number, fewer than 3 dims or more than one entry along dims 5 to 7 (a 4-D file holds
 * `volumes` 3-D volumes), and an uncompressed file shorter than its header promises.
 */
inline File open(const std::string& path) {
  detail::quiet();
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) throw IoError(path + ": no such file");
  if (!S_ISREG(info.st_mode)) throw IoError(path + ": not a regular file");
  if (!is_nifti_name(path))
    throw IoError(path + ": not a NIfTI file name; meshtensor reads .nii and .nii.gz");
  const bool gz = detail::ends_with(path, ".gz");

  // The first bytes, to tell a damaged file from a foreign one before niftilib parses it.
  int version = 0;
  {
    detail::Stream stream(znzopen(path.c_str(), "rb", gz ? 1 : 0));
    if (!stream) throw IoError(path + ": cannot open for reading");
    char head[540];
    // znzread gives (size_t)-1 when zlib fails.
    const std::size_t got = znzread(head, 1, sizeof head, stream.get());
    if (gz && (got == 0 || got > sizeof head))
      throw IoError(path + ": cannot decompress the header (truncated or corrupt .gz)");
    if (got < 348)
      throw IoError(path + ": " + std::to_string(got) +
                    " bytes, shorter than a NIfTI header (truncated)");
    version = nifti_header_version(head, got);
    if (version < 1)
      throw IoError(path +
                    ": not a NIfTI-1 or NIfTI-2 file (the header's size and magic are wrong)");
    if (version == 2 && got < sizeof(nifti_2_header))
      throw IoError(path + ": " + std::to_string(got) +
                    " bytes, shorter than a NIfTI-2 header (truncated)");
    detail::check_raw_dims(head, version, path);
    detail::check_extensions(path, gz, head, version);
  }
  detail::Image image(nifti_image_read(path.c_str(), 0));
  if (!image) throw IoError(path + ": the NIfTI header is damaged and cannot be read");

  File f;
  f.path = path;
  f.compressed = gz;
  f.version = version;
  f.datatype = image->datatype;
  f.bytes_per_voxel = image->nbyper;
  if (!readable_datatype(f.datatype))
    throw IoError(path + ": voxels of type " + nifti_datatype_to_string(f.datatype) +
                  " are not supported; meshtensor reads integers (uint8, int8, int16, uint16, "
                  "int32, uint32, int64, uint64) and reals (float32, float64)");
  const std::int64_t dims = image->dim[0];
  if (dims < 3)
    throw IoError(path + ": a " + std::to_string(dims) + "-D image; a volume has 3 dims");
  for (int d = 5; d <= dims && d <= 7; ++d)
    if (image->dim[d] > 1)
      throw IoError(path + ": a " + std::to_string(dims) + "-D image with " +
                    std::to_string(image->dim[d]) + " entries along dim " + std::to_string(d) +
                    "; meshtensor reads 3-D volumes, and 4-D files of volumes along dim 4");
  f.size = {image->nx, image->ny, image->nz};
  if (dims >= 4 && image->dim[4] > 1) f.volumes = image->dim[4];
  std::optional<std::int64_t> bytes = f.bytes_per_voxel;
  for (auto n : {f.size[0], f.size[1], f.size[2], f.volumes}) {
    if (n < 1) throw IoError(path + ": the header gives a dim of size " + std::to_string(n));
    if (bytes) bytes = meshtensor::detail::checked_product(*bytes, std::int64_t(n));
  }
  if (!bytes || *bytes > std::numeric_limits<std::int64_t>::max() - image->iname_offset)
    throw IoError(path + ": the header's " + std::to_string(f.size[0]) + " x " +
                  std::to_string(f.size[1]) + " x " + std::to_string(f.size[2]) +
                  " voxels hold more bytes than 64 bits count");
  if (image->scl_slope != 0 && std::isfinite(image->scl_slope)) {
    f.slope = image->scl_slope;
    f.intercept = std::isfinite(image->scl_inter) ? image->scl_inter : 0;
  }
  const nifti_dmat44& m = image->sform_code > 0 ? image->sto_xyz : image->qto_xyz;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) f.affine[r][c] = m.m[r][c];
  detail::check_affine(f.affine, path, image->sform_code > 0 ? "sform" : "qform");
  f.data_offset = image->iname_offset;
  f.swapped = image->byteorder != nifti_short_order();
  const auto needed = f.data_offset + f.volumes * f.num_voxels() * f.bytes_per_voxel;
  if (!gz && static_cast<std::int64_t>(info.st_size) < needed)
    throw IoError(path + ": " + std::to_string(info.st_size) + " bytes, but its header promises " +
                  std::to_string(needed) + " (truncated)");
  // Deflate expands at most 1032 times (zlib's figure): a header promising more than its .gz can
  // hold is refused now, before any processor allocates its block for voxels that are not there.
  const std::int64_t most = std::int64_t(1032) * std::int64_t(info.st_size) + 1024;
  if (gz && needed > most)
    throw IoError(path + ": its header promises " + std::to_string(needed) +
                  " bytes, more than a .gz of " + std::to_string(info.st_size) +
                  " bytes can hold (at most " + std::to_string(most) +
                  "); truncated or corrupt .gz");
  f.header = std::shared_ptr<const nifti_image>(image.release(), detail::ImageDeleter());
  return f;
}

namespace detail {

// Whether the integer `v` is a value of the integer type T.
template <class T, class Stored>
bool integer_fits(Stored v) {
  using limits = std::numeric_limits<T>;
  if constexpr (std::is_signed_v<Stored> == std::is_signed_v<T>)
    return v >= limits::min() && v <= limits::max();
  else if constexpr (std::is_signed_v<Stored>)
    return v >= 0 && std::make_unsigned_t<Stored>(v) <= limits::max();
  else
    return v <= std::make_unsigned_t<T>(limits::max());
}

// `value` as a T (integers rounded), or false where it is NaN, infinite, or out of T's range: a
// cast of such a value is undefined, and a wrapped label or an infinite intensity is garbage.
template <class T>
bool real_to_voxel(double value, T& out) {
  if (!std::isfinite(value)) return false;
  if constexpr (std::is_integral_v<T>) {
    const double rounded = std::round(value);
    // 2 * (max / 2 + 1) is max + 1, exact as a double for every integer type.
    const double past_max = 2.0 * double(std::numeric_limits<T>::max() / 2 + 1);
    if (!(rounded >= double(std::numeric_limits<T>::min()) && rounded < past_max)) return false;
    out = static_cast<T>(rounded);
  } else {
    if (std::abs(value) > double(std::numeric_limits<T>::max())) return false;
    out = static_cast<T>(value);
  }
  return true;
}

// A voxel that read_box refuses: its place in the run being converted, and its value.
struct BadVoxel {
  std::int64_t index = -1;  // -1: none
  double value = 0;
};

// Converts n stored voxels to T (value = slope * stored + intercept); the first one that is not
// a finite value of T is returned, not converted.
template <class Stored, class T>
BadVoxel convert(const void* raw, std::int64_t n, double slope, double intercept, T* out) {
  const auto* in = static_cast<const Stored*>(raw);
  const bool scaled = slope != 1 || intercept != 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<Stored> && std::is_integral_v<T>) {
      if (!scaled) {  // exact, even for 64-bit integers a double cannot hold
        if (!integer_fits<T>(in[i])) return {i, double(in[i])};
        out[i] = static_cast<T>(in[i]);
        continue;
      }
    }
    const double value = scaled ? slope * double(in[i]) + intercept : double(in[i]);
    if (!real_to_voxel(value, out[i])) return {i, value};
  }
  return {};
}

template <class T>
BadVoxel convert(int datatype, const void* raw, std::int64_t n, double slope, double intercept,
                 T* out) {
  BadVoxel bad;
  if (!with_stored_type(datatype, [&](auto stored) {
        bad = convert<decltype(stored)>(raw, n, slope, intercept, out);
      }))
    throw IoError("unsupported NIfTI datatype " + std::to_string(datatype));
  return bad;
}

template <class T>
const char* type_name() {
  if constexpr (std::is_floating_point_v<T>) return sizeof(T) == 4 ? "float32" : "float64";
  if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
  if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
  return "this element type";
}

inline std::string voxel_text(std::int64_t i, std::int64_t j, std::int64_t k) {
  return "(" + std::to_string(i) + ", " + std::to_string(j) + ", " + std::to_string(k) + ")";
}

// The refusal of voxel (i, j, k) holding `value`, read as T.
template <class T>
[[noreturn]] void refuse_voxel(const File& f, std::int64_t i, std::int64_t j, std::int64_t k,
                               double value) {
  const std::string scale = f.slope != 1 || f.intercept != 0
                                ? " (after the header's slope " + value_text(f.slope) +
                                      " and intercept " + value_text(f.intercept) + ")"
                                : "";
  if (!std::isfinite(value))
    throw IoError(f.path + ": voxel " + voxel_text(i, j, k) + " is " + value_text(value) + scale +
                  "; meshtensor reads finite voxels only (NaN and infinity are refused)");
  throw IoError(f.path + ": voxel " + voxel_text(i, j, k) + " is " + value_text(value) + scale +
                ", which " + type_name<T>() + " cannot hold");
}

// How many bytes of `f` can be read: its size, or what its .gz decompresses to before it ends or
// fails (decompressed again: this is only asked once a read has come up short).
inline std::int64_t readable_bytes(const File& f) {
  if (!f.compressed) {
    struct stat info;
    return ::stat(f.path.c_str(), &info) == 0 ? std::int64_t(info.st_size) : 0;
  }
  Stream stream(znzopen(f.path.c_str(), "rb", 1));
  if (!stream) return 0;
  std::vector<char> buffer(std::size_t(1) << 16);
  std::int64_t total = 0;
  while (true) {
    const std::size_t got = znzread(buffer.data(), 1, buffer.size(), stream.get());
    if (got == 0 || got > buffer.size()) return total;  // (size_t)-1: zlib failed here
    total += std::int64_t(got);
  }
}

// The refusal of a read of voxel (i, j, k), at byte `offset` of the (decompressed) file, that
// came up short: it names where the data end.
[[noreturn]] inline void refuse_short_read(const File& f, std::int64_t i, std::int64_t j,
                                           std::int64_t k, std::int64_t offset) {
  const std::int64_t end = readable_bytes(f);
  throw IoError(f.path + ": the data end at byte " + std::to_string(end) +
                (f.compressed ? " of the decompressed stream" : "") + ", before voxel " +
                voxel_text(i, j, k) + " at byte " + std::to_string(offset) +
                (f.compressed ? " (truncated or corrupt .gz)" : " (truncated)"));
}

}  // namespace detail

/// Throws IoError naming the file unless `volume` is one of its volumes (0 .. volumes - 1).
inline void check_volume(const File& f, std::int64_t volume) {
  if (volume < 0 || volume >= f.volumes)
    throw IoError(f.path + ": volume " + std::to_string(volume) +
                  " asked for, but the file holds " + std::to_string(f.volumes) + " (0 to " +
                  std::to_string(f.volumes - 1) + ")");
}

/**
 * Reads the voxels of `box` (ranges along the file's axes i, j, k), scaled by the file's slope and
 * intercept and converted to T (integers rounded). Calls `row(j, k, values)` for each row of the
 * box in file order, `values` holding box[0].size() voxels along i. Only the bytes of the box are
 * read from an uncompressed file (a .gz is decompressed up to the box's last byte). Throws IoError
 * naming the file when the data end early or do not decompress (with the byte where they end and
 * the voxel that needed more), and, by rule, when a voxel's value is NaN or infinite or does not
 * fit T (with the voxel's (i, j, k) index): such a value would spread through every computation
 * that reads it, and a cast of it is undefined. `volume` picks one volume of a 4-D file.
 */
template <class T, class Row>
void read_box(const File& f, const std::array<Range, 3>& box, Row&& row, std::int64_t volume = 0) {
  for (int a = 0; a < 3; ++a)
    if (box[a].begin < 0 || box[a].end > f.size[a] || box[a].end < box[a].begin)
      throw IoError(f.path + ": box outside the volume");
  check_volume(f, volume);
  if (box[0].empty() || box[1].empty() || box[2].empty()) return;
  detail::Stream stream(znzopen(f.path.c_str(), "rb", f.compressed ? 1 : 0));
  if (!stream) throw IoError(f.path + ": cannot open for reading");
  const std::int64_t ni = f.size[0], nj = f.size[1];
  // A whole row of i is contiguous with the next one: read the box's rows of a plane at once.
  const bool whole_rows = box[0].begin == 0 && box[0].end == ni;
  const std::int64_t rows_at_once = whole_rows ? box[1].size() : 1;
  const std::int64_t run = box[0].size() * rows_at_once;
  std::vector<unsigned char> raw(static_cast<std::size_t>(run * f.bytes_per_voxel));
  std::vector<T> values(static_cast<std::size_t>(run));
  int swap_size = 0, bytes = 0;
  nifti_datatype_sizes(f.datatype, &bytes, &swap_size);
  for (std::int64_t k = box[2].begin; k < box[2].end; ++k)
    for (std::int64_t j = box[1].begin; j < box[1].end; j += rows_at_once) {
      const std::int64_t voxel = box[0].begin + ni * (j + nj * k) + volume * f.num_voxels();
      const std::int64_t offset = f.data_offset + voxel * f.bytes_per_voxel;
      if (znzseek(stream.get(), static_cast<znz_off_t>(offset), SEEK_SET) < 0)
        detail::refuse_short_read(f, box[0].begin, j, k, offset);
      const std::size_t got = znzread(raw.data(), 1, raw.size(), stream.get());
      if (got != raw.size()) {
        // The first voxel the bytes read do not hold whole ((size_t)-1: none read).
        const std::int64_t whole = got > raw.size() ? 0 : std::int64_t(got) / f.bytes_per_voxel;
        detail::refuse_short_read(f, box[0].begin + whole % box[0].size(),
                                  j + whole / box[0].size(), k, offset + whole * f.bytes_per_voxel);
      }
      if (f.swapped && swap_size > 1) nifti_swap_Nbytes(run, swap_size, raw.data());
      const detail::BadVoxel bad =
          detail::convert(f.datatype, raw.data(), run, f.slope, f.intercept, values.data());
      if (bad.index >= 0)
        detail::refuse_voxel<T>(f, box[0].begin + bad.index % box[0].size(),
                                j + bad.index / box[0].size(), k, bad.value);
      for (std::int64_t r = 0; r < rows_at_once; ++r)
        row(j + r, k, values.data() + r * box[0].size());
    }
}

/// What a written volume holds beyond its voxels.
struct Description {
  std::string text;                // the header's descrip field (at most 79 characters kept)
  int intent = NIFTI_INTENT_NONE;  // NIFTI_INTENT_LABEL for label maps
  double display_min = 0, display_max = 0;  // cal_min, cal_max (0, 0: none)
};

namespace detail {

// The qform written is the one read. niftilib reads a spacing (pixdim) of 0 or less as 1 but
// writes its absolute value, so a file with pixdim[3] = -2 read with z spacing 1 was written with
// spacing 2 (found by tests/fuzz/fuzz_nifti): the quaternion, offsets and spacings are derived
// again from the qform matrix as read.
inline void keep_qform_as_read(nifti_image& image) {
  if (image.qform_code <= 0) return;
  nifti_dmat44_to_quatern(image.qto_xyz, &image.quatern_b, &image.quatern_c, &image.quatern_d,
                          &image.qoffset_x, &image.qoffset_y, &image.qoffset_z, &image.dx,
                          &image.dy, &image.dz, &image.qfac);
  image.pixdim[0] = image.qfac;
  image.pixdim[1] = image.dx;
  image.pixdim[2] = image.dy;
  image.pixdim[3] = image.dz;
}

}  // namespace detail

/**
 * Writes a NIfTI file with the geometry (affine, qform and sform, spacing, units, orientation) and
 * version of `like`, and voxels of type `datatype`: `volumes` 3-D volumes of like's size (4-D when
 * more than one), stored unscaled in this machine's byte order. The voxels are streamed in file
 * order through write(); the file appears under `path` at commit(), and a writer destroyed before
 * that leaves nothing behind.
 */
class Writer {
 public:
  Writer(const File& like, std::string path, int datatype, std::int64_t volumes,
         const Description& description)
      : path_(std::move(path)) {
    detail::quiet();
    if (!is_nifti_name(path_)) throw IoError(path_ + ": name the output .nii or .nii.gz");
    const bool gz = detail::ends_with(path_, ".gz");
    const std::string stem = path_.substr(0, path_.size() - (gz ? 7 : 4));
    temporary_ = stem + ".partial" + (gz ? ".nii.gz" : ".nii");
    detail::Image image(nifti_copy_nim_info(like.header.get()));
    if (!image) throw IoError(path_ + ": cannot copy the header of " + like.path);
    image->nifti_type = like.version == 2 ? NIFTI_FTYPE_NIFTI2_1 : NIFTI_FTYPE_NIFTI1_1;
    image->datatype = datatype;
    nifti_datatype_sizes(datatype, &image->nbyper, &image->swapsize);
    image->byteorder = nifti_short_order();
    image->scl_slope = 1;
    image->scl_inter = 0;
    image->cal_min = description.display_min;
    image->cal_max = description.display_max;
    image->intent_code = description.intent;
    std::snprintf(image->descrip, sizeof image->descrip, "%s", description.text.c_str());
    image->dim[0] = volumes > 1 ? 4 : 3;
    image->dim[4] = volumes;
    for (int d = 5; d < 8; ++d) image->dim[d] = 1;
    image->pixdim[4] = 1;
    if (nifti_update_dims_from_array(image.get()) != 0)
      throw IoError(path_ + ": cannot set the dims of the output header");
    // niftilib drops trailing dims of size 1 (a 4 x 3 x 1 volume became a 2-D image, which open()
    // refuses: found by tests/fuzz/fuzz_nifti); a volume keeps its 3 dims.
    image->dim[0] = image->ndim = volumes > 1 ? 4 : 3;
    detail::keep_qform_as_read(*image);
    image->data = nullptr;
    if (nifti_set_filenames(image.get(), temporary_.c_str(), 0, 0) != 0)
      throw IoError(path_ + ": cannot name the output " + temporary_);
    nifti_set_iname_offset(image.get(), like.version);
    bytes_left_ = image->nvox * image->nbyper;
    // Made first (exclusively, never through a link left there), since niftilib reports a
    // failure to create it on stderr whatever its debug level.
    ::close(io::create_temporary(temporary_, path_));
    stream_.reset(nifti_image_write_hdr_img(image.get(), 2, "wb"));
    if (!stream_)
      throw IoError(path_ + ": cannot write " + temporary_ +
                    " (does the directory exist and is it writable?)");
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer() {
    stream_.reset();
    if (!committed_) std::remove(temporary_.c_str());
  }

  /// Appends `bytes` bytes of voxels.
  void write(const void* data, std::int64_t bytes) {
    if (bytes > bytes_left_) throw IoError(path_ + ": more voxels written than the volume holds");
    if (bytes == 0) return;
    if (znzwrite(data, 1, static_cast<std::size_t>(bytes), stream_.get()) !=
        static_cast<std::size_t>(bytes))
      throw IoError(path_ + ": writing failed (disk full?)");
    bytes_left_ -= bytes;
  }

  /// Finishes the file and gives it its name.
  void commit() {
    if (bytes_left_ != 0)
      throw IoError(path_ + ": " + std::to_string(bytes_left_) + " bytes of voxels never written");
    znzFile f = stream_.release();
    if (Xznzclose(&f) != 0) throw IoError(path_ + ": finishing the file failed (disk full?)");
    io::sync_path(temporary_);  // on the disk before it takes the name
    io::publish(temporary_, path_);
    committed_ = true;
  }

 private:
  std::string path_, temporary_;
  detail::Stream stream_;
  std::int64_t bytes_left_ = 0;
  bool committed_ = false;
};

}  // namespace meshtensor::nifti
