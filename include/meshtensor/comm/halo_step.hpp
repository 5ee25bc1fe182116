#pragma once
// Carrying out one step of a halo plan (core/halo_plan.hpp) on a communicator: every message of
// the step is posted at once — each send packed by the caller from wherever its data lies, each
// receive into a buffer of its own — and started; finish() waits for all of them and hands each
// received piece to the caller, who copies it into place or adds it there (the adjoint). The
// caller computes meanwhile. The caller also decides how a box is packed and unpacked (kernels:
// on the processor's device), so that this layer moves only bytes.

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/device/array.hpp"

namespace meshtensor {

/// Time this processor has spent in halo exchanges (packing, messages and waiting for them), and
/// how many steps it ran: kept with the Mesh, for benchmarks and profiles.
struct HaloProfile {
  double seconds = 0;
  std::uint64_t exchanges = 0;
  std::uint64_t bytes_sent = 0;
};
inline HaloProfile& halo_profile(Mesh& mesh) { return mesh.context<HaloProfile>(); }

/**
 * One step of a halo exchange in flight.
 *
 * ```cpp
 * HaloStep<float> step(mesh, plan, 0, false, [&](const Block& box, float* to) { ... });
 * compute_what_needs_no_halo();
 * step.finish([&](const Block& box, const float* from) { ... });  // or take_received()
 * ```
 */
template <class T>
class HaloStep {
 public:
  /// A received piece of the step: its box (global indices) and its values.
  using Piece = std::pair<Block, Buffer<T>>;

  HaloStep() = default;

  /// Posts and starts the messages of `plan`'s step `step` (its adjoint's with `adjoint`) on the
  /// communicator of the step's mesh axis; pack(box, to) writes a sent box's values to `to`.
  template <class Pack>
  HaloStep(Mesh& mesh, const HaloPlan& plan, std::size_t step, bool adjoint, Pack&& pack)
      : mesh_(&mesh) {
    const Timer timer(mesh);
    const MemoryUseScope messages(MemoryUse::halo);
    Communicator& group = mesh.group(AxisSet{1} << plan.step_axis(step));
    for (const HaloMessage& m : plan.step_messages(step, adjoint)) {
      if (!m.send.empty()) {
        Buffer<T> piece(m.send.num_elements());
        pack(m.send, piece.data());
        requests_.push_back(
            group.isend(piece.data(), piece.size() * sizeof(T), m.peer, tags::halo, piece.space()));
        sent_.push_back(std::move(piece));
      }
      if (!m.receive.empty()) {
        received_.emplace_back(m.receive, Buffer<T>(m.receive.num_elements()));
        Buffer<T>& piece = received_.back().second;
        requests_.push_back(
            group.irecv(piece.data(), piece.size() * sizeof(T), m.peer, tags::halo, piece.space()));
      }
    }
    group.start_posted();  // the caller computes while they travel
  }

  HaloStep(HaloStep&&) noexcept = default;
  HaloStep& operator=(HaloStep&&) noexcept = default;

  /// Waits for the step; unpack(box, from) takes each received piece's values.
  template <class Unpack>
  void finish(Unpack&& unpack) {
    for (const auto& [box, piece] : take_received()) unpack(box, piece.data());
  }

  /// Waits for the step; the received pieces.
  std::vector<Piece> take_received() {
    if (!mesh_) return {};
    const Timer timer(*mesh_);
    wait_all(requests_);
    requests_.clear();
    sent_.clear();
    return std::move(received_);
  }

 private:
  // Adds the time and bytes of its scope to the processor's halo profile.
  struct Timer {
    explicit Timer(Mesh& m)
        : mesh(m), start(std::chrono::steady_clock::now()), sent_before(m.traffic().bytes) {}
    ~Timer() {
      HaloProfile& profile = halo_profile(mesh);
      profile.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      profile.bytes_sent += mesh.traffic().bytes - sent_before;
      ++profile.exchanges;
    }
    Mesh& mesh;
    std::chrono::steady_clock::time_point start;
    std::uint64_t sent_before;
  };

  Mesh* mesh_ = nullptr;
  std::vector<Request> requests_;
  std::vector<Buffer<T>> sent_;  // alive until the step completes
  std::vector<Piece> received_;
};

}  // namespace meshtensor
