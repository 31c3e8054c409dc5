// coll_api.cc — collectives, point-to-point and groups: validate every
// argument, build a Task, and run it now, at group end, or on a host stream.
#include <algorithm>
#include <span>

#include "algorithms/types.h"
#include "api/api_util.h"
#include "core/device_backend.h"
#include "core/group.h"
#include "core/host_stream.h"

using plait::Status;
using plait::Task;
using namespace plait::api;

namespace {

// Runs a validated task now (blocking), on its stream, or queues it in the
// thread's group.
ncclResult_t launch(ncclComm_t comm, const Task& task, const char* call) {
  if (plait::group::active()) {
    plait::group::enqueue(comm, task);
    return ncclSuccess;
  }
  // A non-blocking communicator's host calls without a stream run in its
  // background; one on a stream or the device would run beside them, and
  // both number the communicator's operations: refused while they run.
  if (!comm->blocking && (task.stream != nullptr || task.onDevice)) [[unlikely]]
    if (Status s = checkQuiet(comm); !s.isOk()) return fail(s, call);
  if (task.stream != nullptr) {
    comm->inflight.fetch_add(1, std::memory_order_seq_cst);
    comm->onStreams.fetch_add(1, std::memory_order_seq_cst);
    task.stream->enqueue([comm, task] {
      Status s = comm->closing.load() ? plait::invalidUsage("comm was destroyed before queued work ran")
                                      : comm->impl->run(task);
      comm->onStreams.fetch_sub(1, std::memory_order_release);
      comm->inflight.fetch_sub(1, std::memory_order_release);
      return s;
    });
    return ncclSuccess;
  }
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  // A non-blocking communicator's host operation without a stream runs in
  // the background (a device operation only enqueues its kernel: it stays
  // on the caller's thread, in its CUDA stream's order). Host operations
  // without a stream first let those on host streams finish.
  if (!comm->blocking && !task.onDevice)
    return runInBackground(comm, [comm, task] {
      PLAIT_RETURN_IF_ERROR(waitForStreams(comm));
      return comm->impl->run(task);
    });
  if (!task.onDevice)
    if (Status s = waitForStreams(comm); !s.isOk()) return fail(s, call);
  return fail(comm->impl->run(task), call);
}

// Common checks of every collective; fills the task's shared fields.
Status prepare(ncclComm_t comm, Task* task, plait::CollType coll, const void* sendbuff, void* recvbuff,
               size_t count, ncclDataType_t type, cudaStream_t stream) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  PLAIT_RETURN_IF_ERROR(checkType(type));
  if (count > (SIZE_MAX >> 4) / plait::typeSize(type))
    return plait::invalidArgument("count " + std::to_string(count) + " overflows the addressable size");
  task->coll = coll;
  task->sendbuff = sendbuff;
  task->recvbuff = recvbuff;
  task->count = count;
  task->type = type;
  return Status::ok();
}

ncclResult_t rejected(const Status& s, const char* call) {
  if (plait::group::active()) plait::group::recordError(s);
  return fail(s, call);
}

// Validates one collective and launches it. `sendCount`/`recvCount` are the
// elements each buffer must hold on this rank (0: the buffer is not used
// here and may be NULL).
struct CollCall {
  const char* name;
  plait::CollType coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t type;
  bool reduces = false;
  int op = 0;
  int root = 0;
  bool rooted = false;
  int peer = -1;
};

// An AlltoAll on device buffers that overlap, with data and more than one
// rank: the kernel sends each block while it receives, and nothing stages on
// the device the blocks it would overwrite (host memory runs it in place).
// Refused at the call, so a group reports it before anything of it runs.
Status checkDeviceAlltoAll(ncclComm_t comm, const CollCall& c) {
  const size_t all = c.count * plait::typeSize(c.type) * static_cast<size_t>(comm->nranks);
  if (comm->nranks < 2 || c.count == 0 || !plait::rangesOverlap(c.sendbuff, c.recvbuff, all)) return Status::ok();
  return plait::invalidArgument("ncclAlltoAll on device buffers whose sendbuff and recvbuff overlap (in place): "
                                "NCCL defines no in-place AlltoAll and Plait runs one on host memory only; give the "
                                "device call separate buffers");
}

