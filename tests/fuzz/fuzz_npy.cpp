// libFuzzer target: .npy files (io/npy.hpp) — the header parser, the whole-array reader and the
// block reader. Any input is a file that reads, or an IoError naming the file. Where it reads: a
// block equals the same part of the whole array, and the array written again reads back the same.
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/device/host_access.hpp>
#include <meshtensor/io/npy.hpp>

#include "fuzz_support.hpp"

namespace mt = meshtensor;
using mt::fuzz::require;

namespace {

// A block of `shape` chosen by `seed`: a begin and an end per axis, inside the array.
mt::Block block_from(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
  mt::Block block;
  for (const std::int64_t n : shape) {
    const std::int64_t a = n ? std::int64_t(seed % std::uint64_t(n + 1)) : 0;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const std::int64_t b = n ? std::int64_t((seed >> 33) % std::uint64_t(n + 1)) : 0;
    block.ranges.push_back({std::min(a, b), std::max(a, b)});
  }
  return block;
}

// The element of `whole` (row-major) at the block's row-major index `i`.
template <class T>
T at_block_index(const xt::xarray<T>& whole, const mt::Block& block, std::int64_t i) {
  std::int64_t offset = 0, stride = 1;
  for (std::size_t d = block.ranges.size(); d-- > 0;) {
    const std::int64_t size = block.ranges[d].size();
    offset += (block.ranges[d].begin + i % size) * stride;
    i /= size;
    stride *= std::int64_t(whole.shape()[d]);
  }
  return whole.data()[offset];
}

template <class T>
void check_block(const std::string& path, const xt::xarray<T>& whole, const mt::Block& block) {
  const mt::Array<T> part = mt::npy::read_block<T>(path, block);
  const auto view = mt::on_host(part);
  require(std::int64_t(part.size()) == block.num_elements(), "a block read has its block's size");
  for (std::int64_t i = 0; i < block.num_elements(); ++i) {
    const T want = at_block_index(whole, block, i);
    require(mt::fuzz::same_bits(&view.data()[i], &want, 1), "a block read equals the whole's part");
  }
}

template <class T>
void check_readable(const std::string& path, const mt::npy::Header& header, std::uint64_t seed) {
  const xt::xarray<T> whole = mt::npy::read<T>(path);
  require(std::vector<std::int64_t>(whole.shape().begin(), whole.shape().end()) == header.shape,
          "the array read has its header's shape");
  mt::Block all;
  for (const std::int64_t n : header.shape) all.ranges.push_back({0, n});
  check_block(path, whole, all);
  check_block(path, whole, block_from(header.shape, seed));
  // Written again (the library's own header), it reads back the same.
  const std::string again = (mt::fuzz::scratch_dir() / "again.npy").string();
  mt::npy::write(again, whole);
  const xt::xarray<T> back = mt::npy::read<T>(again);
  require(
      back.shape() == whole.shape() && mt::fuzz::same_bits(back.data(), whole.data(), whole.size()),
      "an array written and read again is the same");
}

// Calls f(T{}) for the element type a header names; false for one the library does not read.
template <class F>
bool with_type(const std::string& descr, F&& f) {
  if (descr == "<f4") return f(float{}), true;
  if (descr == "<f8") return f(double{}), true;
  if (descr == "<i4") return f(std::int32_t{}), true;
  if (descr == "<i8") return f(std::int64_t{}), true;
  if (descr == "|u1") return f(std::uint8_t{}), true;
  return false;
}

std::uint64_t seed_of(const std::uint8_t* data, std::size_t size) {
  std::uint64_t seed = 1469598103934665603ull;  // FNV-1a of the last bytes
  for (std::size_t i = size > 8 ? size - 8 : 0; i < size; ++i)
    seed = (seed ^ data[i]) * 1099511628211ull;
  return seed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = mt::fuzz::write_input("input.npy", data, size);
  try {
    const mt::npy::Header header = mt::npy::read_header(path);
    const bool known = with_type(header.descr, [&](auto type) {
      check_readable<decltype(type)>(path, header, seed_of(data, size));
    });
    if (!known) {
      (void)mt::npy::read<float>(path);  // must refuse the type
      require(false, "a file of type '" + header.descr + "' was read as float");
    }
  } catch (const mt::Error& e) {
    mt::fuzz::require_named(e, path);
  }
  return 0;
}
