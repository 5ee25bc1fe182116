// NIfTI volumes against files nibabel wrote (tests/nifti/make_volumes.py, run first by
// tests/nifti/run.cmake, which also checks the files written here with nibabel afterwards): values,
// scale and intercept, byte order, NIfTI-1 and -2, gz and not, orientation and affine, block reads
// on uneven splits equal to the whole file, writing in the input's geometry, and each kind of bad
// file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/io/tensor_nifti.hpp>

#include "support/blocks.hpp"
#include "support/errors.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;
using Catch::Matchers::Contains;

namespace {

std::string cases_dir() {
  const char* dir = std::getenv("MESHTENSOR_NIFTI_CASES");
  if (!dir) FAIL("MESHTENSOR_NIFTI_CASES is not set: run this test through ctest (-R nifti)");
  return dir;
}

xt::xarray<double> read_npy(const std::string& path, std::size_t rank = 3) {
  const npy::Header h = npy::read_header(path);
  Block whole;
  for (auto n : h.shape) whole.ranges.push_back({0, n});
  const auto block = npy::read_block<double>(path, whole);
  const auto all = on_host(block);
  xt::xarray<double> out = xt::xarray<double>::from_shape(
      std::vector<std::size_t>(h.shape.begin(), h.shape.begin() + rank));
  std::copy(all.begin(), all.end(), out.begin());
  return out;
}

// Under MPI every rank runs the test: one rank handles the files, the others wait for it.
bool lead_rank() {
#ifdef MESHTENSOR_WITH_MPI
  if (in_mpi_job()) return boost::mpi::communicator().rank() == 0;
#endif
  return true;
}
void wait_for_all_ranks() {
#ifdef MESHTENSOR_WITH_MPI
  if (in_mpi_job()) boost::mpi::communicator().barrier();
#endif
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void check_affine(const Affine& got, const nlohmann::json& want) {
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) CHECK(got[r][c] == Approx(want[r][c].get<double>()).margin(1e-4));
}

const char* const volumes[] = {"ct_int16", "labels_uint8", "int32_nifti2", "float32_4d",
                               "float64_big"};

struct Split {
  const char* mesh;
  const char* layout;
};
// One split dim (uneven), two dims on two axes, all three dims, and replication.
const Split splits[] = {{"p:1", ""},
                        {"p:3", "x:p"},
                        {"p:4", "y:p"},
                        {"rows:2; cols:2", "x:rows; z:cols"},
                        {"a:2; b:2; c:2", "x:a; y:b; z:c"},
                        {"rows:2; cols:2", "y:cols"}};

}  // namespace

TEST_CASE(
    "NIfTI files from nibabel read the same whole and block by block, in either orientation") {
  const std::string dir = cases_dir();
  for (const char* name : volumes) {
    const auto meta = read_json(dir + "/" + name + ".json");
    for (bool canonical : {true, false}) {
      const auto expected =
          read_npy(dir + "/" + name + (canonical ? ".canonical.npy" : ".file.npy"));
      for (const auto& split : splits) {
        if (!can_run(split.mesh)) continue;
        INFO(name << (canonical ? " canonical" : " as stored") << " on " << split.mesh << " "
                  << split.layout);
        auto got = on_mesh(split.mesh, [&](Mesh& m) {
          const auto v = open_nifti(m, dir + "/" + meta["file"].get<std::string>(), canonical);
          return std::make_pair(local_block(load_nifti<double>(m, v, split.layout)), v);
        });
        for (const auto& [block, v] : got) {
          CHECK(mismatch(block, expected, 1e-12) == "");
          const auto& shape = meta[canonical ? "canonical_shape" : "shape"];
          for (int d = 0; d < 3; ++d) CHECK(v.size[d] == shape[d].get<std::int64_t>());
          check_affine(v.affine, meta[canonical ? "canonical_affine" : "affine"]);
          check_affine(v.file.affine, meta["affine"]);
        }
      }
    }
  }
}

