#pragma once
// The layout classes windowed ops are tested under, for tensors over batch:2, x:9, y:6, z:5,
// channels:3 (sizes chosen so that splits are uneven and a split of x over 8 leaves blocks of one
// or two positions, narrower than a 3- or 7-tap halo).

#include <vector>

#include "support/layout_cases.hpp"

namespace meshtensor::testing {

inline const Shape volume_shape("batch:2, x:9, y:6, z:5, channels:3");

inline std::vector<LayoutCase> spatial_cases() {
  return {
      {"one processor", "p:1", ""},
      {"x split 2 ways", "p:2", "x:p"},
      {"x split 4 ways (uneven)", "p:4", "x:p"},
      {"x and y on 2x2", "rows:2; cols:2", "x:rows; y:cols"},
      {"batch and x hybrid on 2x2", "rows:2; cols:2", "batch:rows; x:cols"},
      {"x, y and z on 2x2x2", "a:2; b:2; c:2", "x:a; y:b; z:c"},
      {"x and y on 2x4 (uneven)", "rows:2; cols:4", "x:rows; y:cols"},
      {"x split 8 ways: halos wider than a block", "p:8", "x:p"},
      {"channels split 3 ways", "p:3", "channels:p"},
      {"x over rows, channels over cols", "rows:2; cols:3", "x:rows; channels:cols"},
  };
}

}  // namespace meshtensor::testing
