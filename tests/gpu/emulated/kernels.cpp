// meshtensor's CUDA kernels compiled as host C++ for the emulated runtime, and their launches: a
// grid of one-thread blocks walked block by block, after checking that every pointer argument
// points into memory a GPU can reach.
#include "kernels.hpp"

#include <map>
#include <tuple>
#include <type_traits>
#include <utility>

#include <meshtensor/kernels/common/elementwise_formulas.hpp>
#include <meshtensor/kernels/common/norm_formulas.hpp>
#include <meshtensor/kernels/common/optimizer_formulas.hpp>

#include "device.hpp"
#include "gpu/host_cuda.hpp"

namespace host_kernels {
using namespace host_cuda;
using namespace meshtensor::kernels::shared;  // the formulas the GPU sources start with
#include "elementwise_source.inc"
#include "norm_source.inc"
#include "optimizer_source.inc"
#include "pool_source.inc"
#include "resample_source.inc"
#include "sum_source.inc"
}  // namespace host_kernels

namespace emulated_gpu {
namespace {

template <class A>
bool reachable(const A& argument) {
  if constexpr (std::is_pointer_v<A>)
    return device_accessible(argument);
  else
    return true;
}

template <class... A, std::size_t... I>
std::tuple<A...> copy_arguments(void** arguments, std::index_sequence<I...>) {
  return std::tuple<A...>(*static_cast<const A*>(arguments[I])...);
}

template <class... A>
Kernel kernel(const char* name, void (*function)(A...)) {
  return {name, [name, function](void** arguments, dim3 grid, std::string* error) -> Launch {
            auto values =
                copy_arguments<std::decay_t<A>...>(arguments, std::index_sequence_for<A...>{});
            int position = 0, unreachable = -1;
            std::apply(
                [&](const auto&... value) {
                  ((unreachable = unreachable < 0 && !reachable(value) ? position : unreachable,
                    ++position),
                   ...);
                },
                values);
            if (unreachable >= 0) {
              *error = std::string("kernel ") + name + " was launched with argument " +
                       std::to_string(unreachable) +
                       " pointing into host memory, which a GPU cannot read";
              return {};
            }
            if (grid.z != 1) {
              *error = std::string("kernel ") + name + " was launched on a 3-D grid";
              return {};
            }
            return [function, values, grid] {
              host_cuda::gridDim = {grid.x, grid.y};
              for (unsigned y = 0; y < grid.y; ++y)
                for (unsigned x = 0; x < grid.x; ++x) {
                  host_cuda::blockIdx = {x, y};
                  std::apply(function, values);
                }
            };
          }};
}

#define MESHTENSOR_KERNEL(name) {#name, kernel(#name, &host_kernels::name)},
const std::map<std::string, Kernel> kernels = {
#include "elementwise_names.inc"
#include "norm_names.inc"
#include "optimizer_names.inc"
#include "pool_names.inc"
#include "resample_names.inc"
#include "sum_names.inc"
};
#undef MESHTENSOR_KERNEL

}  // namespace

const Kernel* find_kernel(const std::string& name) {
  const auto found = kernels.find(name);
  return found == kernels.end() ? nullptr : &found->second;
}

}  // namespace emulated_gpu
