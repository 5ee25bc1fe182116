// .npy files as hostile input: whatever a header declares, the reader names the file and the
// fault before it allocates anything, and it never waits on something that is not a file; the
// writer never follows a link planted at its temporary name.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <meshtensor/meshtensor.hpp>

#include "support/environment.hpp"
#include "support/spmd.hpp"

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_npy {
using Catch::Matchers::Contains;

namespace {

const std::filesystem::path dir = std::filesystem::temp_directory_path() / "meshtensor-test-npy";

// A version 1.0 .npy file of `header` (the dict) followed by `data_bytes` zero bytes.
std::string write_npy(const std::string& name, const std::string& header, std::size_t data_bytes) {
  std::filesystem::create_directories(dir);
  std::string dict = header;
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  const std::string path = (dir / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("\x93NUMPY\x01\x00", 8);
  const char length[2] = {char(dict.size() & 0xff), char(dict.size() >> 8)};
  out.write(length, 2);
  out << dict << std::string(data_bytes, '\0');
  return path;
}

std::string read_error(const std::string& path) {
  try {
    (void)npy::read<float>(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a .npy file whose header promises more than it holds is refused before allocating") {
  // 2^40 floats declared in a file of 24 bytes of data: once, a 4 TiB allocation came first.
  const auto huge = write_npy("huge.npy",
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (1048576, 1048576), }",
                              24);
  const auto size = [](const std::string& path) { return std::filesystem::file_size(path); };
  const std::uint64_t header = size(huge) - 24;
  CHECK_THAT(read_error(huge),
             Contains("huge.npy: is " + std::to_string(size(huge)) + " bytes, but its header " +
                      "promises " + std::to_string(header + (std::uint64_t{1} << 42)) +
                      " (truncated or corrupted)"));
  const auto extra = write_npy("extra.npy",
                               "{'descr': '<f4', 'fortran_order': False, "
                               "'shape': (2,), }",
                               12);
  CHECK_THAT(read_error(extra),
             Contains("extra.npy: is " + std::to_string(size(extra)) + " bytes, but its header " +
                      "promises " + std::to_string(size(extra) - 4) + " (data after it)"));
  // Shapes past 64 bits: their product, and one size alone.
  const std::pair<const char*, const char*> past_64_bits[] = {
      {"(4294967296, 4294967296, 16)",
       "its header's shape (4294967296, 4294967296, 16) holds more bytes than 64 bits count"},
      {"(99999999999999999999,)",
       "the .npy header's shape has a size of 99999999999999999999, more than 64 bits count"},
      // No data, but strides past 64 bits (found by tests/fuzz).
      {"(0, 999999999999999999, 99999999)",
       "its header's shape (0, 999999999999999999, 99999999) has sizes whose product passes 64 "
       "bits"}};
  for (const auto& [shape, expected] : past_64_bits) {
    const auto path = write_npy(
        "wide.npy",
        "{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(shape) + ", }", 0);
    CHECK_THAT(read_error(path), Contains("wide.npy: " + std::string(expected)));
  }
  // Block reads check the same before reading their part.
  LocalProcessor scope;
  CHECK_THROWS_WITH(npy::read_block<float>(huge, Block{{Range{0, 2}, Range{0, 3}}}),
                    Contains("huge.npy: is " + std::to_string(size(huge)) + " bytes"));
}

TEST_CASE("only regular files are read as .npy: a FIFO or a directory is refused, not waited on") {
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo.npy").string();
  std::filesystem::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THAT(read_error(fifo), Contains("fifo.npy: not a regular file"));
  CHECK_THAT(read_error(dir.string()), Contains("meshtensor-test-npy: not a regular file"));
  CHECK_THAT(read_error((dir / "missing.npy").string()), Contains("missing.npy: no such file"));
}

TEST_CASE("a well-formed .npy file still reads whole and by blocks") {
  const auto path = write_npy("zeros.npy",
                              "{'descr': '<f4', 'fortran_order': False, "
                              "'shape': (3, 4), }",
                              48);
  LocalProcessor scope;
  const auto whole = npy::read<float>(path);
  CHECK(whole.size() == 12);
  const auto block = npy::read_block<float>(path, Block{{Range{1, 3}, Range{0, 4}}});
  CHECK(block.size() == 8);
}

TEST_CASE("writing never follows a link planted at the temporary name, and leaves no temporary") {
  std::filesystem::create_directories(dir);
  const std::string victim = (dir / "victim.txt").string(), path = (dir / "out.npy").string();
  std::ofstream(victim) << "keep me";
  std::filesystem::remove(path + ".partial");
  std::filesystem::create_symlink(victim, path + ".partial");
  xt::xarray<float> values = {1.0f, 2.0f, 3.0f};
  npy::write(path, values);
  std::string kept;
  std::getline(std::ifstream(victim), kept);
  CHECK(kept == "keep me");
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path + ".partial")));
  LocalProcessor scope;
  CHECK((npy::read<float>(path) == values));
}

TEST_CASE("every fault of a .npy header is named with the file") {
  // Headers whose dict is wrong, and files whose first bytes are: each error starts with the path.
  const std::pair<const char*, const char*> bad_dicts[] = {
      {"{'fortran_order': False, 'shape': (2,), }", "has no 'descr' entry"},
      {"{'descr': <f4, 'fortran_order': False, 'shape': (2,), }", "malformed 'descr'"},
      {"{'descr': '<f4', 'shape': (2,), }", "has no 'fortran_order' entry"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", "Fortran-ordered arrays"},
      {"{'descr': '<f4', 'fortran_order': False, }", "has no 'shape' entry"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", "malformed 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", "malformed 'shape'"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", "malformed 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': 2, 'x': (2,), }", "malformed 'shape'"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }",
       "holds elements of type '<f2' but '<f4' was expected"}};
  for (const auto& [dict, fault] : bad_dicts) {
    INFO(dict);
    const auto path = write_npy("bad_dict.npy", dict, 8);
    CHECK_THAT(read_error(path), Catch::StartsWith(path + ": ") && Contains(fault));
  }
  const std::pair<std::string, const char*> bad_starts[] = {
      {std::string("NUMPY\x01\x00", 7), "not a .npy file (the magic bytes are missing)"},
      {std::string("\x93NUMPY\x09\x00\x10\x00", 10), ".npy format version 9 is not supported"},
      {std::string("\x93NUMPY\x02\x00\x00\x00\x00\x40", 12), "header length is implausible"},
      {std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17), "truncated .npy header"}};
  for (const auto& [bytes, fault] : bad_starts) {
    INFO(fault);
    const std::string path = (dir / "bad_start.npy").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    CHECK_THAT(read_error(path), Catch::StartsWith(path + ": ") && Contains(fault));
  }
}

