// device_staging.cc — see device_staging.h.
#include "device_staging.h"

// The wrappers call the real entry points.
#undef ncclAllReduce
#undef ncclReduce
#undef ncclBroadcast
#undef ncclBcast
#undef ncclReduceScatter
#undef ncclAllGather
#undef ncclSend
#undef ncclRecv
#undef ncclAlltoAll
#undef ncclGather
#undef ncclScatter
#undef ncclGroupStart
#undef ncclGroupEnd
#undef ncclGroupSimulateEnd
#undef ncclCommInitRank

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "plait_emu/runtime_api.h"

namespace plait_device_staging {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xa5;

// One host range [host, host + bytes) and its device copy.
struct Range {
  char* host = nullptr;
  size_t bytes = 0;
  bool copyBack = false;
};

// One device allocation mirroring host bytes [base, base + span), at the
// same alignment modulo 64, followed by guard bytes.
struct Block {
  char* base = nullptr;
  size_t span = 0;
  char* alloc = nullptr;   // cudaMalloc'd
  char* device = nullptr;  // device address of `base`
};

// A staged operation: overlapping host ranges share a block (so in-place
// layouts stay in place on the device), others get their own.
struct Staged {
  std::vector<Block> blocks;
  std::vector<Range> ranges;
  cudaStream_t stream = nullptr;
  int cudaDev = 0;
  bool expectKernel = false;  // data moves: a kernel must run it
  bool any() const { return !blocks.empty(); }
};

thread_local int tlsGroupDepth = 0;
thread_local uint64_t tlsGroupKernelsBefore = 0;  // kernelsLaunched() at the outermost ncclGroupStart
thread_local std::vector<Staged> tlsPending;
thread_local unsigned tlsCalls = 0;
thread_local bool tlsGroupOwnStream = false;  // the stream kind of the current group
std::atomic<unsigned long long> gStaged{0};

// The thread's stream on each device (created on first use, never destroyed:
// threads of a test are few).
cudaStream_t threadStream(int device) {
  thread_local std::vector<cudaStream_t> streams;
  if (streams.size() <= static_cast<size_t>(device)) streams.resize(device + 1, nullptr);
  if (streams[device] == nullptr && cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking) != cudaSuccess)
    std::fprintf(stderr, "device_staging: cudaStreamCreate failed\n");
  return streams[device];
}

bool fail(const char* what) {
  std::fprintf(stderr, "device_staging: %s failed: %s\n", what, cudaGetErrorString(cudaGetLastError()));
  return false;
}

