// The emulated NCCL (libnccl.so.2) over MPI, for the ranks of an MPI job: each communicator is an
// MPI communicator, each call an operation in its stream on the emulated GPU (device.hpp) that
// posts non-blocking MPI calls when the stream reaches it and finishes when they complete, so a
// rank waiting for its messages polls as it would on a GPU, and a peer that never sends leaves
// it waiting until the caller gives up. Grouped calls start together. What real NCCL refuses is
// refused: buffers a GPU cannot reach, peers outside the communicator, unknown types.
//   MESHTENSOR_EMULATED_NCCL_VERSION  the version this library reports (default: its headers')
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device.hpp"
#include "residency.hpp"

struct ncclComm {
  // Two MPI communicators over the same ranks: `mpi` for the data calls, posted in stream order,
  // and `setup` for splitting, called in program order. MPI matches collectives on a
  // communicator by the order they are called in, and the ranks may post their queued calls
  // later or sooner relative to a split.
  MPI_Comm mpi = MPI_COMM_NULL, setup = MPI_COMM_NULL;
  int rank = 0, size = 0;
  int setup_polls = 0;  // a non-blocking communicator answers "in progress" this many times first
  bool blocking = true;
  // A split this (non-blocking) communicator runs: NCCL 2.28 writes the new communicator into the
  // caller's variable only once the parent stops answering "in progress".
  ncclComm* split_made = nullptr;
  ncclComm_t* split_into = nullptr;
  // Set by ncclCommAbort, which outlives the communicator in its queued calls: as on a GPU, an
  // abort ends the communicator's kernels, so a stream waiting on them finishes.
  std::shared_ptr<bool> aborted = std::make_shared<bool>(false);
};

namespace {

namespace residency = emulated_gpu::residency;

thread_local std::string last_error;
thread_local int group_depth = 0;

ncclResult_t refuse(ncclResult_t result, const std::string& why) {
  last_error = why;
  return result;
}

// NCCL's types as MPI's, with their sizes; false for those the emulator does not carry.
bool mpi_type(ncclDataType_t type, MPI_Datatype* mpi, std::size_t* size) {
  struct Type {
    ncclDataType_t nccl;
    MPI_Datatype mpi;
    std::size_t size;
  };
  const Type types[] = {
      {ncclInt8, MPI_INT8_T, 1},     {ncclUint8, MPI_UINT8_T, 1},  {ncclInt32, MPI_INT32_T, 4},
      {ncclUint32, MPI_UINT32_T, 4}, {ncclInt64, MPI_INT64_T, 8},  {ncclUint64, MPI_UINT64_T, 8},
      {ncclFloat32, MPI_FLOAT, 4},   {ncclFloat64, MPI_DOUBLE, 8}, {ncclBfloat16, MPI_UINT16_T, 2}};
  for (const Type& t : types)
    if (t.nccl == type) {
      *mpi = t.mpi;
      *size = t.size;
      return true;
    }
  return false;
}

// bfloat16 reduced as NCCL does, through float: user ops over the 16-bit words.
float widened(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}
std::uint16_t narrowed(float value) {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);
  return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
template <ncclRedOp_t op>
void combine_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) {
    const float x = widened(a[i]), y = widened(b[i]);
    const float r = op == ncclSum    ? x + y
                    : op == ncclProd ? x * y
                    : op == ncclMax  ? (x < y ? y : x)
                                     : (y < x ? y : x);
    b[i] = narrowed(r);
  }
}
bool bf16_op(ncclRedOp_t op, MPI_Op* mpi) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_User_function* functions[4] = {&combine_bf16<ncclSum>, &combine_bf16<ncclProd>,
                                     &combine_bf16<ncclMax>, &combine_bf16<ncclMin>};
  const int k = op == ncclSum ? 0 : op == ncclProd ? 1 : op == ncclMax ? 2 : op == ncclMin ? 3 : -1;
  if (k < 0) return false;
  if (ops[k] == MPI_OP_NULL) MPI_Op_create(functions[k], 1, &ops[k]);
  *mpi = ops[k];
  return true;
}

bool mpi_op(ncclRedOp_t op, ncclDataType_t type, MPI_Op* mpi) {
  if (type == ncclBfloat16) return bf16_op(op, mpi);
  switch (op) {
    case ncclSum:
      *mpi = MPI_SUM;
      return true;
    case ncclProd:
      *mpi = MPI_PROD;
      return true;
    case ncclMax:
      *mpi = MPI_MAX;
      return true;
    case ncclMin:
      *mpi = MPI_MIN;
      return true;
    default:
      return false;
  }
}

/// What the calls of an operation have posted: MPI requests, and copies of inputs they read.
struct Posted {
  std::vector<MPI_Request> requests;
  std::vector<std::vector<char>> copies;

  MPI_Request* request() { return &requests.emplace_back(); }
};

/// One NCCL call: posts the MPI requests that carry it out; ends at once if its communicator is
/// aborted.
struct Post {
  std::function<void(Posted&)> post;
  std::shared_ptr<bool> aborted;
};