TEST_CASE("the file's axis codes and voxel spacing are those nibabel reports") {
  const std::string dir = cases_dir();
  on_one_processor([&](Mesh& m) {
    for (const char* name : volumes) {
      const auto meta = read_json(dir + "/" + name + ".json");
      const auto v = open_nifti(m, dir + "/" + meta["file"].get<std::string>());
      CHECK(v.orientation.file_codes() == meta["codes"].get<std::string>());
    }
    const auto ct = open_nifti(m, dir + "/ct_int16.nii.gz");
    CHECK(ct.spacing()[0] == Approx(0.8));
    CHECK(ct.spacing()[2] == Approx(2.5));
    CHECK(ct.file.version == 1);
    CHECK(ct.file.compressed);
    CHECK(ct.file.slope == 0.5);
    CHECK(ct.file.intercept == -1024.0);
    const auto big = open_nifti(m, dir + "/float64_big.nii");
    CHECK(big.file.version == 2);
    CHECK(big.file.swapped);
    return 0;
  });
}

TEST_CASE("a NIfTI file named in upper case (SCAN.NII.GZ) is read as its lower-case twin") {
  const std::string dir = cases_dir();
  CHECK(nifti::is_nifti_name("SCAN.NII.GZ"));
  CHECK(nifti::is_nifti_name("Scan.Nii"));
  CHECK_FALSE(nifti::is_nifti_name("scan.nii.bz2"));
  const std::string upper = dir + "/CT_INT16_COPY.NII.GZ";
  if (lead_rank())  // one copy, made before any rank reads it
    std::filesystem::copy_file(dir + "/ct_int16.nii.gz", upper,
                               std::filesystem::copy_options::overwrite_existing);
  wait_for_all_ranks();
  on_one_processor([&](Mesh& m) {
    const auto lower = open_nifti(m, dir + "/ct_int16.nii.gz");
    const auto twin = open_nifti(m, upper);
    CHECK(twin.file.compressed);
    CHECK(twin.file.size == lower.file.size);
    const auto a = load_nifti<float>(m, lower, Layout());
    const auto b = load_nifti<float>(m, twin, Layout());
    CHECK((a.local() == b.local()));
    return 0;
  });
}

TEST_CASE("bad NIfTI files are refused on every processor, naming the file and the fault") {
  const std::string dir = cases_dir();
  const std::pair<const char*, const char*> bad[] = {
      {"missing.nii.gz", "no such file"},
      {"bad_name.img", "not a NIfTI file name"},
      {"bad_short.nii", "shorter than a NIfTI header"},
      {"bad_not_nifti.nii", "not a NIfTI-1 or NIfTI-2 file"},
      {"bad_truncated.nii", "(truncated)"},
      {"bad_truncated.nii.gz", "truncated or corrupt .gz"},
      {"bad_corrupt.nii.gz", "truncated or corrupt .gz"},
      {"bad_complex.nii", "COMPLEX64 are not supported"},
      {"bad_2d.nii", "a 2-D image"},
      {"bad_4d.nii.gz", "3 entries along dim 4"}};
  for (const auto& [file, fault] : bad) {
    INFO(file);
    auto logs = on_mesh("p:4", [&](Mesh& m) {
      ErrorLog log;
      log([&] {
        const auto v = open_nifti(m, dir + "/" + file);
        load_nifti<float>(m, v, "x:p");
      });
      return log;
    });
    for (const auto& log : logs) {
      REQUIRE(log.messages().size() == 1);
      CHECK_THAT(log.messages()[0], Contains(file) && Contains(fault));
    }
  }
}

// ct_int16's NIfTI-1 header changed by `edit`, then the voxels `data`, written as `name`
// (compressed when it ends .gz) by the lead rank; its path.
template <class Edit>
std::string crafted_file_with(const std::string& name, Edit&& edit, const std::string& data) {
  const std::string dir = cases_dir();
  const std::string path = dir + "/" + name;
  if (lead_rank()) {
    nifti_1_header header{};
    znzFile in = znzopen((dir + "/ct_int16.nii.gz").c_str(), "rb", 1);
    REQUIRE(znzread(&header, 1, sizeof header, in) == sizeof header);
    znzclose(in);
    REQUIRE(header.sizeof_hdr == 348);  // written in this machine's byte order
    header.vox_offset = 352;
    edit(header);
    const std::string rest = std::string(4, '\0') + data;  // no extensions, then the voxels
    znzFile out =
        znzopen(path.c_str(), "wb", path.size() > 3 && path.substr(path.size() - 3) == ".gz");
    znzwrite(&header, 1, sizeof header, out);
    znzwrite(rest.data(), 1, rest.size(), out);
    znzclose(out);
  }
  wait_for_all_ranks();
  return path;
}

// The same, with `data_bytes` zero bytes of voxels.
template <class Edit>
std::string crafted_file(const std::string& name, Edit&& edit, std::size_t data_bytes) {
  return crafted_file_with(name, std::forward<Edit>(edit), std::string(data_bytes, '\0'));
}

