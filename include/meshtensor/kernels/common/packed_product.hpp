#pragma once
// A sum of products of two operands that is a batch of matrix products but for the order of its
// dims (attention's scores: heads between the rows in both operands), as one: each operand copied
// into a packed block, x as [batch][rows][summed] and y as [batch][summed][columns] (or either
// with its two groups the other way round, whichever reads the operand in order), their product
// [batch][rows][columns] scattered into the output's order. Batch dims are in both operands and
// the output, rows in x alone, columns in y alone, and every summed dim in both operands; a
// contraction with a dim that only one operand sums or that the output broadcasts has no packed
// form. Dims of one element do not count.

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshtensor/kernels/common/gemm_shape.hpp"

namespace meshtensor::kernels {

/// How to run a contraction as one GEMM on packed copies of its operands.
struct PackedProduct {
  int x_operand = 0;  // the operand whose dims are the rows
  std::int64_t batch = 1, rows = 1, columns = 1, summed = 1;
  // Each packed block's dims in order, and the operand's strides along them.
  Sizes x_sizes, y_sizes;
  Strides x_strides, y_strides;
  // x as [B][M][K] or else [B][K][M]; y as [B][N][K] or else [B][K][N].
  bool x_summed_last = true, y_summed_last = false;
  // The product's dims [batch][rows][columns] and the output's strides along them.
  Sizes out_sizes;
  Strides out_strides;
  GemmShape gemm;  // the packed blocks' product

  std::int64_t x_elements() const { return batch * rows * summed; }
  std::int64_t y_elements() const { return batch * summed * columns; }
  std::int64_t outputs() const { return batch * rows * columns; }
};

/// The packed form of out[o] = sum over i of x(o, i) y(o, i), if it has one.
template <class T>
std::optional<PackedProduct> packed_product_of(const Sizes& outer, const Sizes& inner,
                                               const std::array<FoldOperand<T>, 2>& operands) {
  const Strides out_row_major = row_major_strides(outer);
  std::vector<std::size_t> batch, only[2], summed;
  for (std::size_t d = 0; d < outer.size(); ++d) {
    if (outer[d] == 0) return std::nullopt;
    if (outer[d] == 1) continue;
    const bool in_x = operands[0].outer_strides[d] != 0, in_y = operands[1].outer_strides[d] != 0;
    if (!in_x && !in_y) return std::nullopt;
    (in_x && in_y ? batch : only[in_x ? 0 : 1]).push_back(d);
  }
  for (std::size_t d = 0; d < inner.size(); ++d) {
    if (inner[d] == 0) return std::nullopt;
    if (inner[d] == 1) continue;
    if (operands[0].inner_strides[d] == 0 || operands[1].inner_strides[d] == 0) return std::nullopt;
    summed.push_back(d);
  }
  PackedProduct p;
  // The rows are the group whose first dim comes first in the output, so that the product
  // scatters in order where the output's dims allow.
  p.x_operand = !only[1].empty() && (only[0].empty() || only[1].front() < only[0].front()) ? 1 : 0;
  const FoldOperand<T>& x = operands[p.x_operand];
  const FoldOperand<T>& y = operands[1 - p.x_operand];
  const std::vector<std::size_t>& rows = only[p.x_operand];
  const std::vector<std::size_t>& columns = only[1 - p.x_operand];
  auto add_outer = [&](const std::vector<std::size_t>& dims, const FoldOperand<T>& o, Sizes& sizes,
                       Strides& strides, std::int64_t& count) {
    for (std::size_t d : dims) {
      sizes.push_back(outer[d]);
      strides.push_back(o.outer_strides[d]);
      count *= outer[d];
    }
  };
  auto add_summed = [&](const FoldOperand<T>& o, Sizes& sizes, Strides& strides) {
    for (std::size_t d : summed) {
      sizes.push_back(inner[d]);
      strides.push_back(o.inner_strides[d]);
    }
  };
  // Each operand packs with the summed dims last where its contiguous dim is a summed one, else
  // first, so that packing reads it in order.
  auto summed_last = [&](const FoldOperand<T>& o) {
    std::int64_t least_outer = INT64_MAX, least_summed = INT64_MAX;
    for (std::size_t d = 0; d < outer.size(); ++d)
      if (outer[d] > 1 && o.outer_strides[d] != 0)
        least_outer = std::min(least_outer, o.outer_strides[d]);
    for (std::size_t d : summed) least_summed = std::min(least_summed, o.inner_strides[d]);
    return least_summed <= least_outer;
  };
  p.x_summed_last = summed_last(x);
  p.y_summed_last = summed_last(y);
  std::int64_t unused = 1;
  add_outer(batch, x, p.x_sizes, p.x_strides, p.batch);
  if (!p.x_summed_last) add_summed(x, p.x_sizes, p.x_strides);
  add_outer(rows, x, p.x_sizes, p.x_strides, p.rows);
  if (p.x_summed_last) add_summed(x, p.x_sizes, p.x_strides);
  add_outer(batch, y, p.y_sizes, p.y_strides, unused);
  if (!p.y_summed_last) add_summed(y, p.y_sizes, p.y_strides);
  add_outer(columns, y, p.y_sizes, p.y_strides, p.columns);
  if (p.y_summed_last) add_summed(y, p.y_sizes, p.y_strides);
  for (std::size_t d : summed) p.summed *= inner[d];
  for (const auto* dims : std::array<const std::vector<std::size_t>*, 3>{&batch, &rows, &columns})
    for (std::size_t d : *dims) {
      p.out_sizes.push_back(outer[d]);
      p.out_strides.push_back(out_row_major[d]);
    }
  // The packed blocks' product onto [B][M][N]: x [B][M][K] or [B][K][M], y [B][N][K] or
  // [B][K][N].
  const std::int64_t m = p.rows, n = p.columns, k = p.summed;
  const std::array<FoldOperand<T>, 2> packed{
      p.x_summed_last ? FoldOperand<T>{nullptr, {m * k, k, 0}, {1}}
                      : FoldOperand<T>{nullptr, {k * m, 1, 0}, {m}},
      p.y_summed_last ? FoldOperand<T>{nullptr, {n * k, 0, k}, {1}}
                      : FoldOperand<T>{nullptr, {k * n, 0, 1}, {n}}};
  const auto gemm = gemm_shape_of(Sizes{p.batch, p.rows, p.columns}, Sizes{p.summed}, packed);
  if (!gemm) return std::nullopt;
  p.gemm = *gemm;
  return p;
}

}  // namespace meshtensor::kernels
