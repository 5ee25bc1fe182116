#pragma once
// The fused Dice + cross-entropy loss's kernels (kernels/cpu/dice_cross_entropy.hpp says what they
// compute). They run on the CPU: a GPU processor composes the loss from its element-wise and sum
// kernels instead (fused_loss_kernels()), which keep the volume on the GPU. A plan counts about
// ten operations per score in each pass.

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/cpu/dice_cross_entropy.hpp"

namespace meshtensor::kernels {

/// Whether this processor runs the fused loss's kernels (the CPU's; a plan of a run there counts
/// them).
inline bool fused_loss_kernels() { return !takes_gpu_roads(); }

template <class T, class L>
void dice_cross_entropy_sums(const ClassBlock& b, const T* scores, const L* labels,
                             const float* weights, double* sums) {
  dispatch(
      [&] { plan::count(plan::Family::elementwise, 10.0 * double(b.positions() * b.classes)); },
      [] { return false; },
      [&] { cpu::dice_cross_entropy_sums(b, scores, labels, weights, sums); });
}

template <class T, class L>
void dice_cross_entropy_gradient(const ClassBlock& b, const T* scores, const L* labels,
                                 const float* weights, const DiceCrossEntropyCoefficients& k,
                                 const float* scale, T* grad) {
  dispatch(
      [&] { plan::count(plan::Family::elementwise, 10.0 * double(b.positions() * b.classes)); },
      [] { return false; },
      [&] { cpu::dice_cross_entropy_gradient(b, scores, labels, weights, k, *scale, grad); });
}

/// f() on the host, where the processor computes; skipped in a plan (where Tensor::on_host would
/// refuse): for the few numbers a loss computes from its all-reduced sums.
template <class F>
void host_step(F&& f) {
  dispatch([] { plan::count(plan::Family::elementwise, 0.0); }, [] { return false; }, f);
}

}  // namespace meshtensor::kernels
