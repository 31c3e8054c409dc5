// query_api.cc — errors, queries, memory, registration, user operations.
#include <cstring>

#include "algorithms/types.h"
#include "api/api_util.h"
#include "base/config.h"
#include "base/log.h"
#include "core/device_memory.h"
#include "core/group.h"
#include "core/host_memory.h"
#include "plait/memory.hpp"

using plait::Status;
using namespace plait::api;

PLAIT_API(const char*, GetErrorString, (ncclResult_t result)) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the Plait developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
} PLAIT_API_END

PLAIT_API(const char*, GetLastError, (ncclComm_t comm)) { return lastError(); } PLAIT_API_END

extern "C" void pncclResetDebugInit(void) {
  plait::log::reset();
  plait::config::resetAll();
}
extern "C" void ncclResetDebugInit(void) __attribute__((weak, alias("pncclResetDebugInit")));

PLAIT_API(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError)) {
  const char* call = "ncclCommGetAsyncError";
  if (asyncError == nullptr) return fail(plait::invalidArgument("asyncError is NULL"), call);
  if (comm == nullptr) return fail(plait::invalidArgument("comm is NULL"), call);
  if (comm->magic != ncclComm::kLive) return fail(plait::invalidArgument("comm was destroyed or aborted"), call);
  switch (comm->initState.load(std::memory_order_acquire)) {
    case 1: *asyncError = ncclInProgress; return ncclSuccess;
    case 2: *asyncError = toResult(comm->initError.code()); return ncclSuccess;
    default: break;
  }
  Status background;
  if (backgroundPending(comm, &background)) {
    *asyncError = ncclInProgress;
    return ncclSuccess;
  }
  if (!background.isOk()) {  // a non-blocking call's own error, reported once
    *asyncError = toResult(background.code());
    fail(background, call);
    return ncclSuccess;
  }
  CommUse use(comm);
  if (!use.usable()) {
    *asyncError = ncclSuccess;
    return ncclSuccess;
  }
  Status s = comm->impl->asyncError();
  *asyncError = toResult(s.code());
  if (!s.isOk()) fail(s, call);  // keep the message for ncclGetLastError
  return ncclSuccess;
} PLAIT_API_END

namespace {
template <typename Fn>
ncclResult_t query(ncclComm_t comm, void* out, const char* call, Fn fn) {
  if (out == nullptr) return fail(plait::invalidArgument("the output pointer is NULL"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  fn();
  return ncclSuccess;
}
}  // namespace

PLAIT_API(ncclResult_t, CommCount, (const ncclComm_t comm, int* count)) {
  return query(comm, count, "ncclCommCount", [&] { *count = comm->nranks; });
} PLAIT_API_END

// Host communicators have no CUDA device: the answer is -1.
PLAIT_API(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device)) {
  return query(comm, device, "ncclCommCuDevice", [&] { *device = comm->cudaDev; });
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank)) {
  return query(comm, rank, "ncclCommUserRank", [&] { *rank = comm->rank; });
} PLAIT_API_END

// ---- Memory ------------------------------------------------------------------
// As NCCL: device memory of the current CUDA device where there is one
// (core/device_memory.h; PLAIT_MEM_ALLOC overrides); elsewhere host memory
// that local peers can map (core/host_memory.h), so collectives on
// registered ncclMemAlloc buffers can go direct (core/direct.h). Plait's own
// host users take the latter always (plait/memory.hpp).
PLAIT_API(ncclResult_t, MemAlloc, (void** ptr, size_t size)) {
  const char* call = "ncclMemAlloc";
  if (ptr == nullptr) return fail(plait::invalidArgument("ptr is NULL"), call);
  if (size == 0) return fail(plait::invalidArgument("size is 0"), call);
  plait::Result<bool> device = plait::device_memory::wanted();
  if (!device.isOk()) return fail(device.status(), call);
  plait::Result<void*> p = *device ? plait::device_memory::allocate(size) : plait::host_memory::allocate(size);
  if (!p.isOk()) return fail(p.status(), call);
  *ptr = *p;
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, MemFree, (void* ptr)) {
  if (ptr == nullptr) return ncclSuccess;
  if (plait::device_memory::owns(ptr)) return fail(plait::device_memory::release(ptr), "ncclMemFree");
  if (plait::device_memory::baseOf(ptr, 1) != nullptr)
    return fail(plait::invalidArgument("ptr points inside a device allocation of ncclMemAlloc, not at its start"),
                "ncclMemFree");
  return fail(plait::host_memory::release(ptr), "ncclMemFree");
} PLAIT_API_END

namespace plait {
Result<void*> hostMemAlloc(size_t bytes) {
  if (bytes == 0) return invalidArgument("hostMemAlloc: bytes is 0");
  return host_memory::allocate(bytes);
}
}  // namespace plait

