#pragma once
// The normalisation family: the passes of batch, instance and group norm over a block, and the
// per-key arithmetic between them. The block is row-major; each element belongs to one statistic,
// its key, whose index steps by key_strides[d] along dim d (0 along a reduced dim). Per-key
// numbers (moments, statistics, coefficients, sums) are doubles in the processor's memory, so a
// GPU keeps them, and computes with them, where its blocks are: nothing crosses to the host. The
// CPU (kernels/cpu/norm.hpp) and the GPU (kernels/cuda/norm.hpp) compute the same formulas
// (kernels/common/norm_formulas.hpp); a plan counts the operations per element.

#include <cmath>
#include <cstdint>
#include <vector>

#include "meshtensor/kernels/backend.hpp"
#include "meshtensor/kernels/common/channel_affine.hpp"
#include "meshtensor/kernels/common/norm_formulas.hpp"
#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/norm.hpp"
#if defined(MESHTENSOR_WITH_CUDA)
#include "meshtensor/kernels/cuda/norm.hpp"
#endif

namespace meshtensor::kernels {

/// The count, mean and sum of squared deviations of each of `keys` keys' elements: 3 per key
/// into `moments`.
template <class T>
void norm_moments(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                  double* moments) {
  dispatch([&] { plan::count(plan::Family::norm, 3.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(gpu::norm_moments(sizes, key_strides, keys, x, moments)),
           [&] { cpu::norm_moments(sizes, key_strides, keys, x, moments); });
}

/// stats = [mean | variance | 1 / sqrt(variance + epsilon)] per key (3 keys long) from the
/// moments of `parts` parts (3 per key each, part after part), combined in part order over
/// `count` elements per key.
inline void norm_statistics(const double* parts, std::int64_t count_parts, std::int64_t keys,
                            double count, double epsilon, double* stats) {
  dispatch([&] { plan::count(plan::Family::norm, 10.0 * double(count_parts * keys)); },
           MESHTENSOR_ON_GPU(gpu::norm_statistics(parts, count_parts, keys, count, epsilon, stats)),
           [&] {
             for (std::int64_t k = 0; k < keys; ++k)
               shared::finish_statistics(parts, count_parts, keys, k, count, epsilon, stats);
           });
}

/// a, b per key with gamma (x - mean) inv_std + beta = a x + b, from `stats` (norm_statistics');
/// gamma null: (x - mean) inv_std (beta unused).
template <class W>
void norm_coefficients(const double* stats, std::int64_t keys, const W* gamma, const W* beta,
                       double* a, double* b) {
  dispatch([&] { plan::count(plan::Family::norm, 4.0 * double(keys)); },
           MESHTENSOR_ON_GPU(gpu::norm_coefficients(stats, keys, gamma, beta, a, b)),
           [&] {
             for (std::int64_t k = 0; k < keys; ++k)
               shared::affine_coefficients(stats, keys, k, !gamma, gamma ? double(gamma[k]) : 1.0,
                                           gamma ? double(beta[k]) : 0.0, a, b);
           });
}

/// p, q, r per key: the input gradient p g' + q v + r of gamma x̂ + beta (v = x), or with gamma
/// null of x̂ (v = x̂), from the sums of g' and g' x̂ (interleaved per key) over `count` elements
/// a key.
template <class W>
void norm_gradient_terms(const double* stats, std::int64_t keys, const W* gamma, const double* sums,
                         double count, double* p, double* q, double* r) {
  dispatch([&] { plan::count(plan::Family::norm, 10.0 * double(keys)); },
           MESHTENSOR_ON_GPU(gpu::norm_gradient_terms(stats, keys, gamma, sums, count, p, q, r)),
           [&] {
             for (std::int64_t k = 0; k < keys; ++k)
               shared::gradient_terms(stats, keys, k, !gamma, gamma ? double(gamma[k]) : 1.0, sums,
                                      count, p, q, r);
           });
}

/// out = affine_floor(scale[key], x, shift[key], floor) for every element.
template <class T>
void norm_affine(const Sizes& sizes, const Strides& key_strides, std::int64_t keys, const T* x,
                 const double* scale, const double* shift, T floor, T* out) {
  dispatch(
      [&] { plan::count(plan::Family::norm, 3.0 * double(num_elements(sizes))); },
      MESHTENSOR_ON_GPU(gpu::norm_affine(sizes, key_strides, keys, x, scale, shift, floor, out)),
      [&] { cpu::norm_affine(sizes, key_strides, keys, x, scale, shift, floor, out); });
}

/// Whether this processor's kernels take a normalisation's output as the map of its input
/// (ChannelAffine: the CPU's convolutions compute it as they read, never written); a GPU's read it
/// written out. A plan answers for the run it stands for.
inline bool reads_mapped_inputs() { return !takes_gpu_roads(); }

/// `positions` channels-last positions of x (f.channels() each) through the per-channel map `f`
/// into out: the values batch norm writes, for a CPU kernel that cannot compute them as it reads.
template <class T>
void norm_affine(const ChannelAffine& f, std::int64_t positions, const T* x, T* out) {
  dispatch([&] { plan::count(plan::Family::norm, 3.0 * double(positions * f.channels())); },
           [] { return false; },
           [&] {
             cpu::norm_affine(Sizes{positions, f.channels()}, Strides{0, 1}, f.channels(), x,
                              f.scale.data(), f.shift.data(), T(f.floor), out);
           });
}

/// Per key, the sums of g' and of g' (scale[key] v + shift[key]), g' being g masked by `mask`;
/// interleaved, two per key, into `sums`.
template <class T>
void norm_gradient_sums(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                        const T* g, const T* v, const double* scale, const double* shift,
                        const ReluMask<T>& mask, double* sums) {
  dispatch(
      [&] { plan::count(plan::Family::norm, 6.0 * double(num_elements(sizes))); },
      MESHTENSOR_ON_GPU(
          gpu::norm_gradient_sums(sizes, key_strides, keys, g, v, scale, shift, mask, sums)),
      [&] { cpu::norm_gradient_sums(sizes, key_strides, keys, g, v, scale, shift, mask, sums); });
}

/// dx = affine_input_gradient(p[key], g', q[key], v, r[key]), g' being g masked by `mask`.
template <class T>
void norm_input_gradient(const Sizes& sizes, const Strides& key_strides, std::int64_t keys,
                         const T* g, const T* v, const ReluMask<T>& mask, const double* p,
                         const double* q, const double* r, T* dx) {
  dispatch([&] { plan::count(plan::Family::norm, 7.0 * double(num_elements(sizes))); },
           MESHTENSOR_ON_GPU(
               gpu::norm_input_gradient(sizes, key_strides, keys, g, v, mask, p, q, r, dx)),
           [&] { cpu::norm_input_gradient(sizes, key_strides, keys, g, v, mask, p, q, r, dx); });
}

/// out[i] = 1 / sqrt(variance[i] + epsilon), in double, rounded to T (a batch norm's running
/// statistics into its evaluation-mode scale).
template <class T>
void norm_inverse_std(const T* variance, std::int64_t n, double epsilon, T* out) {
  dispatch([&] { plan::count(plan::Family::norm, 2.0 * double(n)); },
           MESHTENSOR_ON_GPU(gpu::norm_inverse_std(variance, n, epsilon, out)),
           [&] {
             for (std::int64_t i = 0; i < n; ++i)
               out[i] = T(1.0 / std::sqrt(double(variance[i]) + epsilon));
           });
}

}  // namespace meshtensor::kernels
