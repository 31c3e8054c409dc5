// coll_api.cc — collectives, point-to-point and groups: validate every
// argument, build a Task, and run it now, at group end, or on a host stream.
#include "algorithms/types.h"
#include "api/api_util.h"
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
    plait::group::enqueue(comm->impl.get(), task);
    return ncclSuccess;
  }
  if (task.stream != nullptr) {
    comm->inflight.fetch_add(1, std::memory_order_seq_cst);
    task.stream->enqueue([comm, task] {
      Status s = comm->closing.load() ? plait::invalidUsage("comm was destroyed before queued work ran")
                                      : comm->impl->run(task);
      comm->inflight.fetch_sub(1, std::memory_order_release);
      return s;
    });
    return ncclSuccess;
  }
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(comm->impl->run(task), call);
}

// Common checks of every collective; fills the task's shared fields.
Status prepare(ncclComm_t comm, Task* task, plait::CollType coll, const void* sendbuff, void* recvbuff,
               size_t count, ncclDataType_t type, cudaStream_t stream) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  PLAIT_RETURN_IF_ERROR(checkType(type));
  PLAIT_RETURN_IF_ERROR(checkStream(stream, &task->stream));
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

}  // namespace

PLAIT_API(ncclResult_t, AllReduce,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream)) {
  const char* call = "ncclAllReduce";
  Task task;
  Status s = prepare(comm, &task, plait::CollType::kAllReduce, sendbuff, recvbuff, count, datatype, stream);
  if (s.isOk()) s = checkBuffer(sendbuff, count, "sendbuff");
  if (s.isOk()) s = checkBuffer(recvbuff, count, "recvbuff");
  if (s.isOk()) s = resolveOp(comm, op, datatype, &task);
  if (!s.isOk()) return rejected(s, call);
  return launch(comm, task, call);
}

namespace {

// The collectives that later work completes share one path for now.
ncclResult_t notYet(ncclComm_t comm, plait::CollType coll, const void* sendbuff, void* recvbuff, size_t count,
                    ncclDataType_t type, cudaStream_t stream, const char* call) {
  Task task;
  Status s = prepare(comm, &task, coll, sendbuff, recvbuff, count, type, stream);
  if (!s.isOk()) return rejected(s, call);
  return rejected(plait::invalidUsage(std::string(call) + " is not supported yet by Plait"), call);
}

}  // namespace

PLAIT_API(ncclResult_t, Reduce,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
           ncclComm_t comm, cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kReduce, sendbuff, recvbuff, count, datatype, stream, "ncclReduce");
}

PLAIT_API(ncclResult_t, Bcast,
          (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kBroadcast, buff, buff, count, datatype, stream, "ncclBcast");
}

PLAIT_API(ncclResult_t, Broadcast,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kBroadcast, sendbuff, recvbuff, count, datatype, stream, "ncclBroadcast");
}

PLAIT_API(ncclResult_t, ReduceScatter,
          (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
           ncclComm_t comm, cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, stream,
                "ncclReduceScatter");
}

PLAIT_API(ncclResult_t, AllGather,
          (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kAllGather, sendbuff, recvbuff, sendcount, datatype, stream,
                "ncclAllGather");
}

PLAIT_API(ncclResult_t, AlltoAll,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kAlltoAll, sendbuff, recvbuff, count, datatype, stream, "ncclAlltoAll");
}

PLAIT_API(ncclResult_t, Gather,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kGather, sendbuff, recvbuff, count, datatype, stream, "ncclGather");
}

PLAIT_API(ncclResult_t, Scatter,
          (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kScatter, sendbuff, recvbuff, count, datatype, stream, "ncclScatter");
}

PLAIT_API(ncclResult_t, Send,
          (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
           cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kSend, sendbuff, nullptr, count, datatype, stream, "ncclSend");
}

PLAIT_API(ncclResult_t, Recv,
          (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) {
  return notYet(comm, plait::CollType::kRecv, nullptr, recvbuff, count, datatype, stream, "ncclRecv");
}

PLAIT_API(ncclResult_t, GroupStart, (void)) {
  plait::group::start();
  return ncclSuccess;
}

PLAIT_API(ncclResult_t, GroupEnd, (void)) {
  Status s = plait::group::end([](plait::Communicator* comm, std::vector<Task>& tasks) {
    for (const Task& t : tasks) PLAIT_RETURN_IF_ERROR(comm->run(t));
    return Status::ok();
  });
  return fail(s, "ncclGroupEnd");
}

PLAIT_API(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo)) {
  const char* call = "ncclGroupSimulateEnd";
  if (simInfo == nullptr) return fail(plait::invalidArgument("simInfo is NULL"), call);
  if (simInfo->magic != 0x74685283)
    return fail(plait::invalidArgument("simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER"), call);
  float total = 0;
  for (const auto& op : plait::group::pending()) total += static_cast<float>(op.comm->estimateUs(op.task));
  simInfo->estimatedTime = total;
  // Simulation launches nothing: drop the pending operations like End would.
  Status s = plait::group::end([](plait::Communicator*, std::vector<Task>&) { return Status::ok(); });
  return fail(s, call);
}