// ---- Registration ----------------------------------------------------------------
// Local calls (no peer takes part), as NCCL's. A registration of memory
// that is not from ncclMemAlloc is accepted; collectives on it simply take
// the FIFO path unless every rank is a thread of one process.
namespace {
// The buffer of a registration: not null, not empty, not wrapping around.
Status checkRange(const void* buff, size_t size) {
  if (buff == nullptr) return plait::invalidArgument("buff is NULL");
  if (size == 0) return plait::invalidArgument("size is 0");
  if (reinterpret_cast<uintptr_t>(buff) + size < reinterpret_cast<uintptr_t>(buff))
    return plait::invalidArgument("buff + size (" + std::to_string(size) + ") wraps around");
  return Status::ok();
}

ncclResult_t registerRange(ncclComm_t comm, void* buff, size_t size, void** handle, plait::RegistrationKind kind,
                           const char* call) {
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkRange(buff, size); !s.isOk()) return fail(s, call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(comm->impl->registerBuffer(buff, size, kind, handle), call);
}

ncclResult_t deregisterHandle(ncclComm_t comm, void* handle, plait::RegistrationKind kind, const char* call) {
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (handle == nullptr) return fail(plait::invalidArgument("handle is NULL"), call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(comm->impl->deregisterBuffer(handle, kind), call);
}
}  // namespace

PLAIT_API(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle)) {
  const char* call = "ncclCommRegister";
  if (handle == nullptr) return fail(plait::invalidArgument("handle is NULL"), call);
  return registerRange(comm, buff, size, handle, plait::RegistrationKind::kBuffer, call);
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle)) {
  return deregisterHandle(comm, handle, plait::RegistrationKind::kBuffer, "ncclCommDeregister");
} PLAIT_API_END

// A window is a registration with a handle of its own type. With
// NCCL_WIN_COLL_SYMMETRIC on a communicator whose ranks can use the device
// API it is collective (the LSA team maps it: core/symmetric.h) and its
// handle is the device ncclWindow_vidmem kernels read; inside a group it
// happens at the outermost ncclGroupEnd, with the group's other
// communicators, as in NCCL. Elsewhere it is a local registration.
namespace {
Status registerWindowNow(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  CommUse use(comm);
  if (!use.usable()) return plait::invalidUsage("comm is being destroyed or aborted");
  void* handle = nullptr;
  PLAIT_RETURN_IF_ERROR(comm->impl->registerWindow(buff, size, winFlags, &handle));
  *win = static_cast<ncclWindow_t>(handle);
  return Status::ok();
}
}  // namespace

PLAIT_API(ncclResult_t, CommWindowRegister,
          (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags)) {
  const char* call = "ncclCommWindowRegister";
  if (win == nullptr) return fail(plait::invalidArgument("win is NULL"), call);
  if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0)
    return fail(plait::invalidArgument("winFlags " + std::to_string(winFlags) + " has unknown bits"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkQuiet(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkRange(buff, size); !s.isOk()) return fail(s, call);
  if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) != 0 && plait::group::active()) {
    *win = nullptr;
    plait::group::deferSetup(comm, [=] { return registerWindowNow(comm, buff, size, win, winFlags); });
    return ncclSuccess;
  }
  return fail(registerWindowNow(comm, buff, size, win, winFlags), call);
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win)) {
  const char* call = "ncclCommWindowDeregister";
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkQuiet(comm); !s.isOk()) return fail(s, call);
  if (win == nullptr) return fail(plait::invalidArgument("win is NULL"), call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(comm->impl->deregisterWindow(win), call);
} PLAIT_API_END

PLAIT_API(ncclResult_t, WinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr)) {
  const char* call = "ncclWinGetUserPtr";
  if (outUserPtr == nullptr) return fail(plait::invalidArgument("outUserPtr is NULL"), call);
  *outUserPtr = nullptr;
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (win == nullptr) return fail(plait::invalidArgument("win is NULL"), call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  auto buffer = comm->impl->windowBuffer(win);
  if (!buffer.isOk()) return fail(buffer.status(), call);
  *outUserPtr = *buffer;
  return ncclSuccess;
} PLAIT_API_END

// ---- User reduction operations ------------------------------------------------------
PLAIT_API(ncclResult_t, RedOpCreatePreMulSum,
          (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
           ncclComm_t comm)) {
  const char* call = "ncclRedOpCreatePreMulSum";
  if (op == nullptr) return fail(plait::invalidArgument("op is NULL"), call);
  if (scalar == nullptr) return fail(plait::invalidArgument("scalar is NULL"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkType(datatype); !s.isOk()) return fail(s, call);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(plait::invalidArgument("residence is " + std::to_string(static_cast<int>(residence))), call);
  ncclComm::UserOp u;
  u.live = true;
  u.type = datatype;
  u.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(&u.scalarBits, scalar, plait::typeSize(datatype));
  } else {
    u.scalarPtr = scalar;  // host builds: "device" memory is host memory, read at each call
  }
  std::lock_guard<std::mutex> lock(comm->opsMu);
  size_t index = 0;
  while (index < comm->userOps.size() && comm->userOps[index].live) ++index;
  if (index == comm->userOps.size()) comm->userOps.emplace_back();
  comm->userOps[index] = u;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(index));
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm)) {
  const char* call = "ncclRedOpDestroy";
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  const int index = static_cast<int>(op) - ncclNumOps;
  std::lock_guard<std::mutex> lock(comm->opsMu);
  if (static_cast<int>(op) < ncclNumOps)
    return fail(plait::invalidArgument("op " + std::to_string(static_cast<int>(op)) + " is built in"), call);
  if (index >= static_cast<int>(comm->userOps.size()) || !comm->userOps[index].live)
    return fail(plait::invalidArgument("op " + std::to_string(static_cast<int>(op)) + " is not live on this comm"),
                call);
  comm->userOps[index].live = false;
  return ncclSuccess;
} PLAIT_API_END
