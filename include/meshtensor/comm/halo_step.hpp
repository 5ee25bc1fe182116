#pragma once
// Carrying out a halo plan (core/halo_plan.hpp) on a mesh. HaloStep is one step: every message of
// the step is posted at once — each send from where the caller's data lies when it is one run
// of memory, else packed by the caller; each receive into a buffer of its own — and started;
// finish() waits for all of them and hands each received piece to the caller, who copies it into
// place or adds it there (the adjoint). The caller computes meanwhile. HaloTransfer is a whole
// exchange, forward or adjoint, its steps in order, each started once the one before has arrived
// (where the transport allows it), while the caller computes. The caller decides how a box is
// packed and unpacked (kernels: on the processor's device), so that this layer moves only bytes.

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/request.hpp"
#include "meshtensor/comm/tags.hpp"
#include "meshtensor/core/halo_plan.hpp"
#include "meshtensor/memory/array.hpp"

namespace meshtensor {

/// Time this processor has spent in halo exchanges (packing, messages and waiting for them), and
/// how many steps it ran: kept with the Mesh, for benchmarks and profiles.
struct HaloProfile {
  double seconds = 0;
  std::uint64_t exchanges = 0;
  std::uint64_t bytes_sent = 0;
};
inline HaloProfile& halo_profile(Mesh& mesh) { return mesh.context<HaloProfile>(); }

/// Whether the calling processor's windowed ops overlap their halo exchange with the outputs that
/// need no halo (the default), or exchange first and compute after (Settings::halo_overlap,
/// MESHTENSOR_HALO_OVERLAP=off). The results are the same either way; off measures what the
/// overlap hides.
inline bool halo_overlap() { return current_processor().settings().halo_overlap; }

/**
 * One step of a halo exchange in flight.
 *
 * ```cpp
 * HaloStep<float> step(mesh, plan, 0, false,
 *                       [&](const Block& box, Buffer<float>& buffer) -> const float* { ... });
 * compute_what_needs_no_halo();
 * step.finish([&](const Block& box, Buffer<float>& piece) { ... });  // or take_received()
 * ```
 */
template <class T>
class HaloStep {
 public:
  /// A received piece of the step: its box (global indices) and its values.
  using Piece = std::pair<Block, Buffer<T>>;

  HaloStep() = default;

  /// Posts and starts the messages of `plan`'s step `step` (its adjoint's with `adjoint`) on the
  /// communicator of the step's mesh axis, under `tag`. pack(box, buffer) says where a sent box's
  /// values lie, row-major: in an array that stays as it is until the step completes (sent from
  /// there, with no copy), or in `buffer`, which it fills (Buffer<T>(box.num_elements())).
  template <class Pack>
  HaloStep(Mesh& mesh, const HaloPlan& plan, std::size_t step, bool adjoint, Pack&& pack,
           int tag = tags::halo)
      : mesh_(&mesh) {
    const Timer timer(mesh);
    const MemoryUseScope messages(MemoryUse::halo);
    Communicator& group = mesh.group(AxisSet{1} << plan.step_axis(step));
    const std::vector<HaloMessage> all = plan.step_messages(step, adjoint);
    // Receives first: a message that finds its receive posted lands in place (no copy held for
    // it by the transport), and a peer already waiting gets its piece as soon as it is packed.
    for (const HaloMessage& m : all) {
      if (m.receive.empty()) continue;
      received_.emplace_back(m.receive, Buffer<T>(m.receive.num_elements()));
      Buffer<T>& piece = received_.back().second;
      requests_.push_back(
          group.irecv(piece.data(), piece.size() * sizeof(T), m.peer, tag, piece.space()));
    }
    for (const HaloMessage& m : all) {
      if (m.send.empty()) continue;
      Buffer<T> buffer;
      const T* values = pack(m.send, buffer);
      requests_.push_back(
          group.isend(values, m.send.num_elements() * sizeof(T), m.peer, tag, buffer.space()));
      if (!buffer.empty()) sent_.push_back(std::move(buffer));
    }
    group.start_posted();  // the caller computes while they travel
  }