TEST_CASE("a block over MESHTENSOR_MAX_BLOCK_BYTES is refused naming the .npy file") {
  const auto path = write_npy(
      "limited.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 64), }", 64 * 64 * 4);
  const testing::Setting limit("MESHTENSOR_MAX_BLOCK_BYTES", "1KiB");
  const std::string whole = read_error(path);
  std::string block = "no error";
  try {
    (void)npy::read_block<float>(path, Block{{Range{0, 32}, Range{0, 64}}});
  } catch (const IoError& e) {
    block = e.what();
  }
  CHECK_THAT(block, Catch::StartsWith(path + ": ") && Contains("MESHTENSOR_MAX_BLOCK_BYTES"));
  CHECK(whole == "no error");  // the whole array is the host's, not a processor's block
}

TEST_CASE(
    "NaN and infinite floats are refused, naming the file and the element, on every processor") {
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "with_nan.npy").string();
  xt::xarray<float> values = xt::zeros<float>({4, 3});
  values(3, 1) = std::nanf("");
  npy::write(path, values);
  const auto error_of = [&](auto&& read) {
    try {
      read();
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string refusal = path + ": element (3, 1) is nan; meshtensor reads finite values only";
  LocalProcessor scope;
  CHECK_THAT(error_of([&] { (void)npy::read<float>(path); }), Contains(refusal));
  CHECK_THAT(error_of([&] {
               (void)npy::read_block<float>(path, Block{{Range{2, 4}, Range{0, 3}}});
             }),
             Contains(refusal));
  CHECK(npy::read_block<float>(path, Block{{Range{0, 3}, Range{0, 3}}}).size() == 9);
  values(3, 1) = -std::numeric_limits<float>::infinity();
  npy::write(path, values);
  CHECK_THAT(error_of([&] { (void)npy::read<float>(path); }), Contains("element (3, 1) is -inf"));
  // Only the second processor's block holds it: both throw the same error, neither waits.
  const auto errors = testing::on_mesh("p:2", [&](Mesh& mesh) {
    return error_of([&] { (void)load_npy<float>(mesh, path, Shape("x:4, y:3"), Layout("x:p")); });
  });
  for (const auto& e : errors) CHECK_THAT(e, Contains(path + ": element (3, 1) is -inf"));
}

}  // namespace test_npy
