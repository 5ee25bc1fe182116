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
 * not a real number, more or fewer than 3 dims (a 4-D file with one volume counts as 3-D), and an
 * uncompressed file shorter than its header promises.
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
  for (int d = 4; d <= dims && d <= 7; ++d)
    if (image->dim[d] > 1)
      throw IoError(path + ": a " + std::to_string(dims) + "-D image with " +
                    std::to_string(image->dim[d]) + " entries along dim " + std::to_string(d) +
                    "; meshtensor reads one 3-D volume per file");
  f.size = {image->nx, image->ny, image->nz};
  std::optional<std::int64_t> bytes = f.bytes_per_voxel;
  for (auto n : f.size) {
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
  // Voxel spacing and orientation come from the affine: a NaN or a zero column would spread into
  // every resampled voxel.
  for (int c = 0; c < 4; ++c) {
    double length = 0;
    for (int r = 0; r < 3; ++r) {
      if (!std::isfinite(f.affine[r][c]))
        throw IoError(path + ": the header's voxel-to-world affine (" +
                      (image->sform_code > 0 ? "sform" : "qform") + ") holds " +
                      std::to_string(f.affine[r][c]) + "; it must be finite");
      length += f.affine[r][c] * f.affine[r][c];
    }
    if (c < 3 && !(length > 0))
      throw IoError(path + ": the header's voxel spacing along axis " + std::to_string(c) +
                    " is 0; it must be above 0");
  }
  f.data_offset = image->iname_offset;
  f.swapped = image->byteorder != nifti_short_order();
  const auto needed = f.data_offset + f.num_voxels() * f.bytes_per_voxel;
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

template <class Stored, class T>
void convert(const void* raw, std::int64_t n, double slope, double intercept, T* out) {
  const auto* in = static_cast<const Stored*>(raw);
  const bool scaled = slope != 1 || intercept != 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<T>) {
      out[i] =
          static_cast<T>(std::llround(scaled ? slope * double(in[i]) + intercept : double(in[i])));
    } else if (scaled) {
      out[i] = static_cast<T>(slope * double(in[i]) + intercept);
    } else {
      out[i] = static_cast<T>(in[i]);
    }
  }
}

template <class T>
void convert(int datatype, const void* raw, std::int64_t n, double slope, double intercept,
             T* out) {
  if (!with_stored_type(
          datatype, [&](auto stored) { convert<decltype(stored)>(raw, n, slope, intercept, out); }))
    throw IoError("unsupported NIfTI datatype " + std::to_string(datatype));
}

}  // namespace detail

/**
 * Reads the voxels of `box` (ranges along the file's axes i, j, k), scaled by the file's slope and
 * intercept and converted to T (integers rounded). Calls `row(j, k, values)` for each row of the
 * box in file order, `values` holding box[0].size() voxels along i. Only the bytes of the box are
 * read from an uncompressed file (a .gz is decompressed up to the box's last byte). Throws IoError
 * when the data end early or do not decompress.
 */
template <class T, class Row>
void read_box(const File& f, const std::array<Range, 3>& box, Row&& row) {
  for (int a = 0; a < 3; ++a)
    if (box[a].begin < 0 || box[a].end > f.size[a] || box[a].end < box[a].begin)
      throw IoError(f.path + ": box outside the volume");
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
      const std::int64_t voxel = box[0].begin + ni * (j + nj * k);
      if (znzseek(stream.get(), static_cast<znz_off_t>(f.data_offset + voxel * f.bytes_per_voxel),
                  SEEK_SET) < 0)
        throw IoError(f.path + ": the data end before voxel (" + std::to_string(box[0].begin) +
                      ", " + std::to_string(j) + ", " + std::to_string(k) +
                      ") (truncated or corrupt)");
      const std::size_t got = znzread(raw.data(), 1, raw.size(), stream.get());
      if (got != raw.size())
        throw IoError(f.path + ": the data end before voxel (" + std::to_string(box[0].begin) +
                      ", " + std::to_string(j) + ", " + std::to_string(k) + ")" +
                      (f.compressed ? " (truncated or corrupt .gz)" : " (truncated)"));
      if (f.swapped && swap_size > 1) nifti_swap_Nbytes(run, swap_size, raw.data());
      detail::convert(f.datatype, raw.data(), run, f.slope, f.intercept, values.data());
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
