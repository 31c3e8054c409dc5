// symmetric.h — the device API's memory (nccl_device.h): windows every LSA
// rank can load from and store to, and device communicators.
//
// Each rank reserves one range of address space, lsaSize x stride bytes
// (stride: the device's memory rounded up to 4 GiB, as NCCL's default, or
// PLAIT_WIN_STRIDE). Registering a window (collective, NCCL_WIN_COLL_SYMMETRIC)
// gives the CUDA VMM allocation holding the buffer one offset, the same on
// every rank, and maps each LSA rank's allocation at
// flat + lsaRank x stride + offset: so a kernel finds its peer's copy of
// any window byte at lsaFlatBase + peer x stride + byte (ncclGetLsaPointer).
// The allocations travel as POSIX fds (transport/fdpass) between processes,
// and between ranks that are threads of one process alike. The kernels read
// each window as an ncclWindow_vidmem in device memory: the handle
// ncclCommWindowRegister returns.
//
// A device communicator (ncclDevCommCreate, collective) is a zeroed resource
// window holding the LSA barriers and the buffers its requirements ask for,
// and the ncclDevComm that describes it. Multimem (NVLS) and GIN are refused
// by the caller (src/api/device_api.cc).
//
// Every collective step ends with an all-gather of each rank's outcome, so a
// failure on one rank fails the call on every rank, and nothing it mapped
// stays. Deregistration is local (NCCL's); ranks that register and
// deregister in the same order keep their offsets in step, and a rank out
// of step gets an error naming the offsets, not corrupted memory.
//
// CUDA-free: the CUDA side is core/device_backend.h's SymmetricMemory.
// Used by one thread at a time (the communicator's rule).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/bootstrap.h"
#include "core/device_backend.h"
#include "nccl_device.h"
#include "plait/status.hpp"
#include "transport/fdpass/fd_passing.h"

namespace plait {

struct SymmetricSetup {
  int rank = 0;
  int nranks = 1;
  int lsaSize = 1;
  std::vector<int> pids;  // per world rank
  Bootstrap* bootstrap = nullptr;
  std::shared_ptr<SymmetricMemory> memory;
  const std::atomic<uint32_t>* abortFlag = nullptr;
  int64_t timeoutMs = 0;  // each collective step's deadline
  // Why this rank cannot use the device API ("" when it can): the ranks
  // agree at creation, and one refusal is every rank's.
  std::string refusal;
};

class SymmetricSpace {
 public:
  // Collective over the communicator: agrees on whether every rank can use
  // the device API (refusal() says why not), then on the fd-passing token,
  // and reserves the flat range.
  static Result<std::unique_ptr<SymmetricSpace>> create(const SymmetricSetup& setup);
  ~SymmetricSpace();
  // Device memory the space holds itself (windows' structures, signals).
  uint64_t deviceBytes() const { return memory_ ? memory_->bytesHeld() : 0; }
  SymmetricSpace(const SymmetricSpace&) = delete;
  SymmetricSpace& operator=(const SymmetricSpace&) = delete;

  // "" when the ranks can use the device API, else the first rank's reason.
  const std::string& refusal() const { return refusal_; }

  // Collective: maps [buff, buff + bytes) (CUDA VMM memory, e.g. from
  // ncclMemAlloc) for the LSA team and returns the device ncclWindow_vidmem
  // kernels read. `localHandle` is kept with it (the communicator's own
  // registration of the range) and given back by deregisterWindow.
  Result<void*> registerWindow(void* buff, size_t bytes, void* localHandle);
  // Local. kInvalidArgument when `window` is not a live window of this space.
  Status deregisterWindow(void* window, void** localHandle);
  bool isWindow(void* window) const { return windows_.count(window) != 0; }
  // The buffer `window` was registered with (null: not a window here).
  void* windowBuffer(void* window) const {
    auto it = windows_.find(window);
    return it == windows_.end() ? nullptr : reinterpret_cast<void*>(it->second->begin);
  }
  void attachLocalHandle(void* window, void* localHandle) {
    if (auto it = windows_.find(window); it != windows_.end()) it->second->localHandle = localHandle;
  }

