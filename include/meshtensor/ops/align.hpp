#pragma once
// Bringing the operands of one op onto a common layout. Operands may each have their own layout;
// the op picks one layout for all of them and relayouts the ones that differ. The rule prefers
// splits over replication (slicing a replicated operand costs nothing; gathering a split one costs
// memory and traffic) and earlier operands over later ones.

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "meshtensor/core/detail/quote.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/shape.hpp"
#include "meshtensor/core/tensor_layout.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor::detail {

// Two dims that operands split over one mesh axis: a block splits one dim per axis, so the result
// keeps the earlier operand's (`kept`) and `gathered` is whole along `axis`.
struct AxisConflict {
  std::string kept, gathered, axis;
};

// Every dim keeps the first split any operand gives it, unless an earlier dim already took that
// mesh axis. The result names dims of all operands; each operand uses the rules for its own dims.
// `conflicts` receives the dims left whole because another dim took their axis.
inline Layout common_layout(const std::vector<const TensorLayout*>& operands,
                            std::vector<AxisConflict>* conflicts = nullptr) {
  std::vector<LayoutRule> rules;
  std::set<std::string> dims_taken, axes_taken;
  std::vector<AxisConflict> lost;
  for (const auto* operand : operands)
    for (std::size_t d = 0; d < operand->rank(); ++d) {
      auto axis = operand->mesh_axis_of(d);
      if (!axis) continue;
      const auto& dim = operand->shape()[d].name;
      const auto& axis_name = operand->mesh_shape()[*axis].name;
      if (dims_taken.count(dim)) continue;
      if (axes_taken.count(axis_name)) {
        for (const auto& rule : rules)
          if (rule.mesh_axis == axis_name) lost.push_back({rule.dim, dim, axis_name});
        continue;
      }
      dims_taken.insert(dim);
      axes_taken.insert(axis_name);
      rules.push_back({dim, axis_name});
    }
  if (conflicts)
    for (const auto& c : lost)  // a dim another operand split over a free axis is not whole
      if (!dims_taken.count(c.gathered)) conflicts->push_back(c);
  return Layout(std::move(rules));
}

// What the rule above did on one processor's mesh: a line per op and pair of dims, in order.
struct LayoutNotes {
  std::vector<std::string> lines;
};

// common_layout for op `op` on `mesh`, noting each conflict the rule settled (layout_notes()).
inline Layout common_layout(Mesh& mesh, const std::string& op,
                            const std::vector<const TensorLayout*>& operands) {
  std::vector<AxisConflict> conflicts;
  Layout common = common_layout(operands, &conflicts);
  if (conflicts.empty()) return common;
  auto& notes = mesh.context<LayoutNotes>().lines;
  for (const auto& c : conflicts) {
    std::string line = op + ": dims " + quote(c.kept) + " and " + quote(c.gathered) +
                       " are both split over mesh axis " + quote(c.axis) + "; " + quote(c.kept) +
                       " keeps it (the earlier operand's split) and " + quote(c.gathered) +
                       " is left whole (its operand relayouted)";
    if (std::find(notes.begin(), notes.end(), line) == notes.end()) notes.push_back(line);
  }
  return common;
}

// The dims of all operands, first operand's order first; same-named dims must agree in size.
inline Shape merged_shape(const std::string& op, const std::vector<const Shape*>& shapes) {
  std::vector<Dim> dims;
  for (std::size_t k = 0; k < shapes.size(); ++k)
    for (const auto& dim : *shapes[k]) {
      bool seen = false;
      for (const auto& known : dims)
        if (known.name == dim.name) {
          seen = true;
          if (known.size != dim.size)
            throw ShapeError(op + ": dim " + quote(dim.name) + " has size " +
                             std::to_string(known.size) + " in one operand but " +
                             std::to_string(dim.size) + " in operand " + std::to_string(k + 1) +
                             " " + shapes[k]->to_string() + "; same-named dims must agree");
        }
      if (!seen) dims.push_back(dim);
    }
  return Shape(std::move(dims));
}

template <class T>
void check_same_mesh(const std::string& op, const std::vector<const Tensor<T>*>& operands) {
  for (const auto* operand : operands)
    if (&operand->mesh() != &operands.front()->mesh())
      throw LayoutError(op + ": operands " + operands.front()->to_string() + " and " +
                        operand->to_string() + " live on different meshes");
}

// Each operand on `common`, relayouted where its own layout differs.
template <class T>
std::vector<Tensor<T>> aligned(const std::vector<const Tensor<T>*>& operands,
                               const Layout& common) {
  std::vector<Tensor<T>> out;
  for (const auto* operand : operands)
    out.push_back(relayout_to(*operand, operand->layout().with_layout(common)));
  return out;
}

// Strides of `operand` (a block in its shape order) over the dims `over`: 0 where it lacks a dim.
inline kernels::Strides strides_over(const Shape& operand,
                                     const std::vector<std::int64_t>& block_sizes,
                                     const std::vector<std::string>& over) {
  const auto own = kernels::row_major_strides(block_sizes);
  kernels::Strides strides(over.size(), 0);
  for (std::size_t i = 0; i < over.size(); ++i)
    if (auto d = operand.find(over[i])) strides[i] = own[*d];
  return strides;
}

}  // namespace meshtensor::detail

namespace meshtensor {
/**
 * What the layout rule settled on this processor so far: one line per op and pair of dims its
 * operands split over one mesh axis, which the result cannot both keep (the earlier operand's
 * dim keeps the axis, the other is gathered; docs/LIBRARY.md, "One dim per mesh axis"). A plan
 * prints them too.
 */
inline std::vector<std::string> layout_notes(Mesh& mesh) {
  return mesh.context<detail::LayoutNotes>().lines;
}
}  // namespace meshtensor
