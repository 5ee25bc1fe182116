#pragma once
// Windows whose halos cover the cases halo planning must get right: none, a neighbour's margin,
// wider than a block, strided, dilated, reads that skip whole blocks.
#include <meshtensor/core/window.hpp>

namespace meshtensor::testing::windows {
inline const WindowDim none{};
inline const WindowDim conv3{3, 1, 1, 1, 1};     // 3 taps, "same"
inline const WindowDim wide{7, 1, 1, 3, 3};      // reads 3 beyond each side
inline const WindowDim strided{3, 2, 1, 0, 0};   // valid, stride 2
inline const WindowDim dilated{3, 1, 2, 2, 2};   // dilation 2
inline const WindowDim skipping{1, 3, 1, 0, 0};  // reads every third index
}  // namespace meshtensor::testing::windows
