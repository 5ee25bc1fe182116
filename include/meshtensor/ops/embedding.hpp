#pragma once
// embedding: the rows of a table that token ids name, as Mesh-TensorFlow's gather computes them —
// the ids' one-hot vectors contracted with the table over the vocabulary — so the table may be
// split over the vocabulary (each processor contributes the rows it holds, summed across the
// axis) or over its other dims, and its gradient is an einsum too.

#include <string>
#include <vector>

#include "meshtensor/ops/einsum.hpp"
#include "meshtensor/ops/one_hot.hpp"

namespace meshtensor {

/**
 * [ids' dims..., table's dims but `vocab`]: for each id the table's row at that index along
 * `vocab` (zeros for an id outside the vocabulary). ids hold whole numbers in a floating tensor.
 * It costs a matrix product, 2 x ids x vocab x the row's size operations, and a one-hot block of
 * ids x vocab elements per processor (less where `vocab` is split): cheap for the vocabularies of
 * thousands it is meant for, where the product runs at the matrix units' speed.
 *
 * ```cpp
 * auto h = embedding(tokens, table, "vocab");   // tokens [batch, seq], table [vocab, model]
 * ```
 */
template <class T, class I>
Tensor<T> embedding(const Tensor<I>& ids, const Tensor<T>& table, const std::string& vocab) {
  if (!table.shape().contains(vocab))
    throw ShapeError("embedding: table " + table.shape().to_string() + " has no dim " +
                     detail::quote(vocab) + " to look ids up in; its dims are " +
                     detail::quote_list(table.shape().names()));
  if (ids.shape().contains(vocab))
    throw ShapeError("embedding: ids " + ids.shape().to_string() + " have the table's dim " +
                     detail::quote(vocab) + "; ids hold one token number per position");
  std::vector<std::string> output = ids.shape().names();
  for (const auto& dim : table.shape()) {
    if (dim.name == vocab) continue;
    if (ids.shape().contains(dim.name))
      throw ShapeError("embedding: ids " + ids.shape().to_string() + " and table " +
                       table.shape().to_string() + " both have dim " + detail::quote(dim.name) +
                       "; the table's row dims must be new to the ids");
    output.push_back(dim.name);
  }
  const auto hot = one_hot<T>(ids, table.shape().dim(vocab), table.layout().layout());
  return einsum({hot, table}, DimNames(output));
}

}  // namespace meshtensor
