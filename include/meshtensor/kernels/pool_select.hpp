#pragma once
// Which pooling kernels the ops use, chosen at compile time as for convolutions
// (kernels/conv_select.hpp): oneDNN when the program links meshtensor::onednn, else — and with
// MESHTENSOR_REFERENCE_KERNELS — the reference loops.

#include <cstddef>

#include "meshtensor/kernels/reference/pool.hpp"
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
#include "meshtensor/kernels/onednn/pool.hpp"
#endif

namespace meshtensor::kernels {
#if defined(MESHTENSOR_WITH_ONEDNN) && !defined(MESHTENSOR_REFERENCE_KERNELS)
namespace pool_impl = onednn;
#else
namespace pool_impl {
template <class T>
std::size_t max_pool_workspace_bytes(const PoolGeometry& g) {
  return kernels::max_pool_workspace_bytes(g);
}
using kernels::avg_pool_backward;
using kernels::avg_pool_forward;
using kernels::max_pool_backward;
using kernels::max_pool_forward;
}  // namespace pool_impl
#endif
}  // namespace meshtensor::kernels