  HaloStep(HaloStep&&) noexcept = default;
  HaloStep& operator=(HaloStep&&) noexcept = default;

  /// Waits for the step; unpack(box, piece) takes each received piece (a Buffer<T>&, which it may
  /// keep).
  template <class Unpack>
  void finish(Unpack&& unpack) {
    for (auto& [box, piece] : take_received()) unpack(box, piece);
  }

  /// Lets the step's messages advance without waiting for them (MPI moves a large message only
  /// inside its calls, so a caller computing under the step calls this now and then); whether
  /// they have all arrived.
  bool arrived() {
    if (!mesh_) return true;
    const auto start = std::chrono::steady_clock::now();
    bool all = true;
    for (Request& request : requests_) all = request.test() && all;
    halo_profile(*mesh_).seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return all;
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
  std::vector<Buffer<T>> sent_;  // the packed sends, alive until the step completes
  std::vector<Piece> received_;
};

/**
 * A whole halo exchange in flight, one step at a time: forward from the first step, the adjoint
 * (gradients back to their owners) from the last. progress() lets the step in flight advance and,
 * once it has arrived, unpacks it and starts the next — which may send what it brought (the
 * corners) — so that a caller computing what needs no halo calls it now and then and has every
 * step travel under its work; finish() completes the steps left. pack(box, buffer) says where a
 * sent box's values lie (HaloStep); unpack(box, piece) takes a received piece: copies it into
 * place, or adds it there for the adjoint. The plan must outlive the transfer.
 */
template <class T>
class HaloTransfer {
 public:
  HaloTransfer() = default;

  template <class Pack>
  HaloTransfer(Mesh& mesh, const HaloPlan& plan, bool adjoint, Pack&& pack, int tag = tags::halo)
      : mesh_(&mesh), plan_(&plan), adjoint_(adjoint), tag_(tag), left_(plan.exchanged().size()) {
    if (left_ == 0) {
      plan_ = nullptr;  // nothing to send: finish() has nothing to do
      return;
    }
    start_next(pack);
  }

  /// Lets the step in flight advance; where it has arrived, the next starts — unless the
  /// transport starts work in program order (Communicator::starts_in_program_order): then the
  /// steps after the first start in finish(), at the same point on every rank.
  template <class Pack, class Unpack>
  void progress(Pack&& pack, Unpack&& unpack) {
    if (!plan_) return;
    if (mesh_->world().starts_in_program_order()) {
      in_flight_.arrived();
      return;
    }
    while (in_flight_.arrived() && left_ > 0) {
      in_flight_.finish(unpack);
      start_next(pack);
    }
  }

  /// How many steps have not started yet.
  std::size_t steps_left() const { return left_; }

  /// Completes the step in flight and the steps left, in order.
  template <class Pack, class Unpack>
  void finish(Pack&& pack, Unpack&& unpack) {
    if (!plan_) return;
    in_flight_.finish(unpack);
    while (left_ > 0) {
      start_next(pack);
      in_flight_.finish(unpack);
    }
    plan_ = nullptr;
  }

 private:
  template <class Pack>
  void start_next(Pack& pack) {
    const std::size_t steps = plan_->exchanged().size();
    const std::size_t step = adjoint_ ? left_ - 1 : steps - left_;
    --left_;
    in_flight_ = HaloStep<T>(*mesh_, *plan_, step, adjoint_, pack, tag_);
  }

  Mesh* mesh_ = nullptr;
  const HaloPlan* plan_ = nullptr;
  bool adjoint_ = false;
  int tag_ = tags::halo;
  std::size_t left_ = 0;  // steps not yet started
  HaloStep<T> in_flight_;
};

}  // namespace meshtensor