// What open_nifti says of `path` on each processor of two.
std::vector<std::string> open_errors(const std::string& path) {
  std::vector<std::string> errors;
  for (const auto& log : on_mesh("p:2", [&](Mesh& m) {
         ErrorLog log;
         log([&] { (void)open_nifti(m, path); });
         return log;
       })) {
    REQUIRE(log.messages().size() == 1);
    errors.push_back(log.messages()[0]);
  }
  return errors;
}

TEST_CASE("a small .nii.gz whose header promises gigabytes is refused before any allocation") {
  // 2048 x 1024 x 1024 voxels of int16 (4 GiB) and 64 bytes of them: a .gz of a few hundred bytes,
  // which deflate cannot expand to 4 GiB.
  const std::string crafted = crafted_file(
      "bad_promises_gigabytes.nii.gz",
      [](nifti_1_header& h) {
        h.dim[1] = 2048;
        h.dim[2] = 1024;
        h.dim[3] = 1024;
      },
      64);
  for (const auto& error : open_errors(crafted))
    CHECK_THAT(error, Contains(crafted) && Contains("promises 4294967648 bytes") &&
                          Contains("more than a .gz of") && Contains("truncated or corrupt .gz"));
}

TEST_CASE("a header whose affine holds NaN or a zero spacing is refused, naming the file") {
  const auto tiny = [](nifti_1_header& h) {
    h.dim[1] = h.dim[2] = h.dim[3] = 2;
    h.sform_code = 1;
  };
  const std::string nan_affine = crafted_file(
      "bad_nan_affine.nii",
      [&](nifti_1_header& h) {
        tiny(h);
        h.srow_y[3] = std::nanf("");
      },
      16);
  for (const auto& error : open_errors(nan_affine))
    CHECK_THAT(error, Contains(nan_affine) && Contains("affine (sform) holds nan") &&
                          Contains("it must be finite"));
  const std::string flat = crafted_file(
      "bad_zero_spacing.nii",
      [&](nifti_1_header& h) {
        tiny(h);
        h.srow_x[2] = h.srow_y[2] = h.srow_z[2] = 0;
      },
      16);
  for (const auto& error : open_errors(flat))
    CHECK_THAT(error, Contains(flat) && Contains("voxel spacing along axis 2 is 0"));
}

TEST_CASE("a volume saved from any split is the input's geometry and values, nothing else left") {
  const std::string dir = cases_dir();
  for (const auto& split : splits) {
    if (!can_run(split.mesh)) continue;
    INFO(split.mesh << " " << split.layout);
    const std::string out = dir + "/out_ct_float32.nii.gz";
    if (lead_rank()) std::remove(out.c_str());
    wait_for_all_ranks();
    on_mesh(split.mesh, [&](Mesh& m) {
      const auto v = open_nifti(m, dir + "/ct_int16.nii.gz");
      save_nifti(load_nifti<float>(m, v, split.layout), out, v);
      return 0;
    });
    wait_for_all_ranks();
    if (!lead_rank()) continue;
    // Read back as stored: the file's own axis order and values (k * 0.5 - 1024 is exact).
    const auto expected = read_npy(dir + "/ct_int16.file.npy");
    auto got = on_one_processor([&](Mesh& m) {
      const auto v = open_nifti(m, out, /*canonical=*/false);
      return std::make_pair(local_block(load_nifti<double>(m, v, "")), v);
    });
    CHECK(mismatch(got.first, expected, 0) == "");
    CHECK(got.second.file.datatype == nifti::datatype_of<float>());
    CHECK(got.second.file.version == 1);
    CHECK(got.second.orientation.is_identity());
    check_affine(got.second.file.affine, read_json(dir + "/ct_int16.json")["affine"]);
    std::ifstream partial(dir + "/out_ct_float32.partial.nii.gz");
    CHECK_FALSE(partial.good());
  }
  // A label volume (uint8) and class scores (4-D, one volume per class) for nibabel to check.
  on_mesh(can_run("rows:2; cols:2") ? "rows:2; cols:2" : "p:1", [&](Mesh& m) {
    const auto v = open_nifti(m, dir + "/labels_uint8.nii");
    const auto labels =
        load_nifti<std::uint8_t>(m, v, m.shape().rank() == 2 ? "y:rows; z:cols" : "");
    save_nifti(labels, dir + "/out_labels.nii", v, {"labels again", NIFTI_INTENT_LABEL, 0, 2});
    const Shape scores_shape{Dim("x", v.size[0]), Dim("y", v.size[1]), Dim("z", v.size[2]),
                             Dim("classes", 3)};
    const auto scores = generate<float>(
        m, scores_shape, m.shape().rank() == 2 ? "x:rows; classes:cols" : "",
        [](const Index& i) { return float(100 * i["classes"] + 10 * i["x"] + i["y"] - i["z"]); });
    save_nifti(scores, dir + "/out_scores.nii.gz", v);
    return 0;
  });
}

