#pragma once
// The layout classes every op is tested under (DESIGN.md): replicated, one dim split (2, 4 and 8
// ways, even and uneven, with empty blocks), two dims on two mesh axes, a mesh axis left unused
// (replication along it), and batch + another dim together.

#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace meshtensor::testing {

struct LayoutCase {
  std::string name;
  MeshShape mesh;
  Layout layout;
};

/// Cases for tensors over dims among batch:2, x:6, y:5, c:3 (sizes chosen so that splits of 4 and
/// 8 are uneven and a split of x over 8 leaves two processors an empty block).
inline std::vector<LayoutCase> layout_cases() {
  return {
      {"one processor", "p:1", ""},
      {"replicated on 4 processors", "p:4", ""},
      {"x split 2 ways", "p:2", "x:p"},
      {"x split 4 ways (uneven)", "p:4", "x:p"},
      {"x split 8 ways (uneven, empty blocks)", "p:8", "x:p"},
      {"y split 4 ways (uneven)", "p:4", "y:p"},
      {"x over rows, y over cols (2x2)", "rows:2; cols:2", "x:rows; y:cols"},
      {"x over rows, y over cols (2x4, uneven)", "rows:2; cols:4", "x:rows; y:cols"},
      {"x over rows, cols unused (2x2)", "rows:2; cols:2", "x:rows"},
      {"batch over rows, x over cols (2x2)", "rows:2; cols:2", "batch:rows; x:cols"},
      {"c over rows, x over cols (2x4, uneven)", "rows:2; cols:4", "c:rows; x:cols"},
  };
}

}  // namespace meshtensor::testing
