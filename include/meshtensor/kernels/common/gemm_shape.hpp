#pragma once
// When a sum of products of two operands (einsum's contraction, kernels/cpu/reference/fold.hpp) is
// a batch of matrix products, and how a column-major BLAS (cuBLAS) computes it. The output is
// row-major over its dims; they must read [batch dims][rows][columns], where the batch dims are in
// both operands, the rows in one operand only and the columns in the other only; every summed
// dim must be in both. Each group of dims must collapse to one stride per operand, and each
// operand's matrix must have a contiguous dim. Dims of one element do not count.
//
// The row-major output C[b][i][j] is, column-major, the (columns x rows) matrix C^T with leading
// dimension `columns`: C^T = op(A) op(B) with A the columns' operand and B the rows' operand, which
// is what the BLAS is asked for.

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshtensor/kernels/common/strided.hpp"
#include "meshtensor/kernels/cpu/reference/fold.hpp"

namespace meshtensor::kernels {

/// A strided batched GEMM in the BLAS's column-major terms: C[b] (m x n, ldc) = op(A[b]) (m x k)
/// times op(B[b]) (k x n), A[b] = A + b stride_a (and so for B and C); op(X) is X or, where
/// transposed, X^T, X being stored column-major with its leading dimension.
struct GemmShape {
  std::int64_t m = 1, n = 1, k = 1, batch = 1;
  bool transpose_a = false, transpose_b = false;
  std::int64_t lda = 1, ldb = 1, ldc = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int a_operand = 0;  // which of the two operands is A (the other is B)
};

namespace detail {
// One group of dims (batch, rows, columns or summed) collapsed: its element count, and each
// operand's stride over it; nullopt for an operand whose strides do not collapse. A group of one
// element has no stride of its own: `free` says so.
struct DimGroup {
  std::int64_t size = 1;
  std::array<std::int64_t, 2> stride{0, 0};
  bool free = true;
};

inline std::optional<DimGroup> collapse(const std::vector<std::size_t>& dims, const Sizes& sizes,
                                        const std::array<const Strides*, 2>& strides) {
  DimGroup group;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::size_t d = dims[i];
    for (int k = 0; k < 2; ++k) {
      // Outer to inner: each dim's stride is the next one's times its extent.
      if (!group.free && group.stride[k] != (*strides[k])[d] * sizes[d]) return std::nullopt;
      group.stride[k] = (*strides[k])[d];
    }
    group.size *= sizes[d];
    group.free = false;
  }
  return group;
}

// A matrix of `rows` x `inner` elements at these strides as the BLAS stores it: op(X) is
// rows x inner; X is column-major with `ld`, transposed when the inner dim is the contiguous one.
// False when neither dim is contiguous or the leading dimension would be too small.
inline bool as_blas_matrix(const DimGroup& rows, int row_operand, const DimGroup& inner,
                           int inner_operand, bool* transpose, std::int64_t* ld) {
  const std::int64_t row_stride = rows.free ? 1 : rows.stride[row_operand];
  const std::int64_t inner_stride = inner.free ? 1 : inner.stride[inner_operand];
  if (rows.free || row_stride == 1) {
    // op(X) = X: rows contiguous, the inner dim at the leading dimension.
    *transpose = false;
    *ld = inner.free ? std::max<std::int64_t>(1, rows.size) : inner_stride;
    return *ld >= rows.size;
  }
  if (inner.free || inner_stride == 1) {
    *transpose = true;
    *ld = row_stride;
    return *ld >= inner.size;
  }
  return false;
}
}  // namespace detail

