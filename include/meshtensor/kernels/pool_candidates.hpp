#pragma once
// The CPU's pooling kernels, in the order kernels/pool.hpp tries them (kernels/registry.hpp says
// how one is chosen). A GPU runs meshtensor's CUDA kernels and comes here for windows they cannot
// run. Max pooling's choice depends on the shape and type alone, so that backward reads the
// workspace (where each maximum is) in the format forward wrote it; each candidate says how many
// bytes that workspace takes.
//   pair       2 x 2 x 2 max pooling at stride 2, float and bfloat16 (kernels/cpu/pair_pool.hpp)
//   onednn     oneDNN's kernels: float and bfloat16 where it has them (bfloat16: windows that do
//              not overlap), boxes that are exactly the windows' range, average pooling that
//              counts padding or has none
//   widened    bfloat16 average pooling on the float candidates, the block widened for the call
//   reference  the plain loops: every shape
// To add a kernel: a struct like these below, placed in PoolCandidates where it should be tried.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/kernels/common/pool_geometry.hpp"
#include "meshtensor/kernels/conv_candidates.hpp"
#include "meshtensor/kernels/cpu/convert.hpp"
#include "meshtensor/kernels/cpu/pair_pool.hpp"
#include "meshtensor/kernels/cpu/reference/pool.hpp"
#include "meshtensor/kernels/registry.hpp"
#include "meshtensor/memory/array.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/cpu/onednn/pool.hpp"
#endif

namespace meshtensor::kernels {

/// What a pooling call asks of its kernel: max or average pooling (counting padding or not),
/// forward or backward, of a geometry on an element type.
struct PoolProblem {
  enum class Kind { max, average };
  PoolGeometry geometry;
  Kind kind = Kind::max;
  bool backward = false;
  Element element = Element::float32;
  bool count_padding = false;

  bool is(Element e) const { return element == e; }
};

/// A call's operands: forward reads input into output (max pooling: and where each maximum is
/// into workspace); backward reads grad_output (and workspace) into grad_input.
template <class T>
struct PoolOperands {
  const T* input = nullptr;
  T* output = nullptr;
  const T* grad_output = nullptr;
  T* grad_input = nullptr;
  void* workspace = nullptr;
};

namespace detail {
template <class T>
PoolProblem pool_problem(const PoolGeometry& g, PoolProblem::Kind kind, bool backward,
                         bool count_padding = false) {
  return PoolProblem{g, kind, backward, element_of<T>(), count_padding};
}

// Runs p on the candidate chosen for it (also a candidate's float pass). Defined in
// kernels/pool.hpp.
template <class T>
void run_pool_candidates(const PoolProblem& p, const PoolOperands<T>& o);
}  // namespace detail

struct PoolCandidate {
  static bool races_next(const PoolProblem&) { return false; }
  static std::size_t workspace_bytes(const PoolProblem&) { return 0; }
};

/// 2 x 2 x 2 max pooling at stride 2 (the U-Net's), faster than oneDNN's at few channels.
struct PairPool : PoolCandidate {
  static constexpr std::string_view name = "pair";
  static bool supports(const PoolProblem& p) {
    return !reference_kernels && p.kind == PoolProblem::Kind::max && !p.is(Element::float64) &&
           cpu::pair_pool_fits(p.geometry);
  }
  static std::size_t workspace_bytes(const PoolProblem& p) {
    return cpu::pair_pool_workspace_bytes(p.geometry);
  }
  template <class T>
  static void run(const PoolProblem& p, const PoolOperands<T>& o) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
      if (!p.backward)
        return cpu::pair_max_pool_forward(p.geometry, o.input, o.output, o.workspace);
      cpu::pair_max_pool_backward(p.geometry, o.grad_output, o.workspace, o.grad_input);
    }
  }
};

/// oneDNN's pooling kernels (where the program links oneDNN).
struct OnednnPool : PoolCandidate {
  static constexpr std::string_view name = "onednn";
  static bool supports(const PoolProblem& p) {
    if (p.is(Element::float32)) return runs<float>(p);
    return p.is(Element::bfloat16) && !windows_overlap(p.geometry) && runs<bfloat16>(p);
  }
  static std::size_t workspace_bytes([[maybe_unused]] const PoolProblem& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if (p.kind == PoolProblem::Kind::max) {
      if (p.is(Element::float32)) return onednn::max_pool_workspace_bytes<float>(p.geometry);
      if (p.is(Element::bfloat16)) return onednn::max_pool_workspace_bytes<bfloat16>(p.geometry);
    }
#endif
    return 0;
  }
  template <class T>
  static void run([[maybe_unused]] const PoolProblem& p,
                  [[maybe_unused]] const PoolOperands<T>& o) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16>) {
      const PoolGeometry& g = p.geometry;
      if (p.kind == PoolProblem::Kind::max) {
        if (!p.backward) return onednn::max_pool_forward(g, o.input, o.output, o.workspace);
        return onednn::max_pool_backward(g, o.grad_output, o.workspace, o.grad_input);
      }
      if (!p.backward) return onednn::avg_pool_forward(g, o.input, o.output, p.count_padding);
      onednn::avg_pool_backward(g, o.grad_output, o.grad_input, p.count_padding);
    }
