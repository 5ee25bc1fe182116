#pragma once
// The fused Dice + cross-entropy loss on one block of class scores, position by position: the
// softmax of each position's scores is computed in registers, used, and dropped (never stored).
//   sums:      what the loss needs from the block (DiceCrossEntropySums), in double
//   gradient:  d loss / d score from the scores, the labels and the loss's coefficients
// Positions are split over the processor's compute threads; the parts' sums are added in a fixed
// order, so a run gives the same bits each time.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "meshtensor/device/processor.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace meshtensor::kernels {

/// A block of class scores, row-major `outer` x `classes` x `inner`: the class dim in the middle.
struct ClassBlock {
  std::int64_t outer = 1, classes = 1, inner = 1;
  std::int64_t positions() const { return outer * inner; }
};

/// Where each sum sits in the array the sums kernel fills: the weighted log-likelihood
/// sum(w_c y log p), the weight sum(w_c y), then per class the overlap sum(p y), sum(p), sum(y).
struct DiceCrossEntropySums {
  std::int64_t classes;
  std::int64_t size() const { return 2 + 3 * classes; }
  static constexpr std::int64_t log_likelihood = 0, weight = 1;
  std::int64_t overlap(std::int64_t c) const { return 2 + c; }
  std::int64_t predicted(std::int64_t c) const { return 2 + classes + c; }
  std::int64_t truth(std::int64_t c) const { return 2 + 2 * classes + c; }
};

/// What the gradient kernel needs: 1 / sum(w_c y), and per class the coefficients of the Dice
/// term's derivative with respect to p_c, dL/dp_c = dice_label[c] * y_c + dice_constant[c].
struct DiceCrossEntropyCoefficients {
  double inverse_weight = 0;
  std::vector<double> dice_label, dice_constant;
};

namespace cpu {
namespace detail {

// Runs part(p, first, last) over the positions [first, last) of `n`, a part per thread.
template <class Part>
int over_positions(std::int64_t n, Part&& part) {
  constexpr std::int64_t grain = 1 << 14;
  const int parts = static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(compute_threads(), n / grain)));
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1) if (parts > 1)
#endif
  for (int p = 0; p < parts; ++p) part(p, n * p / parts, n * (p + 1) / parts);
  return parts;
}

// Position q's scores as probabilities into `p` and their logarithms into `log_p`.
template <class T>
void softmax_at(const ClassBlock& b, const T* scores, std::int64_t q, float* p, float* log_p) {
  const std::int64_t o = q / b.inner, i = q % b.inner;
  const T* at = scores + o * b.classes * b.inner + i;
  float largest = -INFINITY;
  for (std::int64_t c = 0; c < b.classes; ++c)
    largest = std::max(largest, static_cast<float>(at[c * b.inner]));
  float total = 0;
  for (std::int64_t c = 0; c < b.classes; ++c) {
    log_p[c] = static_cast<float>(at[c * b.inner]) - largest;
    p[c] = std::exp(log_p[c]);
    total += p[c];
  }
  const float log_total = std::log(total);
  for (std::int64_t c = 0; c < b.classes; ++c) {
    p[c] /= total;
    log_p[c] -= log_total;
  }
}

inline std::int64_t element(const ClassBlock& b, std::int64_t q, std::int64_t c) {
  return (q / b.inner * b.classes + c) * b.inner + q % b.inner;
}

}  // namespace detail

/// sums[k] (DiceCrossEntropySums) over the block's positions, for class weights `weights`.
template <class T, class L>
void dice_cross_entropy_sums(const ClassBlock& b, const T* scores, const L* labels,
                             const float* weights, double* sums) {
  const DiceCrossEntropySums at{b.classes};
  const std::int64_t n = at.size();
  std::vector<std::vector<double>> parts(static_cast<std::size_t>(compute_threads()),
                                         std::vector<double>(static_cast<std::size_t>(n), 0.0));
  const int used = detail::over_positions(b.positions(), [&](int part, auto first, auto last) {
    std::vector<double>& s = parts[static_cast<std::size_t>(part)];
    std::vector<float> p(static_cast<std::size_t>(b.classes)), log_p(p.size());
    for (std::int64_t q = first; q < last; ++q) {
      detail::softmax_at(b, scores, q, p.data(), log_p.data());
      for (std::int64_t c = 0; c < b.classes; ++c) {
        const float y = static_cast<float>(labels[detail::element(b, q, c)]);
        const double weighted = double(weights[c]) * double(y);
        s[at.log_likelihood] += weighted * double(log_p[c]);
        s[at.weight] += weighted;
        s[at.overlap(c)] += double(p[c]) * double(y);
        s[at.predicted(c)] += double(p[c]);
        s[at.truth(c)] += double(y);
      }
    }
  });
  for (std::int64_t k = 0; k < n; ++k) {
    double total = 0;
    for (int part = 0; part < used; ++part) total += parts[std::size_t(part)][std::size_t(k)];
    sums[k] = total;
  }
}

/// grad = scale * d loss / d scores: the cross-entropy's (p_c W - w_c y_c) / sum(w y), W the
/// position's sum(w_c y_c), plus the Dice term through the softmax, p_c (h_c - sum_k p_k h_k).
template <class T, class L>
void dice_cross_entropy_gradient(const ClassBlock& b, const T* scores, const L* labels,
                                 const float* weights, const DiceCrossEntropyCoefficients& k,
                                 double scale, T* grad) {
  detail::over_positions(b.positions(), [&](int, auto first, auto last) {
    std::vector<float> p(static_cast<std::size_t>(b.classes)), log_p(p.size()), y(p.size()),
        h(p.size());
    for (std::int64_t q = first; q < last; ++q) {
      detail::softmax_at(b, scores, q, p.data(), log_p.data());
      double weight = 0, p_dot_h = 0;
      for (std::int64_t c = 0; c < b.classes; ++c) {
        y[c] = static_cast<float>(labels[detail::element(b, q, c)]);
        weight += double(weights[c]) * double(y[c]);
        h[c] = static_cast<float>(k.dice_label[c] * y[c] + k.dice_constant[c]);
        p_dot_h += double(p[c]) * double(h[c]);
      }
      for (std::int64_t c = 0; c < b.classes; ++c) {
        const double cross_entropy =
            (double(p[c]) * weight - double(weights[c]) * double(y[c])) * k.inverse_weight;
        const double dice = double(p[c]) * (double(h[c]) - p_dot_h);
        grad[detail::element(b, q, c)] = T(static_cast<float>(scale * (cross_entropy + dice)));
      }
    }
  });
}

}  // namespace cpu
}  // namespace meshtensor::kernels
