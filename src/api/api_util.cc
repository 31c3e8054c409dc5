#include "api/api_util.h"

#include <cstdio>

#include "algorithms/types.h"
#include "base/cuda_probe.h"
#include "base/log.h"
#include "base/no_throw.h"
#include "core/host_stream.h"

namespace plait::api {
namespace {
thread_local std::string tlsLastError;
}  // namespace

ncclResult_t toResult(Code code) {
  switch (code) {
    case Code::kOk: return ncclSuccess;
    case Code::kCudaError: return ncclUnhandledCudaError;
    case Code::kSystemError: return ncclSystemError;
    case Code::kInternalError: return ncclInternalError;
    case Code::kInvalidArgument: return ncclInvalidArgument;
    case Code::kInvalidUsage: return ncclInvalidUsage;
    case Code::kRemoteError: return ncclRemoteError;
    case Code::kInProgress: return ncclInProgress;
  }
  return ncclInternalError;
}

ncclResult_t failSlow(const Status& status, const char* call) {
  if (status.code() == Code::kInProgress) return ncclInProgress;
  tlsLastError = std::string(call) + ": " + status.message();
  PLAIT_WARN(kCall, "%s failed: %s", call, status.toString().c_str());
  return toResult(status.code());
}

const char* lastError() { return tlsLastError.c_str(); }

BoundaryError exceptionAtBoundary(const char* function) noexcept {
  Status status;
  try {
    status = statusFromCurrentException();
  } catch (...) {  // building the message needs memory too
    return BoundaryError{ncclSystemError};
  }
  const ncclResult_t result = toResult(status.code());
  try {  // recording the message allocates too; the result code is what matters
    const std::string call = function[0] == 'p' ? function + 1 : function;  // pncclX -> ncclX
    fail(status, call.c_str());
  } catch (...) {
  }
  return BoundaryError{result};
}

Status commError(ncclComm_t comm) {
  if (comm == nullptr) return invalidArgument("comm is NULL");
  if (comm->magic != ncclComm::kLive)
    return invalidArgument("comm is not a live communicator (destroyed, aborted, or never initialised)");
  if (comm->closing.load(std::memory_order_acquire))
    return invalidUsage("comm is being destroyed or aborted");
  int init = comm->initState.load(std::memory_order_acquire);
  // As NCCL: an error, never ncclInProgress, which from a non-blocking
  // communicator means "accepted, running" and would hide a dropped call.
  if (init == 1)
    return invalidArgument("comm is still initialising (a non-blocking init, or one in a group that has not "
                           "ended): use it once ncclCommGetAsyncError reports ncclSuccess");
  if (init == 2) return invalidUsage("comm failed to initialise: " + comm->initError.message());
  return Status::ok();  // it became usable between the inline check and this one
}

Status typeError(ncclDataType_t type, const char* name) {
  if (isValidType(static_cast<int>(type))) return Status::ok();
  return invalidArgument(std::string(name) + " is " + std::to_string(static_cast<int>(type)) +
                         ", not an ncclDataType_t (0.." + std::to_string(ncclNumTypes - 1) + ")");
}

Status rootError(int root, int nranks, const char* name) {
  return invalidArgument(std::string(name) + " is " + std::to_string(root) + ", outside [0, " +
                         std::to_string(nranks) + ")");
}

Status bufferError(const char* name) { return invalidArgument(std::string(name) + " is NULL with count > 0"); }

Status placeTask(ncclComm_t comm, std::span<const UsedBuffer> used, cudaStream_t stream, Task* task) {
  HostStream* hostStream = stream != nullptr ? HostStream::fromHandle(stream) : nullptr;
  const UsedBuffer* onDevice = nullptr;
  const UsedBuffer* onHost = nullptr;
  const void* lastPtr = nullptr;  // in place: one query serves both buffers (~0.3 us each with a GPU present)
  int lastDevice = -1;
  for (const UsedBuffer& b : used) {
    if (b.count == 0) continue;
    const int device = b.ptr != nullptr && b.ptr == lastPtr ? lastDevice : cuda::deviceOf(b.ptr);
    lastPtr = b.ptr;
    lastDevice = device;
    if (device < 0) {
      if (onHost == nullptr) onHost = &b;
      continue;
    }
    if (device != comm->cudaDev)
      return invalidArgument(std::string(b.name) + " is memory of CUDA device " + std::to_string(device) +
                             " but the communicator belongs to device " + std::to_string(comm->cudaDev) +
                             " (the device that was current when it was created)");
    if (onDevice == nullptr) onDevice = &b;
  }
  if (onDevice != nullptr && onHost != nullptr)
    return invalidArgument(std::string(onDevice->name) + " is CUDA device memory but " + onHost->name +
                           " is host memory; an operation's buffers must both be on the device or both on the host");
  if (onDevice != nullptr) {
    if (hostStream != nullptr)
      return invalidArgument(std::string(onDevice->name) +
                             " is CUDA device memory but stream is a Plait host stream; pass a cudaStream_t (or "
                             "NULL for CUDA's default stream)");
    task->onDevice = true;
    task->cudaStream = stream;
    return Status::ok();
  }
  if (stream == nullptr || hostStream != nullptr) {
    task->stream = hostStream;
    return Status::ok();
  }
  if (onHost != nullptr)
    return invalidArgument(std::string(onHost->name) +
                           " is host memory but stream is not a Plait host stream (a CUDA stream, or not a "
                           "stream): host buffers run on the host executor; pass NULL to block, or a stream from "
                           "plait::HostStream");
  // Nothing to move on this rank: ordered on the CUDA stream like any kernel.
  task->onDevice = true;
  task->cudaStream = stream;
  return Status::ok();
}

Status resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t type, Task* task) {
  const int opValue = static_cast<int>(op);
  task->ncclOp = op;
  if (opValue >= 0 && opValue < ncclNumOps) {
    if (!makeRedOp(type, opValue, comm->nranks, &task->op))
      return invalidArgument("op " + std::to_string(opValue) + " cannot be applied to " + typeName(type));
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(comm->opsMu);
  const int index = opValue - ncclNumOps;
  if (opValue < 0 || index >= static_cast<int>(comm->userOps.size()) || !comm->userOps[index].live)
    return invalidArgument("op is " + std::to_string(opValue) +
                           ": neither a built-in ncclRedOp_t nor a live operation of this communicator");
  const ncclComm::UserOp& u = comm->userOps[index];
  if (u.type != type)
    return invalidArgument(std::string("op was created for ") + typeName(u.type) + " but datatype is " +
                           typeName(type));
  task->op.kind = RedOpKind::kPreMulSum;
  task->op.scalar = u.scalarBits;
  if (u.residence == ncclScalarDevice) {
    task->op.scalar = 0;
    if (task->onDevice) {
      task->deviceScalar = u.scalarPtr;  // the kernel reads it when it runs, as NCCL's does
    } else if (cuda::isDeviceMemory(u.scalarPtr)) {
      return invalidArgument("op's PreMulSum scalar is in CUDA device memory but the buffers are host memory; "
                             "host collectives need the scalar in host memory");
    } else {
      std::memcpy(&task->op.scalar, u.scalarPtr, typeSize(type));
    }
  }
  return Status::ok();
}

}  // namespace plait::api