// Allocates and fills the device copy of `ranges`.
bool stage(ncclComm_t comm, std::vector<Range> ranges, Staged* out) {
  ranges.erase(std::remove_if(ranges.begin(), ranges.end(), [](const Range& r) { return r.host == nullptr || r.bytes == 0; }),
               ranges.end());
  out->ranges = ranges;
  if (ncclCommCuDevice(comm, &out->cudaDev) != ncclSuccess) return fail("ncclCommCuDevice");
  if (cudaSetDevice(out->cudaDev) != cudaSuccess) return fail("cudaSetDevice");
  // Every other call (every other group) on CUDA's default stream.
  const bool own = tlsGroupDepth > 0 ? tlsGroupOwnStream : tlsCalls++ % 2 == 0;
  out->stream = own ? threadStream(out->cudaDev) : nullptr;
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.host < b.host; });
  for (const Range& r : ranges) {
    if (!out->blocks.empty() && r.host <= out->blocks.back().base + out->blocks.back().span) {
      Block& b = out->blocks.back();
      b.span = std::max(b.span, static_cast<size_t>(r.host + r.bytes - b.base));
    } else {
      out->blocks.push_back(Block{r.host, r.bytes, nullptr, nullptr});
    }
  }
  for (Block& b : out->blocks) {
    const size_t shift = reinterpret_cast<uintptr_t>(b.base) % 64;  // keep the host's alignment
    if (cudaMalloc(reinterpret_cast<void**>(&b.alloc), shift + b.span + kGuardBytes) != cudaSuccess)
      return fail("cudaMalloc");
    b.device = b.alloc + shift;
    // Bytes between ranges and the guard: a known pattern.
    if (cudaMemset(b.alloc, kGuardByte, shift + b.span + kGuardBytes) != cudaSuccess) return fail("cudaMemset");
  }
  for (const Range& r : ranges)
    for (const Block& b : out->blocks)
      if (r.host >= b.base && r.host < b.base + b.span &&
          cudaMemcpy(b.device + (r.host - b.base), r.host, r.bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        return fail("cudaMemcpy to the device");
  return true;
}

void* dev(const Staged& s, const void* host) {
  const char* h = static_cast<const char*>(host);
  if (h == nullptr) return nullptr;
  for (const Block& b : s.blocks)
    if (h >= b.base && h <= b.base + b.span) return b.device + (h - b.base);
  return const_cast<void*>(host);  // not staged (count 0)
}

// Waits for the stream, checks the guards, copies outputs back, frees.
bool finish(Staged& s) {
  bool ok = true;
  if (cudaSetDevice(s.cudaDev) != cudaSuccess) ok = fail("cudaSetDevice");
  if (cudaStreamSynchronize(s.stream) != cudaSuccess) ok = fail("cudaStreamSynchronize");
  for (const Block& b : s.blocks) {
    unsigned char guard[kGuardBytes];
    if (cudaMemcpy(guard, b.device + b.span, kGuardBytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      ok = fail("cudaMemcpy of the guard");
    for (unsigned char g : guard)
      if (g != kGuardByte) {
        std::fprintf(stderr, "device_staging: the kernel wrote past the end of a device buffer\n");
        ok = false;
        break;
      }
  }
  for (const Range& r : s.ranges)
    for (const Block& b : s.blocks)
      if (r.copyBack && r.host >= b.base && r.host < b.base + b.span &&
          cudaMemcpy(r.host, b.device + (r.host - b.base), r.bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        ok = fail("cudaMemcpy from the device");
  for (const Block& b : s.blocks)
    if (cudaFree(b.alloc) != cudaSuccess) ok = fail("cudaFree");
  return ok;
}

size_t typeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

int nranksOf(ncclComm_t comm) {
  int n = 1;
  if (ncclCommCount(comm, &n) != ncclSuccess) return 1;
  return n;
}

// Runs call(deviceSend, deviceRecv, stream) on the staged copies of the
// send and receive ranges; out of a group, finishes at once.
// `nothingMoves`: the operation has no data to move (one rank, in place),
// so no kernel is expected.
ncclResult_t run(ncclComm_t comm, cudaStream_t userStream, const void* send, size_t sendBytes, void* recv,
                 size_t recvBytes, const std::function<ncclResult_t(const void*, void*, cudaStream_t)>& call,
                 bool nothingMoves = false) {
  if (userStream != nullptr) return call(send, recv, userStream);  // a Plait host stream: host path as written
  Staged s;
  std::vector<Range> ranges;
  ranges.push_back(Range{const_cast<char*>(static_cast<const char*>(send)), sendBytes, false});
  ranges.push_back(Range{static_cast<char*>(recv), recvBytes, true});
  if (!stage(comm, ranges, &s)) return ncclUnhandledCudaError;
  // Nothing to move: the call keeps its NULL stream (the host path), so that
  // zero-byte sends and receives of peers meet on the same path.
  if (!s.any()) s.stream = nullptr;
  const uint64_t kernelsBefore = plait_emu::kernelsLaunched();
  const ncclResult_t r = call(dev(s, send), dev(s, recv), s.stream);
  // Device memory is host-addressable under the emulator: only a launch
  // proves the device path ran (other threads' launches could only hide a
  // miss when ranks are threads; the forked runs see their own alone).
  // In a group the kernels launch at ncclGroupEnd, which checks them.
  if (r == ncclSuccess && s.any() && !nothingMoves && tlsGroupDepth == 0 &&
      plait_emu::kernelsLaunched() == kernelsBefore) {
    std::fprintf(stderr, "device_staging: an operation on device buffers launched no kernel\n");
    s.ranges.clear();
    finish(s);
    return ncclInternalError;
  }
  if (r != ncclSuccess) {
    s.ranges.clear();  // nothing ran: free without copying back
    s.stream = nullptr;
    finish(s);
    return r;
  }
  s.expectKernel = s.any() && !nothingMoves;
  if (s.expectKernel) gStaged.fetch_add(1, std::memory_order_relaxed);
  if (tlsGroupDepth > 0) {
    tlsPending.push_back(s);
    return ncclSuccess;
  }
  return finish(s) ? ncclSuccess : ncclInternalError;
}

}  // namespace

ncclResult_t allReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes, [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclAllReduce(s, r, count, type, op, comm, st);
  });
}

ncclResult_t reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                    ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes, [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclReduce(s, r, count, type, op, root, comm, st);
  });
}

