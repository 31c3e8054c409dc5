// symmetric_kernel.cu — the symmetric kernels (symmetric_work.h): AllReduce,
// ReduceScatter and AllGather by loads and stores into the LSA peers' window
// memory, and their launcher.
//
// Build time: AllGather only moves bytes (one kernel); AllReduce and
// ReduceScatter are the same loop (reduce from every rank's copy, store to
// every rank's copy or to this rank's) in one kernel per type that switches
// on the operator, as all_reduce_kernel.cu does: 12 + 1 kernels.
//
// The barriers: thread q of the block signals peer q (a release store at
// system scope into its inbox, after __threadfence_system), then waits for
// peer q's signal in this rank's inbox (acquire loads, a bounded spin then a
// __nanosleep backoff); every kCheckEvery polls it looks at the abort word
// and the deadline. A block that gives up poisons its inbox slot at every
// peer, so their waits end at once ("peer aborted") instead of at their
// deadlines. UNVERIFIED ON HARDWARE beyond one GPU shared by all ranks: the
// ordering of NVLink stores between GPUs before the barrier's release.
#include <cuda_runtime.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/reduce_copy.cuh"
#include "algorithms/device/symmetric_work.h"
#include "algorithms/reduce_ops.h"
#include "algorithms/ring_allreduce.h"  // channelPart
#include "algorithms/types.h"