  // Collective: the signal window of the symmetric collectives (zeroed,
  // symmetricSignalBytes), once; later calls return at once.
  Status createSignals();
  // Where the symmetric kernels find [ptr, ptr + bytes): its offset in each
  // rank's share of the flat range, when it lies inside one window; else
  // nothing. Local.
  std::optional<size_t> flatOffset(const void* ptr, size_t bytes) const;
  // The flat range, its stride, this rank's place in the LSA team and the
  // signal window's offset (valid after createSignals).
  char* flat() const { return flat_; }
  size_t stride() const { return stride_; }
  int lsaSize() const { return lsaSize_; }
  int lsaRank() const { return lsaRank_; }
  std::optional<size_t> signalOffset() const { return signalOffset_; }

  // Collective: the resource window for `reqs` and the device communicator.
  Status createDevComm(const ncclDevCommRequirements& reqs, ncclDevComm* out);
  // Local: releases what createDevComm made for `devComm`.
  Status destroyDevComm(const ncclDevComm& devComm);

 private:
  struct Memory {  // one registered allocation, mapped for the whole LSA team
    size_t offset = 0;  // in each rank's share of the flat range
    size_t extent = 0;  // reserved there (the team's largest allocation)
    int refs = 0;       // windows inside it
    std::vector<DeviceMapping> mappings;
  };
  struct Window {
    uintptr_t memory = 0;  // key of memories_
    uintptr_t begin = 0;   // the registered range in this process
    size_t bytes = 0;
    size_t flatOffset = 0;  // of `begin` in each rank's share
    void* localHandle = nullptr;
    ncclWindow_vidmem view{};  // what the device copy holds
  };

  explicit SymmetricSpace(const SymmetricSetup& setup);
  Deadline stepDeadline() const;
  // First offset of `bytes` free in the flat share (granularity-aligned).
  size_t firstFit(size_t bytes) const;
  // Collective: a zeroed VMM allocation of `bytes` registered as a window:
  // (the window's handle, the allocation), which the caller keeps to free.
  Result<std::pair<void*, void*>> internalWindow(size_t bytes, const char* what);
  // Maps every LSA rank's allocation at `offset` (fds exchanged under `tag`).
  Status mapTeam(const std::vector<DeviceRangeExport>& team, int ownFd, size_t offset, uint64_t tag, Memory* memory);
  void unmapAll(Memory* memory);
  // All-gathers each rank's outcome of a step: the first failure, named by
  // rank, or OK everywhere.
  Status agree(const Status& mine, const char* step);

  int rank_, nranks_, lsaSize_, lsaRank_;
  Bootstrap* bootstrap_;
  std::shared_ptr<SymmetricMemory> memory_;  // outlives the backend across suspend / resume
  const std::atomic<uint32_t>* abortFlag_;
  int64_t timeoutMs_;
  std::string refusal_;
  std::unique_ptr<fdpass::FdMailbox> mailbox_;
  char* flat_ = nullptr;
  size_t stride_ = 0;
  size_t granularity_ = 0;
  uint64_t tags_ = 0;                         // fd exchanges so far (the same count on every rank)
  std::map<size_t, size_t> used_;             // offset -> extent, in each rank's share
  std::map<uintptr_t, Memory> memories_;      // by the allocation's base in this process
  std::map<void*, std::unique_ptr<Window>> windows_;  // by the device ncclWindow_vidmem (winHost: the record)
  std::map<void*, void*> devComms_;           // resource window -> its allocation
  std::pair<void*, void*> signals_{};         // the signal window and its allocation (never a user's handle)
  std::map<uintptr_t, Window*> byBegin_;      // windows by the start of their range (flatOffset)
  std::optional<size_t> signalOffset_;        // the signal window's flat offset, once created
};

}  // namespace plait
