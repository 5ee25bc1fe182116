#pragma once
// Which convolution kernels the ops use, chosen at compile time: oneDNN when the program links
// meshtensor::onednn (MESHTENSOR_WITH_ONEDNN), else the register-blocked ones; the plain reference
// loops with MESHTENSOR_REFERENCE_KERNELS (for cross-checks).

#include "meshtensor/kernels/blocked/conv.hpp"
#include "meshtensor/kernels/reference/conv.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/onednn/conv.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_REFERENCE_KERNELS)
namespace conv_impl {
using kernels::conv_backward_input;
using kernels::conv_backward_weight;
using kernels::conv_forward;
}  // namespace conv_impl
#elif defined(MESHTENSOR_WITH_ONEDNN)
namespace conv_impl = onednn;
#else
namespace conv_impl = blocked;
#endif
}  // namespace meshtensor::kernels
