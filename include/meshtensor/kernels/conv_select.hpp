#pragma once
// Which convolution kernels the ops use, chosen at compile time: the register-blocked ones by
// default, the plain reference loops with MESHTENSOR_REFERENCE_KERNELS (for cross-checks).

#include "meshtensor/kernels/blocked/conv.hpp"
#include "meshtensor/kernels/reference/conv.hpp"

namespace meshtensor::kernels {
#ifdef MESHTENSOR_REFERENCE_KERNELS
namespace conv_impl {
using kernels::conv_backward_input;
using kernels::conv_backward_weight;
using kernels::conv_forward;
}  // namespace conv_impl
#else
namespace conv_impl = blocked;
#endif
}  // namespace meshtensor::kernels