/// The GEMM that computes out[o] = sum over i of x(o, i) y(o, i), if there is one.
template <class T>
std::optional<GemmShape> gemm_shape_of(const Sizes& outer, const Sizes& inner,
                                       const std::array<FoldOperand<T>, 2>& operands) {
  enum Kind { batch, only_x, only_y };
  std::vector<Kind> kinds;
  std::vector<std::size_t> dims;
  for (std::size_t d = 0; d < outer.size(); ++d) {
    if (outer[d] == 0) return std::nullopt;  // nothing to compute: the fold's own loop does it
    if (outer[d] == 1) continue;
    const bool in_x = operands[0].outer_strides[d] != 0, in_y = operands[1].outer_strides[d] != 0;
    if (!in_x && !in_y) return std::nullopt;  // a broadcast output dim
    kinds.push_back(in_x && in_y ? batch : in_x ? only_x : only_y);
    dims.push_back(d);
  }
  // [batch][rows][columns]: the kinds in runs, batch first.
  std::vector<std::size_t> groups[3];
  std::vector<Kind> order;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (order.empty() || order.back() != kinds[i]) {
      for (Kind seen : order)
        if (seen == kinds[i]) return std::nullopt;  // a kind in two runs
      order.push_back(kinds[i]);
    }
    groups[kinds[i]].push_back(dims[i]);
  }
  if (!order.empty() && order[0] != batch && !groups[batch].empty()) return std::nullopt;
  std::vector<std::size_t> summed;
  for (std::size_t d = 0; d < inner.size(); ++d) {
    if (inner[d] == 0) return std::nullopt;
    if (inner[d] == 1) continue;
    if (operands[0].inner_strides[d] == 0 || operands[1].inner_strides[d] == 0)
      return std::nullopt;  // a dim one operand sums alone
    summed.push_back(d);
  }
  const std::array<const Strides*, 2> outer_strides{&operands[0].outer_strides,
                                                    &operands[1].outer_strides};
  const std::array<const Strides*, 2> inner_strides{&operands[0].inner_strides,
                                                    &operands[1].inner_strides};
  const auto b = detail::collapse(groups[batch], outer, outer_strides);
  const auto x_only = detail::collapse(groups[only_x], outer, outer_strides);
  const auto y_only = detail::collapse(groups[only_y], outer, outer_strides);
  const auto k = detail::collapse(summed, inner, inner_strides);
  if (!b || !x_only || !y_only || !k) return std::nullopt;

  // The output's rows are the free group that comes first (x's when neither or only x's has dims).
  bool rows_are_y = false;
  for (Kind kind : order)
    if (kind != batch) {
      rows_are_y = kind == only_y;
      break;
    }
  const int row_operand = rows_are_y ? 1 : 0, column_operand = 1 - row_operand;
  const detail::DimGroup& rows = rows_are_y ? *y_only : *x_only;
  const detail::DimGroup& columns = rows_are_y ? *x_only : *y_only;

  GemmShape g;
  g.m = columns.size;
  g.n = rows.size;
  g.k = k->size;
  g.batch = b->size;
  g.a_operand = column_operand;
  g.ldc = std::max<std::int64_t>(1, g.m);
  g.stride_c = g.m * g.n;
  g.stride_a = b->free ? 0 : b->stride[column_operand];
  g.stride_b = b->free ? 0 : b->stride[row_operand];
  // op(A) = the columns' operand as columns x summed; op(B) = the rows' operand as summed x rows,
  // that is, rows x summed transposed.
  bool rows_by_summed_transposed = false;
  if (!detail::as_blas_matrix(columns, column_operand, *k, column_operand, &g.transpose_a,
                              &g.lda) ||
      !detail::as_blas_matrix(rows, row_operand, *k, row_operand, &rows_by_summed_transposed,
                              &g.ldb))
    return std::nullopt;
  // op(B) is summed x rows: the stored matrix read the other way round (its leading dimension
  // stays), so the flag flips.
  g.transpose_b = !rows_by_summed_transposed;
  for (std::int64_t v : {g.m, g.n, g.k, g.batch, g.lda, g.ldb, g.ldc})
    if (v > INT_MAX) return std::nullopt;  // the BLAS's int arguments
  return g;
}

}  // namespace meshtensor::kernels