TEST_CASE("each volume of a 4-D file (channels along dim 4) is read on any split") {
  const std::string dir = cases_dir();
  const std::string out = dir + "/out_channels.nii.gz";
  auto value = [](const Index& i) {
    return float(1000 * i["channels"] + 100 * i["x"] + 10 * i["y"] + i["z"]);
  };
  on_mesh(can_run("p:2") ? "p:2" : "p:1", [&](Mesh& m) {
    const auto v = open_nifti(m, dir + "/labels_uint8.nii");
    const Shape shape{Dim("x", v.size[0]), Dim("y", v.size[1]), Dim("z", v.size[2]),
                      Dim("channels", 4)};
    save_nifti(generate<float>(m, shape, m.num_processors() > 1 ? "y:p" : "", value), out, v);
    return 0;
  });
  wait_for_all_ranks();
  for (const auto& split : splits) {
    if (!can_run(split.mesh)) continue;
    INFO(split.mesh << " " << split.layout);
    on_mesh(split.mesh, [&](Mesh& m) {
      const auto v = open_nifti(m, out);
      CHECK(v.file.volumes == 4);
      for (std::int64_t c = 0; c < 4; ++c) {
        const auto read = load_nifti_volume<float>(m, v, c, split.layout);
        const auto expected = generate<float>(m, v.shape(), split.layout, [&](const Index& i) {
          return float(1000 * c + 100 * i["x"] + 10 * i["y"] + i["z"]);
        });
        CHECK((read.local() == expected.local()));
      }
      CHECK_THROWS_WITH(load_nifti<float>(m, v, split.layout),
                        Contains("out_channels.nii.gz") && Contains("4 entries along dim 4"));
      CHECK_THROWS_WITH(load_nifti_volume<float>(m, v, 4, split.layout),
                        Contains("volume 4 asked for, but the file holds 4"));
      return 0;
    });
  }
}

TEST_CASE("saving into a missing directory is refused on every processor and writes nothing") {
  const std::string dir = cases_dir();
  auto logs = on_mesh("p:2", [&](Mesh& m) {
    ErrorLog log;
    const auto v = open_nifti(m, dir + "/float64_big.nii");
    const auto t = load_nifti<float>(m, v, "x:p");
    log([&] { save_nifti(t, dir + "/no/such/dir/out.nii.gz", v); });
    log([&] { save_nifti(t, dir + "/out.nrrd", v); });
    return log;
  });
  for (const auto& log : logs) {
    CHECK_THAT(log.messages()[0], Contains("no/such/dir/out.nii.gz") && Contains("directory"));
    CHECK_THAT(log.messages()[1], Contains("out.nrrd") && Contains(".nii or .nii.gz"));
  }
}

TEST_CASE("resize to a shape or a spacing is the same on every split, images and labels") {
  const Shape shape{Dim("x", 13), Dim("y", 10), Dim("z", 7)};
  auto value_at = [](std::int64_t x, std::int64_t y, std::int64_t z) {
    return float(x * x - 3 * y + 7 * z);
  };
  auto value = [&](const Index& i) { return value_at(i["x"], i["y"], i["z"]); };
  auto resized = [&](Mesh& m, const Layout& layout) {
    auto t = generate<float>(m, shape, layout, value);
    auto linear = resize(resize(resize(t, "x", 20), "y", 4), "z", 7, Interpolation::linear, 0.6);
    auto nearest =
        resize(resize(t, "x", 5, Interpolation::nearest), "y", 17, Interpolation::nearest);
    return std::make_pair(local_block(linear), local_block(nearest));
  };
  const auto reference = on_one_processor([&](Mesh& m) { return resized(m, ""); });
  // Known values: x to 20 positions keeps both ends; nearest picks the closer source.
  CHECK(reference.first.data(0, 0, 0) == value_at(0, 0, 0));
  CHECK(reference.first.data(19, 0, 0) == Approx(value_at(12, 0, 0)));
  CHECK(reference.second.data(4, 16, 6) == value_at(12, 9, 6));
  CHECK(reference.second.data(1, 2, 0) == value_at(3, 1, 0));
  for (const auto& split : splits) {
    if (!can_run(split.mesh)) continue;
    INFO(split.mesh << " " << split.layout);
    for (const auto& [linear, nearest] :
         on_mesh(split.mesh, [&](Mesh& m) { return resized(m, split.layout); })) {
      CHECK(mismatch(linear, reference.first.data, 0) == "");
      CHECK(mismatch(nearest, reference.second.data, 0) == "");
    }
  }
}