/// The calls of a group (or one call alone) on one stream: posted together when the stream
/// reaches them, finished when every request has completed.
class Calls final : public emulated_gpu::Operation {
 public:
  explicit Calls(std::vector<Post> posts) : posts_(std::move(posts)) {}
  bool advance() override {
    auto& requests = posted_.requests;
    for (const auto& post : posts_)
      if (*post.aborted) {
        for (auto& request : requests)
          if (request != MPI_REQUEST_NULL) {
            MPI_Cancel(&request);
            MPI_Request_free(&request);
          }
        return true;
      }
    if (!started_) {
      for (auto& post : posts_) post.post(posted_);
      started_ = true;
    }
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

 private:
  std::vector<Post> posts_;
  Posted posted_;
  bool started_ = false;
};

// Calls made inside ncclGroupStart/End, by stream, in order.
thread_local std::vector<std::pair<cudaStream_t, std::vector<Post>>> grouped;

ncclResult_t issue(cudaStream_t stream, ncclComm_t comm, std::function<void(Posted&)> call) {
  Post post{std::move(call), comm->aborted};
  emulated_gpu::count("nccl");
  if (group_depth > 0) {
    if (grouped.empty() || grouped.back().first != stream) grouped.push_back({stream, {}});
    grouped.back().second.push_back(std::move(post));
    return ncclSuccess;
  }
  emulated_gpu::enqueue_operation(stream, [posts = std::vector<Post>{std::move(post)}] {
    return std::make_unique<Calls>(posts);
  });
  return ncclSuccess;
}

// As NCCL's ncclCommEnsureReady: a non-blocking communicator whose last operation still answers
// "in progress" refuses every call until it has been polled to the end.
ncclResult_t check_ready(const char* call, ncclComm_t comm) {
  if (!comm || comm->mpi == MPI_COMM_NULL)
    return refuse(ncclInvalidArgument, std::string(call) + ": invalid communicator");
  if (comm->setup_polls > 0)
    return refuse(ncclInvalidArgument, std::string(call) +
                                           ": Attempt to use communicator before the previous "
                                           "operation returned ncclSuccess");
  return ncclSuccess;
}

// Checks what every data call needs: a ready communicator, reachable buffers, a known type.
ncclResult_t check_call(const char* call, ncclComm_t comm,
                        std::initializer_list<const void*> buffers, ncclDataType_t type,
                        MPI_Datatype* mpi, std::size_t* size) {
  if (const auto r = check_ready(call, comm)) return r;
  if (!mpi_type(type, mpi, size))
    return refuse(ncclInvalidArgument, std::string(call) + ": unsupported data type");
  for (const void* p : buffers)
    if (!emulated_gpu::device_accessible(p))
      return refuse(ncclInvalidArgument,
                    std::string(call) + ": a buffer in host memory, which a GPU cannot reach");
  return ncclSuccess;
}

bool non_blocking(const ncclConfig_t* config) { return config && config->blocking == 0; }

// A communicator over the ranks of `mpi`, which it takes.
ncclComm* made_of(MPI_Comm mpi, const ncclConfig_t* config) {
  auto made = std::make_unique<ncclComm>();
  made->mpi = mpi;
  MPI_Comm_dup(mpi, &made->setup);
  MPI_Comm_rank(mpi, &made->rank);
  MPI_Comm_size(mpi, &made->size);
  made->setup_polls = non_blocking(config) ? 1 : 0;
  made->blocking = !non_blocking(config);
  return made.release();
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  const char* text = std::getenv("MESHTENSOR_EMULATED_NCCL_VERSION");
  *version = text ? std::atoi(text) : NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "meshtensor emulated nccl");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int ranks, ncclUniqueId, int rank,
                                    ncclConfig_t* config) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (ranks != world)
    return refuse(ncclInvalidArgument,
                  "the emulated NCCL spans the MPI job's ranks: " + std::to_string(ranks) +
                      " requested, " + std::to_string(world) + " in the job");
  MPI_Comm mpi = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi);
  *comm = made_of(mpi, config);
  return non_blocking(config) ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* part,
                           ncclConfig_t* config) {
  if (const auto r = check_ready("ncclCommSplit", comm)) return r;
  MPI_Comm split = MPI_COMM_NULL;
  MPI_Comm_split(comm->setup, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &split);
  ncclComm* made = split == MPI_COMM_NULL ? nullptr : made_of(split, config);
  if (made) made->setup_polls = 0;  // the parent answers for the split, as in NCCL 2.28
  if (comm->blocking) {
    *part = made;
    return ncclSuccess;
  }
  // NCCL 2.28 answers ncclSuccess at once; the parent is "in progress" until the split is done.
  *part = nullptr;
  comm->setup_polls = 1;
  comm->split_made = made;
  comm->split_into = part;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: invalid communicator");
  if (comm->setup_polls > 0) {
    --comm->setup_polls;
    *state = ncclInProgress;
    return ncclSuccess;
  }
  if (comm->split_into) {  // the split is done: its communicator reaches the caller
    *comm->split_into = comm->split_made;
    comm->split_into = nullptr;
    comm->split_made = nullptr;
  }
  *state = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (const auto r = check_ready("ncclCommUserRank", comm)) return r;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (const auto r = check_ready("ncclCommCount", comm)) return r;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (const auto r = check_ready("ncclCommDestroy", comm)) return r;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Comm_free(&comm->mpi);
    MPI_Comm_free(&comm->setup);
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm) *comm->aborted = true;
  delete comm;  // its MPI communicators are left to MPI: freeing them may wait for the peers
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  auto calls = std::move(grouped);
  grouped.clear();
  for (auto& [stream, posts] : calls)
    emulated_gpu::enqueue_operation(
        stream, [posts = std::move(posts)] { return std::make_unique<Calls>(posts); });
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* data, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype mpi;
  std::size_t size;
  if (const auto r = check_call("ncclSend", comm, {data}, type, &mpi, &size)) return r;
  if (peer < 0 || peer >= comm->size)
    return refuse(ncclInvalidArgument, "ncclSend: peer " + std::to_string(peer) + " out of range");
  return issue(stream, comm, [=](Posted& posted) {
    residency::to_gpu(data, count * size);
    MPI_Isend(data, int(count), mpi, peer, 0, comm->mpi, posted.request());
  });
}