ncclResult_t broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                       ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes, [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclBroadcast(s, r, count, type, root, comm, st);
  });
}

ncclResult_t bcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, buff, bytes, buff, bytes, [&](const void*, void* r, cudaStream_t st) {
    return ::ncclBcast(r, count, type, root, comm, st);
  });
}

ncclResult_t reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = recvcount * typeBytes(type);
  return run(comm, stream, sendbuff, bytes * nranksOf(comm), recvbuff, bytes,
             [&](const void* s, void* r, cudaStream_t st) {
               return ::ncclReduceScatter(s, r, recvcount, type, op, comm, st);
             });
}

ncclResult_t allGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                       cudaStream_t stream) {
  const size_t bytes = sendcount * typeBytes(type);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes * nranksOf(comm),
             [&](const void* s, void* r, cudaStream_t st) {
               return ::ncclAllGather(s, r, sendcount, type, comm, st);
             });
}

ncclResult_t send(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                  cudaStream_t stream) {
  return run(comm, stream, sendbuff, count * typeBytes(type), nullptr, 0, [&](const void* s, void*, cudaStream_t st) {
    return ::ncclSend(s, count, type, peer, comm, st);
  });
}

ncclResult_t recv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return run(comm, stream, nullptr, 0, recvbuff, count * typeBytes(type), [&](const void*, void* r, cudaStream_t st) {
    return ::ncclRecv(r, count, type, peer, comm, st);
  });
}

ncclResult_t alltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclComm_t comm,
                      cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type) * nranksOf(comm);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes, [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclAlltoAll(s, r, count, type, comm, st);
  }, nranksOf(comm) == 1 && sendbuff == recvbuff);
}

ncclResult_t gather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                    ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, sendbuff, bytes, recvbuff, bytes * nranksOf(comm), [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclGather(s, r, count, type, root, comm, st);
  }, nranksOf(comm) == 1 && sendbuff == recvbuff);
}

ncclResult_t scatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                     ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * typeBytes(type);
  return run(comm, stream, sendbuff, bytes * nranksOf(comm), recvbuff, bytes, [&](const void* s, void* r, cudaStream_t st) {
    return ::ncclScatter(s, r, count, type, root, comm, st);
  }, nranksOf(comm) == 1 && sendbuff == recvbuff);
}

ncclResult_t groupStart() {
  const ncclResult_t r = ::ncclGroupStart();
  if (r == ncclSuccess && tlsGroupDepth++ == 0) {
    tlsGroupKernelsBefore = plait_emu::kernelsLaunched();
    tlsGroupOwnStream = tlsCalls++ % 2 == 0;
  }
  return r;
}

ncclResult_t groupEnd() {
  ncclResult_t r = ::ncclGroupEnd();
  if (tlsGroupDepth > 0) --tlsGroupDepth;
  if (tlsGroupDepth > 0) return r;
  std::vector<Staged> pending;
  pending.swap(tlsPending);
  // A group's point-to-point operations share one kernel: at least one ran.
  size_t staged = 0;
  for (const Staged& s : pending) staged += s.expectKernel ? 1 : 0;
  if (r == ncclSuccess && staged > 0 && plait_emu::kernelsLaunched() == tlsGroupKernelsBefore) {
    std::fprintf(stderr, "device_staging: a group of %zu operations on device buffers launched no kernel\n", staged);
    r = ncclInternalError;
  }
  for (Staged& s : pending) {
    if (r != ncclSuccess) s.ranges.clear();  // the group failed: its operations did not run
    if (!finish(s) && r == ncclSuccess) r = ncclInternalError;
  }
  return r;
}

// Simulation runs nothing: the group's staged buffers go without copy-back.
ncclResult_t groupSimulateEnd(ncclSimInfo_t* info) {
  const ncclResult_t r = ::ncclGroupSimulateEnd(info);
  if (tlsGroupDepth > 0) --tlsGroupDepth;
  if (tlsGroupDepth > 0) return r;
  std::vector<Staged> pending;
  pending.swap(tlsPending);
  for (Staged& s : pending) {
    s.ranges.clear();
    finish(s);
  }
  return r;
}

ncclResult_t commInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return ncclUnhandledCudaError;
  if (cudaSetDevice(rank % devices) != cudaSuccess) return ncclUnhandledCudaError;
  return ::ncclCommInitRank(comm, nranks, id, rank);
}

unsigned long long stagedOperations() { return gStaged.load(); }

}  // namespace plait_device_staging
