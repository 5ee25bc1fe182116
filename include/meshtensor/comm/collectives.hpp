#pragma once
// Typed collectives over any Communicator: the byte-level interface with element types, vectors and
// variable sizes handled. Ops use these; transports never see a template.

#include <cstdint>
#include <vector>

#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/dtype.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor {

/// `count` elements at `data`, in `where` (the host's memory unless said).
template <class T>
void all_reduce(Communicator& comm, T* data, std::size_t count, ReduceOp op,
                MemorySpace where = MemorySpace::host) {
  comm.all_reduce(data, count, dtype_of<T>(), op, where);
}

template <class T>
void all_reduce(Communicator& comm, std::vector<T>& data, ReduceOp op) {
  all_reduce(comm, data.data(), data.size(), op);
}

/// A processor's block or buffer, where it lives.
template <class T>
void all_reduce(Communicator& comm, Array<T>& data, ReduceOp op) {
  all_reduce(comm, data.data(), data.size(), op, data.space());
}
template <class T>
void all_reduce(Communicator& comm, Buffer<T>& data, ReduceOp op) {
  all_reduce(comm, data.data(), data.size(), op, data.space());
}

template <class T>
T all_reduce_value(Communicator& comm, T value, ReduceOp op) {
  all_reduce(comm, &value, 1, op);
  return value;
}

/// Every rank's vector, concatenated in rank order; the vectors may differ in length.
template <class T>
std::vector<T> all_gather(Communicator& comm, const std::vector<T>& mine) {
  std::vector<std::int64_t> counts(comm.size());
  const std::int64_t my_count = static_cast<std::int64_t>(mine.size());
  comm.all_gather(&my_count, sizeof my_count, counts.data(),
                  std::vector<std::size_t>(comm.size(), sizeof my_count));
  std::vector<std::size_t> bytes;
  std::size_t total = 0;
  for (auto n : counts) {
    bytes.push_back(static_cast<std::size_t>(n) * sizeof(T));
    total += static_cast<std::size_t>(n);
  }
  std::vector<T> out(total);
  comm.all_gather(mine.data(), mine.size() * sizeof(T), out.data(), bytes);
  return out;
}

/// The reduction over ranks of `data`, of which rank r keeps the counts[r] elements at its offset.
template <class T>
std::vector<T> reduce_scatter(Communicator& comm, const std::vector<T>& data,
                              const std::vector<std::size_t>& counts, ReduceOp op) {
  std::vector<T> out(counts.at(comm.rank()));
  comm.reduce_scatter(data.data(), out.data(), counts, dtype_of<T>(), op);
  return out;
}

/// to_each[q] goes to rank q; returns what each rank sent here, indexed by sender.
template <class T>
std::vector<std::vector<T>> all_to_all(Communicator& comm,
                                       const std::vector<std::vector<T>>& to_each) {
  const int p = comm.size();
  std::vector<std::int64_t> send_counts(p), recv_counts(p);
  std::vector<T> send;
  std::vector<std::size_t> send_bytes(p), recv_bytes(p);
  for (int q = 0; q < p; ++q) {
    send_counts[q] = static_cast<std::int64_t>(to_each.at(q).size());
    send_bytes[q] = to_each[q].size() * sizeof(T);
    send.insert(send.end(), to_each[q].begin(), to_each[q].end());
  }
  comm.all_to_all(send_counts.data(), std::vector<std::size_t>(p, sizeof(std::int64_t)),
                  recv_counts.data(), std::vector<std::size_t>(p, sizeof(std::int64_t)));
  std::size_t total = 0;
  for (int q = 0; q < p; ++q) {
    recv_bytes[q] = static_cast<std::size_t>(recv_counts[q]) * sizeof(T);
    total += static_cast<std::size_t>(recv_counts[q]);
  }
  std::vector<T> recv(total);
  comm.all_to_all(send.data(), send_bytes, recv.data(), recv_bytes);
  std::vector<std::vector<T>> out(p);
  auto it = recv.begin();
  for (int q = 0; q < p; ++q) {
    out[q].assign(it, it + recv_counts[q]);
    it += recv_counts[q];
  }
  return out;
}

/// Root's vector on every rank (the length travels too).
template <class T>
void broadcast(Communicator& comm, std::vector<T>& data, int root) {
  std::int64_t count = static_cast<std::int64_t>(data.size());
  comm.broadcast(&count, sizeof count, root);
  data.resize(static_cast<std::size_t>(count));
  comm.broadcast(data.data(), data.size() * sizeof(T), root);
}

template <class T>
T broadcast_value(Communicator& comm, T value, int root) {
  comm.broadcast(&value, sizeof value, root);
  return value;
}

}  // namespace meshtensor
