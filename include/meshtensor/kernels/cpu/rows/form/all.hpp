// The row kernels in one instruction set's form, in namespace rows::MESHTENSOR_TARGET
// (cpu/for_each_form.hpp includes this once per set; rows/conv.hpp includes what they need first
// and chooses among the forms). No include guard. In this order: each uses the ones before.

// clang-format off
#include "meshtensor/kernels/cpu/rows/form/simd.hpp"
#include "meshtensor/kernels/cpu/rows/form/planar_rows.hpp"
#include "meshtensor/kernels/cpu/rows/form/planar_planes.hpp"
#include "meshtensor/kernels/cpu/rows/form/pair_words.hpp"
#include "meshtensor/kernels/cpu/rows/form/one_channel_forward.hpp"
#include "meshtensor/kernels/cpu/rows/form/one_channel_weight.hpp"
#include "meshtensor/kernels/cpu/rows/form/channel_lanes_weight.hpp"
#include "meshtensor/kernels/cpu/rows/form/passes.hpp"
#include "meshtensor/kernels/cpu/rows/form/workspace.hpp"
// clang-format on