namespace {

// What open_nifti and load_nifti (x split over two processors) say of `path` on each processor.
std::vector<std::string> load_errors(const std::string& path) {
  std::vector<std::string> errors;
  for (const auto& log : on_mesh("p:2", [&](Mesh& m) {
         ErrorLog log;
         log([&] { (void)load_nifti<float>(m, open_nifti(m, path), "x:p"); });
         return log;
       })) {
    REQUIRE(log.messages().size() == 1);
    errors.push_back(log.messages()[0]);
  }
  return errors;
}

// A 2 x 2 x 2 volume of `values` stored as T (datatype `code`), unscaled unless `slope` is given.
template <class T>
std::string crafted_volume(const std::string& name, int code, const std::vector<T>& values,
                           float slope = 1, float intercept = 0) {
  std::string data(values.size() * sizeof(T), '\0');
  std::memcpy(data.data(), values.data(), data.size());
  return crafted_file_with(
      name,
      [&](nifti_1_header& h) {
        h.dim[0] = 3;
        h.dim[1] = h.dim[2] = h.dim[3] = 2;
        h.datatype = static_cast<short>(code);
        h.bitpix = static_cast<short>(8 * sizeof(T));
        h.scl_slope = slope;
        h.scl_inter = intercept;
      },
      data);
}

}  // namespace

TEST_CASE("a .nii.gz shorter than its header promises names the byte where its data end") {
  // 8 x 8 x 8 int16 voxels promised (1024 bytes), 100 there: small enough to pass the .gz's size
  // check at open, so the read finds it.
  const std::string short_gz = crafted_file(
      "bad_short_data.nii.gz",
      [](nifti_1_header& h) {
        h.dim[0] = 3;
        h.dim[1] = h.dim[2] = h.dim[3] = 8;
      },
      100);
  for (const auto& error : load_errors(short_gz))
    CHECK_THAT(error, Contains(short_gz) &&
                          Contains("the data end at byte 452 of the decompressed stream, before "
                                   "voxel (") &&
                          Contains("(truncated or corrupt .gz)"));
}

TEST_CASE("NaN, infinite and out-of-range voxels are refused, naming the file and the voxel") {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  // Voxel (i, j, k) lies at i + 2 j + 4 k.
  const std::string with_nan =
      crafted_volume<float>("bad_nan_voxel.nii", NIFTI_TYPE_FLOAT32, {0, 1, 2, 3, 4, nan, 6, 7});
  for (const auto& error : load_errors(with_nan))
    CHECK_THAT(error, Contains(with_nan) && Contains("voxel (1, 0, 1) is nan") &&
                          Contains("NaN and infinity are refused"));
  const std::string with_inf =
      crafted_volume<float>("bad_inf_voxel.nii", NIFTI_TYPE_FLOAT32, {0, 1, 2, -inf, 4, 5, 6, 7});
  for (const auto& error : load_errors(with_inf))
    CHECK_THAT(error, Contains(with_inf) && Contains("voxel (1, 1, 0) is -inf"));
  // A finite stored value the header's slope takes past what float32 holds.
  const std::string scaled = crafted_volume<std::int16_t>("bad_scaled_to_inf.nii", NIFTI_TYPE_INT16,
                                                          {0, 0, 0, 0, 0, 0, 0, 30000}, 1e35f);
  for (const auto& error : load_errors(scaled))
    CHECK_THAT(error, Contains(scaled) &&
                          Contains("voxel (1, 1, 1) is 3e+39 (after the header's slope 1e+35") &&
                          Contains("which float32 cannot hold"));
  // Integers that the type asked for cannot hold are refused, not wrapped.
  const std::string wide = crafted_volume<std::int32_t>("wide_int32.nii", NIFTI_TYPE_INT32,
                                                        {0, 1, 70000, 3, 4, 5, 6, 7});
  const nifti::File file = nifti::open(wide);
  CHECK_THROWS_WITH(
      nifti::read_box<std::int16_t>(file, {Range{0, 2}, Range{0, 2}, Range{0, 2}},
                                    [](std::int64_t, std::int64_t, const void*) {}),
      Contains(wide) && Contains("voxel (0, 1, 0) is 70000, which int16 cannot hold"));
}

