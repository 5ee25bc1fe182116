#pragma once
// The whole public API in one include. The MPI transport joins when the program links
// meshtensor::mpi (which defines MESHTENSOR_WITH_MPI).

#include "meshtensor/version.hpp"

#include "meshtensor/core/block.hpp"
#include "meshtensor/core/byte_size.hpp"
#include "meshtensor/core/dim.hpp"
#include "meshtensor/core/dim_names.hpp"
#include "meshtensor/core/error.hpp"
#include "meshtensor/core/format.hpp"
#include "meshtensor/core/layout.hpp"
#include "meshtensor/core/layout_schedule.hpp"
#include "meshtensor/core/mesh_shape.hpp"
#include "meshtensor/core/ownership_table.hpp"
#include "meshtensor/core/shape.hpp"
#include "meshtensor/core/tensor_layout.hpp"

#include "meshtensor/comm/agree.hpp"
#include "meshtensor/comm/collectives.hpp"
#include "meshtensor/comm/communicator.hpp"
#include "meshtensor/comm/mesh.hpp"
#include "meshtensor/comm/run.hpp"
#include "meshtensor/comm/threads.hpp"

#include "meshtensor/tensor/create.hpp"
#include "meshtensor/tensor/random.hpp"
#include "meshtensor/tensor/tensor.hpp"

#include "meshtensor/core/window.hpp"
#include "meshtensor/ops/activation.hpp"
#include "meshtensor/ops/argmax.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/einsum.hpp"
#include "meshtensor/ops/elementwise.hpp"
#include "meshtensor/ops/halo.hpp"
#include "meshtensor/ops/loss.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/ops/pool.hpp"
#include "meshtensor/ops/reduce.hpp"
#include "meshtensor/ops/relayout.hpp"
#include "meshtensor/ops/resample.hpp"
#include "meshtensor/ops/reshape.hpp"

#include "meshtensor/autodiff/backward.hpp"
#include "meshtensor/autodiff/recompute.hpp"
#include "meshtensor/autodiff/tape.hpp"
#include "meshtensor/ops/broadcast.hpp"

#include "meshtensor/nn/init.hpp"
#include "meshtensor/nn/layers.hpp"
#include "meshtensor/nn/optim.hpp"
#include "meshtensor/nn/parameters.hpp"

#include "meshtensor/io/npy.hpp"
#include "meshtensor/io/tensor_npy.hpp"

#include "meshtensor/plan/calibrate.hpp"
#include "meshtensor/plan/choose.hpp"
#include "meshtensor/plan/network.hpp"
#include "meshtensor/plan/plan.hpp"
#include "meshtensor/plan/predict.hpp"
#include "meshtensor/plan/throughput.hpp"