namespace plait {
namespace device {
namespace {

constexpr uint32_t kSpinPolls = 256;
constexpr uint32_t kCheckEvery = 64;
constexpr unsigned kMinSleepNs = 32, kMaxSleepNs = 1024;

struct SymmetricShared {
  uint64_t epoch;
  uint32_t status;
};

__device__ PLAIT_INLINE char* rankCopy(const SymmetricWork& w, int q, uint64_t offset) {
  return w.flat + static_cast<uint64_t>(q) * w.stride + offset;
}

__device__ PLAIT_INLINE uint64_t* inbox(const SymmetricWork& w, int owner, int block, int from) {
  return reinterpret_cast<uint64_t*>(rankCopy(w, owner, w.signalOffset + symmetricInboxOffset(block, w.nranks, from)));
}

// Thread q < nranks: waits until peer q's block reached `seq` (its signal in
// this rank's inbox). Returns the outcome (kOk, or why it gave up).
__device__ DeviceStatus waitPeer(const SymmetricWork& w, int q, uint64_t seq, uint64_t deadline) {
  AtomicRef<uint64_t> mine(*inbox(w, w.rank, static_cast<int>(blockIdx.x), q));
  unsigned sleepNs = kMinSleepNs;
  for (uint32_t polls = 1;; ++polls) {
    const uint64_t v = mine.load(mo::acquire);
    if (v == kSymmetricPoison) return DeviceStatus::kPeerAborted;
    if (v >= seq) return DeviceStatus::kOk;
    if (polls % kCheckEvery == 0) {
      if (w.abortFlag != nullptr && AtomicRef<uint32_t>(*w.abortFlag).load(mo::relaxed) != 0)
        return DeviceStatus::kAborted;
      if (deadline != 0 && static_cast<uint64_t>(clock64()) >= deadline) return DeviceStatus::kBarrierTimeout;
    }
    if (polls >= kSpinPolls) {
      __nanosleep(sleepNs);
      sleepNs = sleepNs < kMaxSleepNs ? sleepNs * 2 : kMaxSleepNs;
    }
  }
}

// Block-wide barrier with block blockIdx.x of every rank: thread q signals
// peer q, then (after the whole block signalled: no thread waits before
// every signal is out) waits for peer q's signal. Returns false (the same in
// every thread) when it failed; then the failure is reported and the peers'
// inboxes poisoned.
__device__ bool barrier(const SymmetricWork& w, SymmetricShared* shared, uint64_t seq) {
  const int q = static_cast<int>(threadIdx.x);
  const int block = static_cast<int>(blockIdx.x);
  __syncthreads();  // the block's work before this point is done
  if (q < w.nranks) {
    __threadfence_system();  // the block's stores to peers' memory before the signal
    AtomicRef<uint64_t>(*inbox(w, q, block, w.rank)).store(seq, mo::release);
  }
  __syncthreads();
  if (q < w.nranks) {
    const uint64_t deadline = w.timeoutCycles == 0 ? 0 : static_cast<uint64_t>(clock64()) + w.timeoutCycles;
    const DeviceStatus s = waitPeer(w, q, seq, deadline);
    if (s != DeviceStatus::kOk) {
#if defined(PLAIT_DEVICE_EMULATION)
      shared->status = static_cast<uint32_t>(s);  // fibers: no other thread runs until the barrier
#else
      atomicMax(&shared->status, static_cast<uint32_t>(s));
#endif
    }
  }
  __syncthreads();
  const uint32_t status = shared->status;
  if (status == 0) return true;
  if (q < w.nranks)  // every peer's wait on this block ends now
    AtomicRef<uint64_t>(*inbox(w, q, block, w.rank)).store(kSymmetricPoison, mo::release);
  if (q == 0 && w.blockStatus != nullptr) AtomicRef<uint32_t>(w.blockStatus[block]).store(status, mo::relaxed);
  return false;
}

// dst(d) <- post(reduce over q of pre(src(q))) for d < nDsts: the sources are
// src0 + q·stride (q < nSrcs, reduced in q order), the destinations
// dst0 + d·stride. All share their offset modulo 16 (the stride is a
// multiple of 4 GiB), so the bulk moves as 16-byte vectors when src0 and
// dst0 do. Every thread of the block calls it.
template <class Fn>
__device__ __noinline__ void reduceStrided(const Fn& fn, const char* src0, int nSrcs, char* dst0, int nDsts,
                                           uint64_t stride, size_t count) {
  using T = typename Fn::Elt;
  using S = typename EltTraits<T>::Storage;
  using Traits = EltTraits<T>;
  constexpr size_t kPerVec = 16 / sizeof(S);
  constexpr int kUnroll = 4;
  const size_t tid = threadIdx.x, nThreads = blockDim.x;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(src0) & 15;
  size_t head = count, nVec = 0;
  if ((reinterpret_cast<uintptr_t>(dst0) & 15) == mis) {
    head = ((16 - mis) & 15) / sizeof(S);
    if (head > count) head = count;
    nVec = (count - head) / kPerVec;
  }
  const size_t vecEnd = head + nVec * kPerVec;
  auto pre = [&](typename Fn::Acc x) {
    if constexpr (Fn::kHasPreOp) x = fn.preOp(x);
    return x;
  };
  auto finish = [&](typename Fn::Acc x) {
    if (Fn::kHasPostOp) x = fn.postOp(x);
    return Traits::storeBits(x);
  };
  auto one = [&](size_t i) {
    typename Fn::Acc acc = pre(Traits::loadBits(loadCg(reinterpret_cast<const S*>(src0) + i)));
    for (int q = 1; q < nSrcs; ++q)
      acc = fn.reduce(acc, pre(Traits::loadBits(loadCg(reinterpret_cast<const S*>(src0 + q * stride) + i))));
    const S r = finish(acc);
    for (int d = 0; d < nDsts; ++d) reinterpret_cast<S*>(dst0 + d * stride)[i] = r;
  };
  union Vec {
    uint4 v;
    S e[kPerVec];
  };
  auto vectors = [&]<int kN>(size_t i) {
    typename Fn::Acc acc[kN][kPerVec];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      Vec a;
      a.v = __ldcg(reinterpret_cast<const uint4*>(src0 + head * sizeof(S)) + i + u * nThreads);
#pragma unroll
      for (size_t e = 0; e < kPerVec; ++e) acc[u][e] = pre(Traits::loadBits(a.e[e]));
    }
    for (int q = 1; q < nSrcs; ++q) {
      const uint4* s = reinterpret_cast<const uint4*>(src0 + q * stride + head * sizeof(S));
      Vec b[kN];
#pragma unroll
      for (int u = 0; u < kN; ++u) b[u].v = __ldcg(s + i + u * nThreads);
#pragma unroll
      for (int u = 0; u < kN; ++u)
#pragma unroll
        for (size_t e = 0; e < kPerVec; ++e) acc[u][e] = fn.reduce(acc[u][e], pre(Traits::loadBits(b[u].e[e])));
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      Vec r;
#pragma unroll
      for (size_t e = 0; e < kPerVec; ++e) r.e[e] = finish(acc[u][e]);
      for (int d = 0; d < nDsts; ++d)
        reinterpret_cast<uint4*>(dst0 + d * stride + head * sizeof(S))[i + u * nThreads] = r.v;
    }
  };
  size_t i = tid;
  for (; i + (kUnroll - 1) * nThreads < nVec; i += kUnroll * nThreads) vectors.template operator()<kUnroll>(i);
  for (; i < nVec; i += nThreads) vectors.template operator()<1>(i);
  const size_t nScalar = head + (count - vecEnd);
  for (size_t j = tid; j < nScalar; j += nThreads) one(j < head ? j : vecEnd + (j - head));
}

// This block's part [begin, end) of [0, n), in multiples of align.
__device__ PLAIT_INLINE void blockPart(size_t n, size_t align, size_t* begin, size_t* end) {
  channelPart(n, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), align, begin, end);
}

// Reads and advances this block's epoch (thread 0), shares it with the block.
__device__ uint64_t nextEpoch(const SymmetricWork& w, SymmetricShared* shared) {
  if (threadIdx.x == 0) {
    uint64_t* epoch = reinterpret_cast<uint64_t*>(rankCopy(w, w.rank, w.signalOffset)) + blockIdx.x;
    const uint64_t e = *epoch;
    *epoch = e + 2;  // two barriers per launch
    shared->epoch = e;
    shared->status = 0;
  }
  __syncthreads();
  return shared->epoch;
}

template <class Fn>
__device__ void reduceCollective(const SymmetricWork& w, SymmetricShared* shared) {
  const uint64_t epoch = nextEpoch(w, shared);
  if (!barrier(w, shared, epoch + 1)) return;
  const size_t elem = sizeof(typename Fn::Elt);
  const Fn fn(w.op);
  size_t begin = 0, end = 0;
  if (w.coll == DeviceColl::kAllReduce) {  // share `rank` of the buffer, this block's part of it
    size_t s0 = 0, s1 = 0;
    channelPart(w.count, w.nranks, w.rank, w.alignElems, &s0, &s1);
    blockPart(s1 - s0, w.alignElems, &begin, &end);
    begin += s0;
    end += s0;
    reduceStrided(fn, rankCopy(w, 0, w.sendOffset + begin * elem), w.nranks,
                  rankCopy(w, 0, w.recvOffset + begin * elem), w.nranks, w.stride, end - begin);
  } else {  // ReduceScatter: block `rank` of every send copy into this rank's receive buffer
    blockPart(w.count, w.alignElems, &begin, &end);
    const uint64_t from = w.sendOffset + (static_cast<uint64_t>(w.rank) * w.count + begin) * elem;
    reduceStrided(fn, rankCopy(w, 0, from), w.nranks, rankCopy(w, w.rank, w.recvOffset + begin * elem), 1, w.stride,
                  end - begin);
  }
  barrier(w, shared, epoch + 2);
}

template <class T>
__global__ void __launch_bounds__(kDeviceThreads) symmetricReduceKernel(const __grid_constant__ SymmetricWork work) {
  __shared__ SymmetricShared shared;
  switch (work.op.kind) {
    case RedOpKind::kSum: reduceCollective<FuncSum<T>>(work, &shared); break;
    case RedOpKind::kProd: reduceCollective<FuncProd<T>>(work, &shared); break;
    case RedOpKind::kMax: reduceCollective<FuncMax<T>>(work, &shared); break;
    case RedOpKind::kMin: reduceCollective<FuncMin<T>>(work, &shared); break;
    case RedOpKind::kSumPostDiv: reduceCollective<FuncSumPostDiv<T>>(work, &shared); break;
    case RedOpKind::kPreMulSum: reduceCollective<FuncPreMulSum<T>>(work, &shared); break;  // ncclAvg
  }
}

// AllGather: this rank's send buffer into block `rank` of every receive copy,
// as bytes (16-byte vectors where aligned).
__global__ void __launch_bounds__(kDeviceThreads) symmetricGatherKernel(const __grid_constant__ SymmetricWork w) {
  __shared__ SymmetricShared shared;
  const uint64_t epoch = nextEpoch(w, &shared);
  if (!barrier(w, &shared, epoch + 1)) return;
  size_t begin = 0, end = 0;
  blockPart(w.count * w.elemSize, 64, &begin, &end);
  const char* src = rankCopy(w, w.rank, w.sendOffset + begin);
  const uint64_t to = w.recvOffset + static_cast<uint64_t>(w.rank) * w.count * w.elemSize + begin;
  for (int q = 0; q < w.nranks; ++q) blockCopyBytes(src, rankCopy(w, q, to), end - begin);
  barrier(w, &shared, epoch + 2);
}

template <ncclDataType_t kType>
const void* reduceKernelOf() {
  return PLAIT_KERNEL_HANDLE(symmetricReduceKernel<TypeOfT<kType>>);
}

}  // namespace
}  // namespace device