ncclResult_t collective(ncclComm_t comm, const CollCall& c, size_t sendMult, size_t recvMult, bool sendAtRootOnly,
                        bool recvAtRootOnly, cudaStream_t stream, const ncclCollConfig_t* config = nullptr) {
  Task task;
  Status s = prepare(comm, &task, c.coll, c.sendbuff, c.recvbuff, c.count, c.type, stream);
  if (s.isOk() && c.rooted) s = checkRoot(c.root, comm->nranks);
  const bool p2p = c.coll == plait::CollType::kSend || c.coll == plait::CollType::kRecv;
  if (s.isOk() && p2p) s = checkRoot(c.peer, comm->nranks, "peer");
  // AllGather, AlltoAll, Gather, Scatter, ReduceScatter: a buffer holds
  // count x nranks elements, which must not overflow either.
  const size_t mult = std::max(sendMult, recvMult);
  if (s.isOk() && mult > 1 && c.count > (SIZE_MAX >> 4) / plait::typeSize(c.type) / mult)
    s = plait::invalidArgument("count " + std::to_string(c.count) + " x " + std::to_string(mult) +
                               " ranks overflows the addressable size");
  if (s.isOk()) {
    const bool isRoot = !c.rooted || comm->rank == c.root;
    UsedBuffer buffers[2];  // on the stack: no allocation on the small-message path
    size_t n = 0;
    if (sendMult && (isRoot || !sendAtRootOnly)) buffers[n++] = {c.sendbuff, c.count * sendMult, "sendbuff"};
    if (recvMult && (isRoot || !recvAtRootOnly)) buffers[n++] = {c.recvbuff, c.count * recvMult, "recvbuff"};
    const std::span<const UsedBuffer> used(buffers, n);
    for (const UsedBuffer& b : used)
      if (s.isOk()) s = checkBuffer(b.ptr, b.count, b.name);
    if (s.isOk()) s = placeTask(comm, used, stream, &task);
  }
  if (s.isOk() && task.onDevice && c.coll == plait::CollType::kAlltoAll) s = checkDeviceAlltoAll(comm, c);
  if (s.isOk() && c.reduces) s = resolveOp(comm, static_cast<ncclRedOp_t>(c.op), c.type, &task);
  if (s.isOk() && config != nullptr) s = applyCollConfig(config, &task);
  if (!s.isOk()) return rejected(s, c.name);
  task.root = c.root;
  task.peer = c.peer;
  return launch(comm, task, c.name);
}

size_t ranksOf(ncclComm_t comm) { return comm != nullptr && checkComm(comm).isOk() ? comm->nranks : 1; }

// One function per collective: the plain entry point and its Config variant
// (NCCL 2.32) differ only in the name and the configuration.
ncclResult_t allReduceCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kAllReduce, sendbuff, recvbuff, count, datatype, true, op};
  return collective(comm, c, 1, 1, false, false, stream, config);
}

ncclResult_t reduceCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
    const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kReduce, sendbuff, recvbuff, count, datatype, true, op, root, true};
  return collective(comm, c, 1, 1, false, /*recvAtRootOnly=*/true, stream, config);
}

ncclResult_t broadcastCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kBroadcast, sendbuff, recvbuff, count, datatype, false, 0, root, true};
  return collective(comm, c, 1, 1, /*sendAtRootOnly=*/true, false, stream, config);
}

ncclResult_t reduceScatterCall(const char* name, const void* sendbuff, void* recvbuff, size_t recvcount,
    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, true, op};
  return collective(comm, c, ranksOf(comm), 1, false, false, stream, config);
}

ncclResult_t allGatherCall(const char* name, const void* sendbuff, void* recvbuff, size_t sendcount,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kAllGather, sendbuff, recvbuff, sendcount, datatype};
  return collective(comm, c, 1, ranksOf(comm), false, false, stream, config);
}

ncclResult_t alltoAllCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kAlltoAll, sendbuff, recvbuff, count, datatype};
  return collective(comm, c, ranksOf(comm), ranksOf(comm), false, false, stream, config);
}

ncclResult_t gatherCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kGather, sendbuff, recvbuff, count, datatype, false, 0, root, true};
  return collective(comm, c, 1, ranksOf(comm), false, /*recvAtRootOnly=*/true, stream, config);
}

ncclResult_t scatterCall(const char* name, const void* sendbuff, void* recvbuff, size_t count,
    ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config) {
  CollCall c{name, plait::CollType::kScatter, sendbuff, recvbuff, count, datatype, false, 0, root, true};
  return collective(comm, c, ranksOf(comm), 1, /*sendAtRootOnly=*/true, false, stream, config);
}

}  // namespace