ncclResult_t ncclRecv(void* data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  MPI_Datatype mpi;
  std::size_t size;
  if (const auto r = check_call("ncclRecv", comm, {data}, type, &mpi, &size)) return r;
  if (peer < 0 || peer >= comm->size)
    return refuse(ncclInvalidArgument, "ncclRecv: peer " + std::to_string(peer) + " out of range");
  return issue(stream, comm, [=](Posted& posted) {
    residency::to_gpu(data, count * size);
    MPI_Irecv(data, int(count), mpi, peer, 0, comm->mpi, posted.request());
  });
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype mpi;
  MPI_Op reduce;
  std::size_t size;
  if (const auto r = check_call("ncclAllReduce", comm, {send, receive}, type, &mpi, &size))
    return r;
  if (!mpi_op(op, type, &reduce))
    return refuse(ncclInvalidArgument, "ncclAllReduce: unsupported op");
  return issue(stream, comm, [=](Posted& posted) {
    residency::to_gpu(send, count * size);
    residency::to_gpu(receive, count * size);
    MPI_Iallreduce(send == receive ? MPI_IN_PLACE : send, receive, int(count), mpi, reduce,
                   comm->mpi, posted.request());
  });
}

ncclResult_t ncclAllGather(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype mpi;
  std::size_t size;
  if (const auto r = check_call("ncclAllGather", comm, {send, receive}, type, &mpi, &size))
    return r;
  const void* own_place = static_cast<char*>(receive) + std::size_t(comm->rank) * count * size;
  return issue(stream, comm, [=](Posted& posted) {
    residency::to_gpu(send, count * size);
    residency::to_gpu(receive, count * size * std::size_t(comm->size));
    MPI_Iallgather(send == own_place ? MPI_IN_PLACE : send, int(count), mpi, receive, int(count),
                   mpi, comm->mpi, posted.request());
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* receive, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype mpi;
  MPI_Op reduce;
  std::size_t size;
  if (const auto r = check_call("ncclReduceScatter", comm, {send, receive}, type, &mpi, &size))
    return r;
  if (!mpi_op(op, type, &reduce))
    return refuse(ncclInvalidArgument, "ncclReduceScatter: unsupported op");
  return issue(stream, comm, [=](Posted& posted) {
    // In place, NCCL keeps this rank's block where it is in the input, and MPI's in-place form
    // does not: the input is copied then.
    const char* input = static_cast<const char*>(send);
    const std::size_t whole = count * size * std::size_t(comm->size);
    residency::to_gpu(send, whole);
    residency::to_gpu(receive, count * size);
    if (receive >= send && receive < input + whole)
      input = posted.copies.emplace_back(input, input + whole).data();
    MPI_Ireduce_scatter_block(input, receive, int(count), mpi, reduce, comm->mpi, posted.request());
  });
}

ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype mpi;
  std::size_t size;
  if (const auto r = check_call("ncclBroadcast", comm, {send, receive}, type, &mpi, &size))
    return r;
  if (root < 0 || root >= comm->size)
    return refuse(ncclInvalidArgument,
                  "ncclBroadcast: root " + std::to_string(root) + " out of range");
  return issue(stream, comm, [=](Posted& posted) {
    residency::to_gpu(send, count * size);
    residency::to_gpu(receive, count * size);
    if (comm->rank == root && send != receive) std::memmove(receive, send, count * size);
    MPI_Ibcast(receive, int(count), mpi, root, comm->mpi, posted.request());
  });
}

}  // extern "C"
