#pragma once
// The task, made up on the fly so the example needs no data: sort a sequence of digits. A
// sequence holds `digits` random digits, a separator and the same digits sorted; the model reads
// it one token at a time and is scored on predicting each sorted digit from the tokens before it.
// Every token is a function of (seed, step, batch entry, position) alone, so any layout and any
// number of processors see the same batch.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace transformer {

namespace mt = meshtensor;

struct Task {
  std::int64_t digits = 8;   // digits to sort
  std::int64_t values = 10;  // digit values 0..values-1; the separator is `values`

  std::int64_t vocab() const { return values + 1; }
  /// The positions the model reads: the digits, the separator and all sorted digits but the last.
  std::int64_t length() const { return 2 * digits; }
};

/// One batch: the tokens read [batch, seq] and the next token to predict at each position
/// [batch, seq], -1 (ignored by the loss) before the separator.
struct Batch {
  mt::Tensor<float> tokens, targets;
};

inline std::uint64_t mix(std::uint64_t x) {  // SplitMix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The whole sequence of batch entry `entry` at `step`: digits, separator, sorted digits.
inline std::vector<std::int64_t> sequence(const Task& task, std::uint64_t seed, std::int64_t step,
                                          std::int64_t entry) {
  std::vector<std::int64_t> digits(std::size_t(task.digits));
  for (std::int64_t j = 0; j < task.digits; ++j)
    digits[std::size_t(j)] = std::int64_t(
        mix(mix(mix(seed) ^ std::uint64_t(step)) ^ std::uint64_t(entry * 1000003 + j)) %
        std::uint64_t(task.values));
  std::vector<std::int64_t> out = digits;
  out.push_back(task.values);
  std::sort(digits.begin(), digits.end());
  out.insert(out.end(), digits.begin(), digits.end());
  return out;
}

/// Batch `step` of `batch` sequences laid out by `layout` (its `batch` and `seq` rules).
inline Batch make_batch(mt::Mesh& mesh, const mt::Layout& layout, const Task& task,
                        std::uint64_t seed, std::int64_t step, std::int64_t batch) {
  const mt::Shape shape{mt::Dim("batch", batch), mt::Dim("seq", task.length())};
  auto token = [&](const mt::Index& i, std::int64_t offset) {
    return float(sequence(task, seed, step, i["batch"])[std::size_t(i["seq"] + offset)]);
  };
  Batch b;
  b.tokens =
      mt::generate<float>(mesh, shape, layout, [&](const mt::Index& i) { return token(i, 0); });
  b.targets = mt::generate<float>(mesh, shape, layout, [&](const mt::Index& i) {
    return i["seq"] >= task.digits ? token(i, 1) : -1.0f;
  });
  return b;
}

}  // namespace transformer