TEST_CASE("a header extension longer than its file is refused before niftilib allocates it") {
  // tests/fuzz found niftilib allocating a 1.1 GiB extension for a file of 691 bytes.
  const std::string path = crafted_file(
      "long_extension.nii",
      [](nifti_1_header& h) {
        h.dim[1] = h.dim[2] = h.dim[3] = 2;
        h.vox_offset = 1e9f;  // room for the extension before the data, as far as the header says
      },
      64);
  if (lead_rank()) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const char extender[4] = {1, 0, 0, 0};
    const std::int32_t extension[2] = {1 << 29, 0};  // 512 MiB, in this machine's byte order
    file.seekp(348);
    file.write(extender, sizeof extender);
    file.write(reinterpret_cast<const char*>(extension), sizeof extension);
  }
  wait_for_all_ranks();
  for (const auto& error : open_errors(path))
    CHECK_THAT(error, Contains(path) &&
                          Contains("extension at byte 352 is 536870912 bytes long, past the end "
                                   "of the file"));
}

TEST_CASE("damaged dims and implausible spacings are refused before niftilib reads them") {
  const std::pair<const char*, std::pair<int, int>> dims[] = {
      {"the header's dim[0] is 9; a NIfTI image has 1 to 7 dims", {0, 9}},
      {"the header gives a dim of size 0 (dim[2])", {2, 0}}};
  for (const auto& [expected, edit] : dims) {
    const std::string crafted = crafted_file(
        "bad_dims.nii", [&](nifti_1_header& h) { h.dim[edit.first] = short(edit.second); }, 64);
    for (const auto& error : open_errors(crafted))
      CHECK_THAT(error, Contains(crafted) && Contains(expected));
  }
  const std::string tiny = crafted_file(
      "bad_tiny_spacing.nii",
      [](nifti_1_header& h) {
        h.dim[1] = h.dim[2] = h.dim[3] = 2;
        h.sform_code = 1;
        h.srow_x[0] = 1e-9f;
        h.srow_y[0] = h.srow_z[0] = 0;
      },
      16);
  for (const auto& error : open_errors(tiny))
    CHECK_THAT(error, Contains(tiny) && Contains("voxel spacing along axis 0 is 1e-09 mm") &&
                          Contains("meshtensor reads spacings from 1e-06 to 1e+06 mm"));
}

TEST_CASE(
    "a volume written in a file's geometry reads back with it: one slice, a qform's spacing") {
  // A 4 x 3 x 1 volume (niftilib wrote it as 2-D), and a qform-only file with pixdim[3] = -2,
  // which niftilib reads as spacing 1 (and wrote back as 2).
  const std::string slice = crafted_file(
      "one_slice.nii",
      [](nifti_1_header& h) {
        h.dim[1] = 4;
        h.dim[2] = 3;
        h.dim[3] = 1;
      },
      24);
  const std::string negative = crafted_file(
      "negative_pixdim.nii",
      [](nifti_1_header& h) {
        h.dim[1] = h.dim[2] = h.dim[3] = 2;
        h.sform_code = 0;
        h.qform_code = 1;
        h.pixdim[3] = -2;
      },
      16);
  if (lead_rank()) {
    for (const std::string& path : {slice, negative}) {
      INFO(path);
      const nifti::File like = nifti::open(path);
      const std::string written = path.substr(0, path.size() - 4) + "_again.nii.gz";
      nifti::Writer writer(like, written, NIFTI_TYPE_FLOAT32, 1, {});
      const std::vector<float> zeros(std::size_t(like.num_voxels()));
      writer.write(zeros.data(), std::int64_t(zeros.size() * sizeof(float)));
      writer.commit();
      const nifti::File back = nifti::open(written);
      CHECK(back.size == like.size);
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c)
          CHECK(back.affine[r][c] == Approx(like.affine[r][c]).margin(1e-6));
    }
  }
  wait_for_all_ranks();
}
