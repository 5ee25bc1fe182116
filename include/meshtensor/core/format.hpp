#pragma once
// fmt support: every core value formats as it prints with operator<<, e.g.
// `fmt::format("{}", layout)` gives `[batch=2, x=256@rows, y=256@cols]`.

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "meshtensor/core/block.hpp"
#include "meshtensor/core/dim.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/core/shape.hpp"
#include "meshtensor/core/tensor_layout.hpp"

template <>
struct fmt::formatter<meshtensor::Dim> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::Shape> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::MeshShape> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::Layout> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::TensorLayout> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::Range> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<meshtensor::Block> : fmt::ostream_formatter {};