const void* symmetricKernelFor(DeviceColl coll, ncclDataType_t type) {
  if (coll == DeviceColl::kAllGather)
    return isValidType(type) ? PLAIT_KERNEL_HANDLE(device::symmetricGatherKernel) : nullptr;
  if (coll != DeviceColl::kAllReduce && coll != DeviceColl::kReduceScatter) return nullptr;
  switch (type) {
    case ncclInt8: return device::reduceKernelOf<ncclInt8>();
    case ncclUint8: return device::reduceKernelOf<ncclUint8>();
    case ncclInt32: return device::reduceKernelOf<ncclInt32>();
    case ncclUint32: return device::reduceKernelOf<ncclUint32>();
    case ncclInt64: return device::reduceKernelOf<ncclInt64>();
    case ncclUint64: return device::reduceKernelOf<ncclUint64>();
    case ncclFloat16: return device::reduceKernelOf<ncclFloat16>();
    case ncclFloat32: return device::reduceKernelOf<ncclFloat32>();
    case ncclFloat64: return device::reduceKernelOf<ncclFloat64>();
    case ncclBfloat16: return device::reduceKernelOf<ncclBfloat16>();
    case ncclFloat8e4m3: return device::reduceKernelOf<ncclFloat8e4m3>();
    case ncclFloat8e5m2: return device::reduceKernelOf<ncclFloat8e5m2>();
    default: return nullptr;
  }
}

cudaError_t launchSymmetric(const SymmetricWork& work, int nBlocks, cudaStream_t stream) {
  if (validateSymmetricWork(work, nBlocks) != nullptr) return cudaErrorInvalidValue;
  if (work.count == 0) return cudaSuccess;
  const void* kernel = symmetricKernelFor(work.coll, work.type);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  void* args[] = {const_cast<SymmetricWork*>(&work)};
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(nBlocks)), dim3(kDeviceThreads), args, 0, stream);
}

}  // namespace plait
