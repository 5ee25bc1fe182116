#pragma once
// The normalisations' per-element formulas and the combination of partial statistics, said once
// for the CPU loops (ops/norm.hpp) and the GPU kernels (kernels/cuda/norm.hpp) through
// kernels/common/shared_source.hpp: a recomputed output, and the ReLU mask taken from it, are the
// same values on both sides.

#include <vector>

#include "meshtensor/kernels/common/shared_source.hpp"

namespace meshtensor::kernels::shared {
// The shared text carries no comments, so they are here:
//   PartialMoments: the count, mean and sum of squared deviations of some values.
//   combine_moments: those of two disjoint sets of values, from each set's (Chan, Golub and
//     LeVeque's pairwise update: stable where the sums of x and x² are not).
//   affine_floor: scale x + shift, or `floor` where that is below it (-inf: no floor; 0: a
//     ReLU). The comparison selects by value, which the CPU loops vectorise.
//   affine_input_gradient: a normalisation's input gradient, p g + q v + r per element, where p,
//     q and r are per-statistic constants and v is the input or the output.
//   finish_statistics: key k's statistics from its moments in `count_parts` parts (a block's,
//     or each processor's, (count, mean, m2) per key, part after part), combined in part order:
//     stats = [mean | variance | 1 / sqrt(variance + epsilon)], `keys` each, over `count`
//     elements.
//   affine_coefficients: a x + b for key k = gamma (x - mean) inv_std + beta, or where
//     `standard` (x - mean) inv_std.
//   gradient_terms: the input gradient p g' + q v + r for key k from the sums S1 = sum g' and
//     S2 = sum g' y (interleaved per key, y the normalised x): of gamma x̂ + beta (v = x:
//     p = gamma inv_std, q = -p inv_std S2 / n, r = -p S1 / n - q mean), or where `standard`
//     of x̂ (v = x̂: p = inv_std, q = -inv_std S2 / n, r = -inv_std S1 / n).
// clang-format off
MESHTENSOR_SHARED_SOURCE(norm_formulas_text,
struct PartialMoments {
  double count = 0, mean = 0, m2 = 0;
};
MESHTENSOR_DEVICE inline PartialMoments combine_moments(const PartialMoments& a,
                                                        const PartialMoments& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count, delta = b.mean - a.mean;
  return {n, a.mean + delta * b.count / n, a.m2 + b.m2 + delta * delta * a.count * b.count / n};
}
template <class T>
MESHTENSOR_DEVICE inline T affine_floor(T scale, T x, T shift, T floor) {
  const T y = scale * x + shift;
  return y < floor ? floor : y;
}
template <class T>
MESHTENSOR_DEVICE inline T affine_input_gradient(T p, T g, T q, T v, T r) {
  return p * g + q * v + r;
}
MESHTENSOR_DEVICE inline void finish_statistics(const double* parts, long long count_parts,
                                                long long keys, long long k, double count,
                                                double epsilon, double* stats) {
  PartialMoments total;
  for (long long r = 0; r < count_parts; ++r) {
    const double* q = parts + (r * keys + k) * 3;
    PartialMoments part;
    part.count = q[0];
    part.mean = q[1];
    part.m2 = q[2];
    total = combine_moments(total, part);
  }
  const double variance = total.m2 / count;
  stats[k] = total.mean;
  stats[keys + k] = variance;
  stats[2 * keys + k] = 1.0 / sqrt(variance + epsilon);
}
MESHTENSOR_DEVICE inline void affine_coefficients(const double* stats, long long keys, long long k,
                                                  bool standard, double gamma, double beta,
                                                  double* a, double* b) {
  const double inv_std = stats[2 * keys + k];
  if (standard) {
    a[k] = inv_std;
    b[k] = -stats[k] * inv_std;
  } else {
    a[k] = gamma * inv_std;
    b[k] = beta - stats[k] * gamma * inv_std;
  }
}
MESHTENSOR_DEVICE inline void gradient_terms(const double* stats, long long keys, long long k,
                                             bool standard, double gamma, const double* sums,
                                             double count, double* p, double* q, double* r) {
  const double inv_std = stats[2 * keys + k];
  if (standard) {
    p[k] = inv_std;
    q[k] = -inv_std * sums[2 * k + 1] / count;
    r[k] = -inv_std * sums[2 * k] / count;
  } else {
    const double scale = gamma * inv_std;
    const double slope = scale * inv_std * sums[2 * k + 1] / count;
    p[k] = scale;
    q[k] = -slope;
    r[k] = -scale * sums[2 * k] / count + slope * stats[k];
  }
}
)
// clang-format on

}  // namespace meshtensor::kernels::shared

namespace meshtensor::kernels {
/// Where a ReLU fused after a normalisation passed the gradient: where
/// affine_floor(scale[key], x, shift[key], 0) > 0, the output computed again from x (x null:
/// everywhere). scale and shift are per key, in the processor's memory.
template <class T>
struct ReluMask {
  const T* x = nullptr;
  const double* scale = nullptr;
  const double* shift = nullptr;
};
}  // namespace meshtensor::kernels
