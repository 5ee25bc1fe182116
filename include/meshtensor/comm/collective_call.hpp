#pragma once
// What a processor says about the collective op it enters, in the checking mode
// (MESHTENSOR_CHECK_COLLECTIVES=1): each sends its call to every peer before any data moves, so
// two processors in different collectives, or the same one with other sizes, get an error naming
// both calls instead of reading each other's buffers.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "meshtensor/comm/dtype.hpp"
#include "meshtensor/core/error.hpp"

namespace meshtensor {

enum class CollectiveOp : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  barrier
};

inline const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
      return "all_reduce";
    case CollectiveOp::all_gather:
      return "all_gather";
    case CollectiveOp::reduce_scatter:
      return "reduce_scatter";
    case CollectiveOp::all_to_all:
      return "all_to_all";
    case CollectiveOp::broadcast:
      return "broadcast";
    case CollectiveOp::barrier:
      return "barrier";
  }
  return "collective";
}

/// One processor's collective call as its peers see it. A plain struct: it travels as bytes.
struct CollectiveCall {
  std::uint64_t sequence = 0;     // the collectives called on this communicator before it
  std::uint64_t total_bytes = 0;  // what every member agrees on (all_to_all: nothing, 0)
  std::uint64_t pair_bytes = 0;   // what the sender sends its receiver (all_gather, all_to_all)
  std::uint64_t blocks_hash = 0;  // the blocks' sizes, where every member lists them all
  std::int32_t root = -1;         // broadcast
  CollectiveOp op = CollectiveOp::barrier;
  DType type = DType::u8;
  ReduceOp reduce = ReduceOp::sum;
  bool typed = false;  // whether `type` and `reduce` belong to the call
};

namespace detail {

// FNV-1a over the sizes: members compare one number instead of the whole list.
inline std::uint64_t hash_sizes(const std::vector<std::size_t>& sizes) {
  std::uint64_t hash = 1469598103934665603ull;
  for (auto size : sizes) {
    hash ^= static_cast<std::uint64_t>(size) + sizes.size();
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace detail

/// How a call reads in a message: "all_reduce #12 of 1024 float32 elements (sum)".
inline std::string describe(const CollectiveCall& call) {
  std::string text = std::string(to_string(call.op)) + " #" + std::to_string(call.sequence);
  const auto bytes = std::to_string(call.total_bytes);
  switch (call.op) {
    case CollectiveOp::all_reduce:
    case CollectiveOp::reduce_scatter:
      return text + " of " + std::to_string(call.total_bytes / dtype_size(call.type)) + " " +
             to_string(call.type) + " elements (" + to_string(call.reduce) + ")";
    case CollectiveOp::all_gather:
      return text + " of " + bytes + " bytes in all";
    case CollectiveOp::broadcast:
      return text + " of " + bytes + " bytes from rank " + std::to_string(call.root);
    case CollectiveOp::all_to_all:  // its sizes differ between pairs
    case CollectiveOp::barrier:
      return text;
  }
  return text;
}

/// Whether `mine` and a peer's call `theirs` are the same collective, given the bytes this
/// processor expects from that peer (all_gather, all_to_all). Sequence numbers agree too: a
/// processor that skipped a collective is caught at the next one.
inline bool same_call(const CollectiveCall& mine, const CollectiveCall& theirs,
                      std::uint64_t expected_pair_bytes) {
  const bool by_pair = mine.op == CollectiveOp::all_gather || mine.op == CollectiveOp::all_to_all;
  return mine.op == theirs.op && mine.sequence == theirs.sequence &&
         mine.total_bytes == theirs.total_bytes && mine.blocks_hash == theirs.blocks_hash &&
         mine.root == theirs.root && mine.typed == theirs.typed &&
         (!mine.typed || (mine.type == theirs.type && mine.reduce == theirs.reduce)) &&
         (!by_pair || theirs.pair_bytes == expected_pair_bytes);
}

}  // namespace meshtensor
