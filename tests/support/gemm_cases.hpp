#pragma once
// Contractions of two operands written as einsum strings over one-letter dims ("bmk,bkn->bmn"),
// with each operand row-major over its dims: matrix products in every storage order, batches,
// matrix-vector and dot products, outer products, groups of several dims, dims of one element —
// and contractions that are no GEMM. Also the strided batched GEMM as cuBLAS documents it, on the
// CPU, to run a GemmShape.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <meshtensor/kernels/common/gemm_shape.hpp>
#include <meshtensor/kernels/cpu/reference/fold.hpp>

namespace meshtensor::testing {

struct GemmCase {
  std::string einsum;
  bool is_gemm;  // whether the contraction must become a GEMM
};

inline std::vector<GemmCase> gemm_cases() {
  return {
      {"mk,kn->mn", true},        {"mk,nk->mn", true},     {"km,kn->mn", true},
      {"km,nk->mn", true},        {"bmk,bkn->bmn", true},  {"mk,kn->nm", true},
      {"bkm,bnk->bnm", true},     {"mk,k->m", true},       {"k,k->", true},
      {"m,n->mn", true},          {"abk,kcd->abcd", true}, {"mxk,kn->mxn", true},
      {"bmk,bkn->bmxn", true},    {"kqm,kqn->mn", true},   {"bmk,kn->bmn", true},
      {"mbk,bkn->mbn", false},    {"mk,kn->m", false},     {"mak,kn->amn", false},
      {"mkz,zkn->zmn", false},    {"mk,kn->mnw", false},   {"bshd,bkhd->bhsk", false},
      {"bhsk,bkhd->bshd", false},
  };
}

/// A case's sizes (x and 1 for the letters x, q; others 2 to 7) and each operand's fold strides.
struct GemmOperands {
  kernels::Sizes outer, inner;
  std::array<std::vector<std::string>, 2> dims;
  std::array<kernels::FoldOperand<float>, 2> operands;
  std::array<std::int64_t, 2> elements{1, 1};
};

inline std::int64_t letter_size(char c) {
  if (c == 'x' || c == 'q') return 1;
  return 2 + (c * 7) % 6;
}

inline GemmOperands gemm_operands(const std::string& einsum) {
  const auto comma = einsum.find(','), arrow = einsum.find("->");
  const std::array<std::string, 2> in{einsum.substr(0, comma),
                                      einsum.substr(comma + 1, arrow - comma - 1)};
  const std::string out = einsum.substr(arrow + 2);
  std::string summed;
  for (const auto& s : in)
    for (char c : s)
      if (out.find(c) == std::string::npos && summed.find(c) == std::string::npos) summed += c;
  GemmOperands g;
  for (char c : out) g.outer.push_back(letter_size(c));
  for (char c : summed) g.inner.push_back(letter_size(c));
  for (int k = 0; k < 2; ++k) {
    std::map<char, std::int64_t> stride;
    std::int64_t next = 1;
    for (std::size_t i = in[k].size(); i-- > 0;) {
      stride[in[k][i]] = next;
      next *= letter_size(in[k][i]);
    }
    g.elements[k] = next;
    auto strides_over = [&](const std::string& letters) {
      kernels::Strides s;
      for (char c : letters) s.push_back(stride.count(c) ? stride[c] : 0);
      return s;
    };
    g.operands[k] = {nullptr, strides_over(out), strides_over(summed)};
  }
  return g;
}

/// C[b] = op(A[b]) op(B[b]) as cuBLAS's strided batched GEMM defines it (column-major, alpha 1,
/// beta 0), accumulated in double.
template <class T>
void blas_gemm(const kernels::GemmShape& g, const T* a, const T* b, double* c) {
  for (std::int64_t batch = 0; batch < g.batch; ++batch)
    for (std::int64_t j = 0; j < g.n; ++j)
      for (std::int64_t i = 0; i < g.m; ++i) {
        double total = 0;
        for (std::int64_t l = 0; l < g.k; ++l) {
          const T* ab = a + batch * g.stride_a;
          const T* bb = b + batch * g.stride_b;
          const T op_a = g.transpose_a ? ab[l + i * g.lda] : ab[i + l * g.lda];
          const T op_b = g.transpose_b ? bb[j + l * g.ldb] : bb[l + j * g.ldb];
          total += double(op_a) * double(op_b);
        }
        c[batch * g.stride_c + i + j * g.ldc] = total;
      }
}

}  // namespace meshtensor::testing
