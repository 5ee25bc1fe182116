#pragma once
// The fused Dice + cross-entropy loss on one block of class scores, a tile of positions at a time:
// the tile's softmax is computed in a buffer of a few hundred bytes, used, and dropped.
//   sums:      what the loss needs from the block (DiceCrossEntropySums), in double
//   gradient:  d loss / d score from the scores, the labels and the loss's coefficients
// Positions are split over the processor's compute threads; the parts' sums are added in a fixed
// order, so a run gives the same bits each time.
// Blocks with 2 or 3 classes innermost take their whole tiles in AVX-512 registers where the CPU
// has them (class_tiles.hpp), the rest here.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "meshtensor/device/processor.hpp"
#include "meshtensor/kernels/cpu/class_tiles.hpp"
#include "meshtensor/kernels/cpu/vector_math.hpp"

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

// Positions are taken a tile of up to `lanes` at a time, each step of the softmax a loop over the
// tile's lanes (vectorized, with exp_approx and log_approx): one position at a time, the class
// loops are too short to vectorize and libm's expf and logf run once per score.
constexpr std::int64_t lanes = 16;

// Positions whose class-c score sits at base + j * lane_stride + c * class_stride, j < n.
struct Tile {
  std::int64_t base = 0, n = 0, lane_stride = 1, class_stride = 1;
  std::int64_t at(std::int64_t j, std::int64_t c) const {
    return base + j * lane_stride + c * class_stride;
  }
};

// Visits positions [first, last) of the block as tiles: runs of one outer index (class dim
// not last), or of consecutive positions (class dim last: inner = 1).
template <class Visit>
void for_each_tile(const ClassBlock& b, std::int64_t first, std::int64_t last, Visit&& visit) {
  for (std::int64_t q = first; q < last;) {
    if (b.inner == 1) {
      const std::int64_t n = std::min(lanes, last - q);
      visit(Tile{q * b.classes, n, b.classes, 1});
      q += n;
      continue;
    }
    const std::int64_t o = q / b.inner, i = q % b.inner;
    const std::int64_t n = std::min({lanes, last - q, b.inner - i});
    visit(Tile{o * b.classes * b.inner + i, n, 1, b.inner});
    q += n;
  }
}

// One tile's scores, labels and softmax, class-major ([c * lanes + j]), and per lane the
// largest score and the softmax's normaliser.
struct TileSoftmax {
  std::vector<float> score, label, p;
  float largest[lanes], total[lanes];

  explicit TileSoftmax(std::int64_t classes)
      : score(std::size_t(classes * lanes)), label(score.size()), p(score.size()) {}

  // `C`: the class count where the caller knows it at compile time (0: b.classes). A tile of a
  // block whose classes come last then reads positions C values apart, a stride the compiler
  // turns into shuffles, where a stride known only at run time reads one value at a time.
  template <int C, class T, class L>
  void compute(const ClassBlock& b, const T* scores, const L* labels, const Tile& t) {
    const std::int64_t n = t.n;
    std::fill(largest, largest + lanes, -INFINITY);
    std::fill(total, total + lanes, 0.0f);
    if (C > 0 && t.lane_stride == C && t.class_stride == 1 && n == lanes)
      gather<C>(scores + t.base, labels + t.base, C, t);
    else
      gather<0>(scores + t.base, labels + t.base, b.classes, t);
    for (std::int64_t c = 0; c < b.classes; ++c)
      for (std::int64_t j = 0; j < n; ++j) {
        const float e = exp_approx(score[c * lanes + j] - largest[j]);
        p[c * lanes + j] = e;
        total[j] += e;
      }
    for (std::int64_t c = 0; c < b.classes; ++c)
      for (std::int64_t j = 0; j < n; ++j) p[c * lanes + j] /= total[j];
  }

 private:
  // The tile's scores and labels, class-major, and each lane's largest score: of a whole tile of
  // C classes last (C > 0, the strides known at compile time), or of any tile (C = 0).
  template <int C, class T, class L>
  void gather(const T* scores, const L* labels, std::int64_t classes, const Tile& t) {
    const std::int64_t n = C > 0 ? lanes : t.n;
    const std::int64_t lane_stride = C > 0 ? C : t.lane_stride;
    const std::int64_t class_stride = C > 0 ? 1 : t.class_stride;
    for (std::int64_t c = 0; c < (C > 0 ? C : classes); ++c)
      for (std::int64_t j = 0; j < n; ++j) {
        const float s = static_cast<float>(scores[j * lane_stride + c * class_stride]);
        score[c * lanes + j] = s;
        label[c * lanes + j] = static_cast<float>(labels[j * lane_stride + c * class_stride]);
        largest[j] = std::max(largest[j], s);
      }
  }
};

// Runs body(std::integral_constant<int, C>) with C the block's class count where it is one of
// the few a segmentation has (2 or 3), else 0 (counted at run time).
template <class Body>
void with_class_count(std::int64_t classes, Body&& body) {
  if (classes == 2) return body(std::integral_constant<int, 2>{});
  if (classes == 3) return body(std::integral_constant<int, 3>{});
  body(std::integral_constant<int, 0>{});
}

}  // namespace detail