PLAIT_API(ncclResult_t, AllReduce,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream)) {
  return allReduceCall("ncclAllReduce", sendbuff, recvbuff, count, datatype, op, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, AllReduceConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config)) {
  return allReduceCall("ncclAllReduceConfig", sendbuff, recvbuff, count, datatype, op, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Reduce,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
           ncclComm_t comm, cudaStream_t stream)) {
  return reduceCall("ncclReduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, ReduceConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
           ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config)) {
  return reduceCall("ncclReduceConfig", sendbuff, recvbuff, count, datatype, op, root, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Bcast,
          (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)) {
  CollCall c{"ncclBcast", plait::CollType::kBroadcast, buff, buff, count, datatype, false, 0, root, true};
  return collective(comm, c, 1, 1, /*sendAtRootOnly=*/true, false, stream);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Broadcast,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return broadcastCall("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, BroadcastConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream, const ncclCollConfig_t* config)) {
  return broadcastCall("ncclBroadcastConfig", sendbuff, recvbuff, count, datatype, root, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, ReduceScatter,
          (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream)) {
  return reduceScatterCall("ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, ReduceScatterConfig,
          (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config)) {
  return reduceScatterCall("ncclReduceScatterConfig", sendbuff, recvbuff, recvcount, datatype, op, comm, stream,
                           config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, AllGather,
          (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream)) {
  return allGatherCall("ncclAllGather", sendbuff, recvbuff, sendcount, datatype, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, AllGatherConfig,
          (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream, const ncclCollConfig_t* config)) {
  return allGatherCall("ncclAllGatherConfig", sendbuff, recvbuff, sendcount, datatype, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, AlltoAll,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream)) {
  return alltoAllCall("ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, AlltoAllConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream, const ncclCollConfig_t* config)) {
  return alltoAllCall("ncclAlltoAllConfig", sendbuff, recvbuff, count, datatype, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Gather,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return gatherCall("ncclGather", sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, GatherConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream, const ncclCollConfig_t* config)) {
  return gatherCall("ncclGatherConfig", sendbuff, recvbuff, count, datatype, root, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Scatter,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return scatterCall("ncclScatter", sendbuff, recvbuff, count, datatype, root, comm, stream, nullptr);
} PLAIT_API_END

PLAIT_API(ncclResult_t, ScatterConfig,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream, const ncclCollConfig_t* config)) {
  return scatterCall("ncclScatterConfig", sendbuff, recvbuff, count, datatype, root, comm, stream, config);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Send,
          (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
           cudaStream_t stream)) {
  CollCall c{"ncclSend", plait::CollType::kSend, sendbuff, nullptr, count, datatype};
  c.peer = peer;
  return collective(comm, c, 1, 0, false, false, stream);
} PLAIT_API_END

PLAIT_API(ncclResult_t, Recv,
          (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) {
  CollCall c{"ncclRecv", plait::CollType::kRecv, nullptr, recvbuff, count, datatype};
  c.peer = peer;
  return collective(comm, c, 0, 1, false, false, stream);
} PLAIT_API_END

PLAIT_API(ncclResult_t, GroupStart, (void)) {
  plait::group::start();
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, GroupEnd, (void)) {
  // The outermost end runs the group on this thread (and the workers'): on a
  // non-blocking communicator whose queued host call still runs, both would
  // drive its connections and number its operations. Refused, as a single
  // call on a stream is (launch()); the group is dropped, so no rank runs
  // part of it.
  if (plait::group::depth() == 1)
    for (const auto& op : plait::group::pending())
      if (!op.comm->blocking)
        if (Status q = checkQuiet(op.comm); !q.isOk()) {
          (void)plait::group::end([](ncclComm_t, std::vector<Task>&) { return Status::ok(); });
          return fail(q, "ncclGroupEnd");
        }
  plait::DeviceGroupScope deviceGroup;  // kernels of the group's communicators run at once
  Status s = plait::group::end([](ncclComm_t comm, std::vector<Task>& tasks) {
    CommUse use(comm);  // destroy/abort on another thread waits for the group's operations
    if (!use.usable()) return plait::invalidUsage("a communicator of the group was destroyed or aborted before ncclGroupEnd");
    PLAIT_RETURN_IF_ERROR(waitForStreams(comm));  // the group runs here, after what host streams hold
    return comm->impl->runGroup(tasks);
  });
  return fail(s, "ncclGroupEnd");
} PLAIT_API_END

PLAIT_API(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo)) {
  const char* call = "ncclGroupSimulateEnd";
  if (simInfo == nullptr) return fail(plait::invalidArgument("simInfo is NULL"), call);
  if (simInfo->magic != 0x74685283)
    return fail(plait::invalidArgument("simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER"), call);
  float total = 0;
  for (const auto& op : plait::group::pending()) {
    CommUse use(op.comm);
    if (!use.usable()) {
      (void)plait::group::end([](ncclComm_t, std::vector<Task>&) { return Status::ok(); });  // drop the group
      return fail(plait::invalidUsage("a communicator of the group was destroyed or aborted before ncclGroupSimulateEnd"), call);
    }
    total += static_cast<float>(op.comm->impl->estimateUs(op.task));
  }
  simInfo->estimatedTime = total;
  // Simulation launches nothing: drop the pending operations like End would.
  Status s = plait::group::end([](ncclComm_t, std::vector<Task>&) { return Status::ok(); });
  return fail(s, call);
} PLAIT_API_END