#endif
  }

 private:
  // Where windows overlap, a gradient position sums several windows' gradients: oneDNN's bfloat16
  // kernels for AVX512_BF16 CPUs round each addition to bfloat16 (the others sum in float). Max
  // pooling's forward pass goes with its backward, which reads the workspace forward wrote.
  static bool windows_overlap(const PoolGeometry& g) {
    for (int d = 0; d < 3; ++d)
      if ((g.kernel[d] - 1) * g.taps[d].dilation + 1 > g.taps[d].stride) return true;
    return false;
  }
  template <class T>
  static bool runs([[maybe_unused]] const PoolProblem& p) {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
    if (p.kind == PoolProblem::Kind::max) return onednn::detail::runs_max<T>(p.geometry);
    return onednn::detail::runs_avg<T>(p.geometry, p.count_padding);
#else
    return false;
#endif
  }
};

/// bfloat16 average pooling on the float candidates, the block widened for the call: a window's
/// sum in float, rounded once. (Max pooling needs no arithmetic: it runs on bfloat16 as it is.)
struct WidenedPool : PoolCandidate {
  static constexpr std::string_view name = "widened";
  static bool supports(const PoolProblem& p) {
    return p.kind == PoolProblem::Kind::average && p.is(Element::bfloat16);
  }
  template <class T>
  static void run(const PoolProblem& p, const PoolOperands<T>& o);
};

/// The plain loops (kernels/cpu/reference/pool.hpp).
struct ReferencePool : PoolCandidate {
  static constexpr std::string_view name = "reference";
  static bool supports(const PoolProblem& p) {
    return p.kind == PoolProblem::Kind::max || !p.is(Element::bfloat16);
  }
  static std::size_t workspace_bytes(const PoolProblem& p) {
    return p.kind == PoolProblem::Kind::max ? reference::max_pool_workspace_bytes(p.geometry) : 0;
  }
  template <class T>
  static void run(const PoolProblem& p, const PoolOperands<T>& o) {
    const PoolGeometry& g = p.geometry;
    if (p.kind == PoolProblem::Kind::max) {
      if (!p.backward) return reference::max_pool_forward(g, o.input, o.output, o.workspace);
      return reference::max_pool_backward(g, o.grad_output, o.workspace, o.grad_input);
    }
    if constexpr (!std::is_same_v<T, bfloat16>) {
      if (!p.backward) return reference::avg_pool_forward(g, o.input, o.output, p.count_padding);
      reference::avg_pool_backward(g, o.grad_output, o.grad_input, p.count_padding);
    }
  }
};

using PoolCandidates = CandidateList<PairPool, OnednnPool, WidenedPool, ReferencePool>;

namespace detail {
inline std::int64_t pool_input_size(const PoolGeometry& g) {
  return g.batch * g.in[0] * g.in[1] * g.in[2] * g.channels;
}
inline std::int64_t pool_output_size(const PoolGeometry& g) {
  return g.batch * g.out[0] * g.out[1] * g.out[2] * g.channels;
}
}  // namespace detail

template <class T>
void WidenedPool::run(const PoolProblem& p, const PoolOperands<T>& o) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    const PoolGeometry& g = p.geometry;
    const std::int64_t inputs = detail::pool_input_size(g), outputs = detail::pool_output_size(g);
    Buffer<float> in(static_cast<std::size_t>(inputs)), out(static_cast<std::size_t>(outputs));
    PoolProblem wide = p;
    wide.element = Element::float32;
    PoolOperands<float> w;
    if (!p.backward) {
      cpu::convert(o.input, inputs, in.data());
      w.input = in.data(), w.output = out.data();
      detail::run_pool_candidates(wide, w);
      return cpu::convert(out.data(), outputs, o.output);
    }
    cpu::convert(o.grad_output, outputs, out.data());
    w.grad_output = out.data(), w.grad_input = in.data();
    detail::run_pool_candidates(wide, w);
    cpu::convert(in.data(), inputs, o.grad_input);
  }
}

}  // namespace meshtensor::kernels