/// sums[k] (DiceCrossEntropySums) over the block's positions, for class weights `weights`.
template <class T, class L>
void dice_cross_entropy_sums(const ClassBlock& b, const T* scores, const L* labels,
                             const float* weights, double* sums) {
  using detail::lanes;
  const DiceCrossEntropySums at{b.classes};
  const std::int64_t n = at.size();
  // Each part sums lane by lane (lane_sums[k * lanes + j]), so the loops vectorize in double.
  std::vector<std::vector<double>> parts(static_cast<std::size_t>(compute_threads()),
                                         std::vector<double>(std::size_t(n * lanes), 0.0));
  int used = 0;
  detail::with_class_count(b.classes, [&](auto known) {
    used = detail::over_positions(b.positions(), [&](int part, auto first, auto last) {
      double* s = parts[static_cast<std::size_t>(part)].data();
      constexpr int C = decltype(known)::value;
      if constexpr (class_tiles_fit<C, T, L>())  // classes innermost: whole tiles in registers
        if (b.inner == 1 && avx512_loops_run())
          first = class_tile_sums<C>(scores, labels, weights, first, last, s);
      detail::TileSoftmax tile(b.classes);
      detail::for_each_tile(b, first, last, [&](const detail::Tile& t) {
        tile.compute<C>(b, scores, labels, t);
        float log_total[lanes];
        for (std::int64_t j = 0; j < t.n; ++j) log_total[j] = log_approx(tile.total[j]);
        for (std::int64_t c = 0; c < b.classes; ++c) {
          const double w = weights[c];
          const float* score = &tile.score[std::size_t(c * lanes)];
          const float* y = &tile.label[std::size_t(c * lanes)];
          const float* p = &tile.p[std::size_t(c * lanes)];
          for (std::int64_t j = 0; j < t.n; ++j) {
            const float log_p = score[j] - tile.largest[j] - log_total[j];
            const double weighted = w * double(y[j]);
            s[at.log_likelihood * lanes + j] += weighted * double(log_p);
            s[at.weight * lanes + j] += weighted;
            s[at.overlap(c) * lanes + j] += double(p[j]) * double(y[j]);
            s[at.predicted(c) * lanes + j] += double(p[j]);
            s[at.truth(c) * lanes + j] += double(y[j]);
          }
        }
      });
    });
  });
  for (std::int64_t k = 0; k < n; ++k) {
    double total = 0;
    for (int part = 0; part < used; ++part)
      for (std::int64_t j = 0; j < lanes; ++j)
        total += parts[std::size_t(part)][std::size_t(k * lanes + j)];
    sums[k] = total;
  }
}

/// grad = scale * d loss / d scores: the cross-entropy's (p_c W - w_c y_c) / sum(w y), W the
/// position's sum(w_c y_c), plus the Dice term through the softmax, p_c (h_c - sum_k p_k h_k).
template <class T, class L>
void dice_cross_entropy_gradient(const ClassBlock& b, const T* scores, const L* labels,
                                 const float* weights, const DiceCrossEntropyCoefficients& k,
                                 double scale, T* grad) {
  using detail::lanes;
  detail::with_class_count(b.classes, [&](auto known) {
    detail::over_positions(b.positions(), [&](int, auto first, auto last) {
      constexpr int C = decltype(known)::value;
      if constexpr (class_tiles_fit<C, T, L>())  // classes innermost: whole tiles in registers
        if (b.inner == 1 && avx512_loops_run()) {
          float label_term[C], constant[C];
          for (int c = 0; c < C; ++c) {
            label_term[c] = static_cast<float>(k.dice_label[std::size_t(c)]);
            constant[c] = static_cast<float>(k.dice_constant[std::size_t(c)]);
          }
          first = class_tile_gradient<C>(scores, labels, weights, label_term, constant,
                                         static_cast<float>(k.inverse_weight),
                                         static_cast<float>(scale), first, last, grad);
        }
      detail::TileSoftmax tile(b.classes);
      std::vector<float> h(tile.p.size());
      detail::for_each_tile(b, first, last, [&](const detail::Tile& t) {
        tile.compute<C>(b, scores, labels, t);
        double weight[lanes] = {}, p_dot_h[lanes] = {};
        for (std::int64_t c = 0; c < b.classes; ++c) {
          const double w = weights[c], label_term = k.dice_label[c], constant = k.dice_constant[c];
          const float* y = &tile.label[std::size_t(c * lanes)];
          const float* p = &tile.p[std::size_t(c * lanes)];
          float* hc = &h[std::size_t(c * lanes)];
          for (std::int64_t j = 0; j < t.n; ++j) {
            weight[j] += w * double(y[j]);
            hc[j] = static_cast<float>(label_term * y[j] + constant);
            p_dot_h[j] += double(p[j]) * double(hc[j]);
          }
        }
        for (std::int64_t c = 0; c < b.classes; ++c) {
          const double w = weights[c];
          const float* y = &tile.label[std::size_t(c * lanes)];
          const float* p = &tile.p[std::size_t(c * lanes)];
          const float* hc = &h[std::size_t(c * lanes)];
          for (std::int64_t j = 0; j < t.n; ++j) {
            const double cross_entropy =
                (double(p[j]) * weight[j] - w * double(y[j])) * k.inverse_weight;
            const double dice = double(p[j]) * (double(hc[j]) - p_dot_h[j]);
            grad[t.at(j, c)] = T(static_cast<float>(scale * (cross_entropy + dice)));
          }
        }
      });
    });
  });
}

}  // namespace cpu
}  // namespace meshtensor::kernels
