// libFuzzer target: NIfTI-1 and -2 files (io/nifti_file.hpp) — header checks, box reads, the
// canonical orientation, and the writer. The input's first byte picks how the rest is stored: as
// a .nii, gzip-compressed as a .nii.gz (so that mutations reach the header inside), or as the raw
// bytes of a .nii.gz (damaged streams). Any input opens and reads, or is an IoError naming the
// file. Where it reads: every value is finite, a box equals the same part of the whole volume, and
// the volume written in the file's geometry reads back the same.
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/io/nifti_file.hpp>

#include "fuzz_support.hpp"

namespace mt = meshtensor;
using mt::fuzz::require;

namespace {

// Volumes of more voxels are opened and checked, but not read whole: the run stays fast.
constexpr std::int64_t most_voxels_read = 1 << 16;

std::string gzip(const std::uint8_t* data, std::size_t size) {
  z_stream z{};
  require(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
          "zlib starts");
  std::string out(deflateBound(&z, uLong(size)) + 32, '\0');
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = uInt(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  require(deflate(&z, Z_FINISH) == Z_STREAM_END, "zlib compresses");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::vector<double> read_all(const mt::nifti::File& f, const std::array<mt::Range, 3>& box) {
  std::vector<double> values;
  mt::nifti::read_box<double>(f, box, [&](std::int64_t, std::int64_t, const double* row) {
    values.insert(values.end(), row, row + box[0].size());
  });
  return values;
}

std::array<mt::Range, 3> whole(const mt::nifti::File& f) {
  return {mt::Range{0, f.size[0]}, mt::Range{0, f.size[1]}, mt::Range{0, f.size[2]}};
}

// An inner box: half of each axis from the middle on.
std::array<mt::Range, 3> inner(const mt::nifti::File& f) {
  std::array<mt::Range, 3> box;
  for (int a = 0; a < 3; ++a) box[a] = {f.size[a] / 2, f.size[a] / 2 + (f.size[a] + 1) / 2};
  return box;
}

void check_header(const mt::nifti::File& f) {
  for (int a = 0; a < 3; ++a) require(f.size[a] >= 1, "every axis has a voxel");
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) require(std::isfinite(f.affine[r][c]), "the affine is finite");
  for (const double s : mt::voxel_spacing(f.affine)) require(s > 0, "every spacing is above 0");
  const auto o = mt::Orientation::closest_canonical(f.affine);
  const auto size = o.canonical_size(f.size);
  require(size[0] * size[1] * size[2] == f.num_voxels(), "the canonical volume has every voxel");
  require(o.axis[0] + o.axis[1] + o.axis[2] == 3 && o.axis[0] != o.axis[1] &&
              o.axis[1] != o.axis[2] && o.axis[0] != o.axis[2],
          "the canonical axes are the file's axes in some order");
  (void)o.canonical_affine(f.affine, f.size);
}

void check_values(const mt::nifti::File& f) {
  const std::vector<double> all = read_all(f, whole(f));
  for (const double v : all) require(std::isfinite(v), "every value read is finite");
  const auto box = inner(f);
  const std::vector<double> part = read_all(f, box);
  std::size_t n = 0;
  for (std::int64_t k = box[2].begin; k < box[2].end; ++k)
    for (std::int64_t j = box[1].begin; j < box[1].end; ++j)
      for (std::int64_t i = box[0].begin; i < box[0].end; ++i, ++n)
        require(part[n] == all[std::size_t(i + f.size[0] * (j + f.size[1] * k))],
                "a box equals the same part of the whole volume");
  // Integers too: a value that does not fit is refused, not wrapped.
  try {
    mt::nifti::read_box<std::uint8_t>(f, whole(f),
                                      [&](std::int64_t, std::int64_t, const std::uint8_t*) {});
  } catch (const mt::IoError& e) {
    mt::fuzz::require_named(e, f.path);
  }
  // The last volume of a 4-D file: read from its own offset, finite as the first.
  if (f.volumes > 1 && f.volumes * f.num_voxels() <= most_voxels_read) {
    try {
      mt::nifti::read_box<double>(
          f, whole(f),
          [&](std::int64_t, std::int64_t, const double* row) {
            for (std::int64_t i = 0; i < f.size[0]; ++i)
              require(std::isfinite(row[i]), "every value of the last volume is finite");
          },
          f.volumes - 1);
    } catch (const mt::IoError& e) {
      mt::fuzz::require_named(e, f.path);  // its bytes may end before it does
    }
  }
  // Written in the file's geometry and read again: the same values and grid.
  const std::string again = (mt::fuzz::scratch_dir() / "again.nii").string();
  mt::nifti::Writer writer(f, again, mt::nifti::datatype_of<double>(), 1, {});
  writer.write(all.data(), std::int64_t(all.size() * sizeof(double)));
  writer.commit();
  const mt::nifti::File back = mt::nifti::open(again);
  require(back.size == f.size, "the volume written has the file's size");
  require(read_all(back, whole(back)) == all, "the volume written reads back the same");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int how = data[0] % 3;
  std::string path;
  if (how == 0) {
    path = mt::fuzz::write_input("input.nii", data + 1, size - 1);
  } else if (how == 1) {
    const std::string packed = gzip(data + 1, size - 1);
    path = mt::fuzz::write_input(
        "input.nii.gz", reinterpret_cast<const std::uint8_t*>(packed.data()), packed.size());
  } else {
    path = mt::fuzz::write_input("input.nii.gz", data + 1, size - 1);
  }
  try {
    const mt::nifti::File f = mt::nifti::open(path);
    require(f.path == path, "the file knows its name");
    check_header(f);
    if (f.num_voxels() <= most_voxels_read) check_values(f);
  } catch (const mt::IoError& e) {
    mt::fuzz::require_named(e, path);
  }
  return 0;
}
