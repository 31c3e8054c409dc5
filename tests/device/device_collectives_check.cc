// device_collectives_check.cc — device_compile_check's part for the
// AllGather, ReduceScatter, Broadcast and Reduce kernels
// (ring_collectives_kernel.cu).
//
// Always (host only): every kernel exists for every type; validateDeviceWork
// rejects each bad new field with the message that names it; deviceRingArgs
// builds, channel by channel, exactly the RingArgs src/core/collectives.cc
// builds on the host (split, block stride, in-place, root position); and the
// byte-counted schedules of the byte-moving kernel make the same transfers as
// the typed schedules the host runs.
//
// With a GPU only: each collective runs with every rank of a ring on the one
// GPU (one stream per rank, FIFOs in device memory), in and out of place,
// for several types, operators, rank counts and channel rings. Without a GPU
// these are skipped (device_compile_check says so). They passed on an H100
// (scripts/gpu_check.sh; perf/results/device/h100_loopback.md).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_work.h"
#include "algorithms/reduce.h"
#include "algorithms/ring_collectives.h"
#include "algorithms/types.h"
#include "device_check.h"
#include "transport/fifo.h"

namespace plait::device_check {
namespace {

constexpr DeviceColl kNewColls[] = {DeviceColl::kAllGather, DeviceColl::kReduceScatter, DeviceColl::kBroadcast,
                                    DeviceColl::kReduce};

// ---- host-only checks ----------------------------------------------------------

void checkCollectiveKernelsLinked() {
  const void* copy = collectiveKernelFor(DeviceColl::kAllGather, ncclInt8);
  CHECK(copy != nullptr);
  for (ncclDataType_t t : kAllTypes) {
    CHECK(collectiveKernelFor(DeviceColl::kAllGather, t) == copy);  // one byte kernel for every type
    CHECK(collectiveKernelFor(DeviceColl::kBroadcast, t) == copy);
    const void* red = collectiveKernelFor(DeviceColl::kReduceScatter, t);
    CHECK(red != nullptr && red != copy);
    CHECK(collectiveKernelFor(DeviceColl::kReduce, t) == red);  // one kernel per type for both
    CHECK(collectiveKernelFor(DeviceColl::kAllReduce, t) == allReduceKernelFor(t));
  }
  CHECK(collectiveKernelFor(DeviceColl::kReduceScatter, ncclFloat32) !=
        collectiveKernelFor(DeviceColl::kReduceScatter, ncclInt32));
  const auto badType = static_cast<ncclDataType_t>(ncclNumTypes);
  for (DeviceColl c : kNewColls) CHECK(collectiveKernelFor(c, badType) == nullptr);
  CHECK(collectiveKernelFor(static_cast<DeviceColl>(kNumDeviceColls), ncclFloat32) == nullptr);
}

// A valid `coll` for rank 1 of 4 (root 2) on three channels whose rings are
// rotated per channel; slices of 16 floats, FIFOs of 4 steps (chunks up to 32).
DeviceWork validCollWork(DeviceColl coll) {
  static char buf[4096];
  static char fifo[kFifoControlBytes + 4 * 64];
  DeviceWork w;
  w.coll = coll;
  w.sendbuff = buf;
  w.recvbuff = buf + 2048;
  w.count = 100;  // channel parts of 48, 48 and 4 elements on 3 channels
  w.blockStride = 100;
  w.type = ncclFloat32;
  w.elemSize = 4;
  w.nranks = 4;
  w.rank = 1;
  w.root = 2;
  w.alignElems = 16;
  w.chunkElems = 32;
  w.sliceBytes = 64;
  for (int c = 0; c < kMaxDeviceChannels; ++c) {
    DeviceChannel& ch = w.channels[c];
    ch.recv = DeviceFifo{fifo, 4, 64};
    ch.send = DeviceFifo{fifo, 4, 64};
    for (int p = 0; p < 4; ++p) ch.ring[p] = static_cast<uint8_t>((p + c) % 4);
    ch.position = ((1 - c) % 4 + 4) % 4;  // ring[position] == rank
  }
  return w;
}

// validateDeviceWork(w, nChannels) accepts (want null) or rejects with a
// message containing `want`.
void expectWhy(const DeviceWork& w, int nChannels, const char* want, int line) {
  const char* why = validateDeviceWork(w, nChannels);
  const bool ok = want == nullptr ? why == nullptr : why != nullptr && std::strstr(why, want) != nullptr;
  if (!ok) {
    std::fprintf(stderr, "%s:%d: validateDeviceWork(%s): got \"%s\", want \"%s\"\n", __FILE__, line,
                 deviceCollName(w.coll), why ? why : "(accepted)", want ? want : "(accepted)");
    ++gFailures;
  }
}
#define EXPECT_WHY(w, n, want) expectWhy((w), (n), (want), __LINE__)

void checkCollectiveValidationScalars() {
  for (DeviceColl c : kNewColls) {
    EXPECT_WHY(validCollWork(c), 3, nullptr);
    DeviceWork w = validCollWork(c);
    w.nranks = kMaxDeviceRanks + 1;
    EXPECT_WHY(w, 3, "kMaxDeviceRanks");
    w = validCollWork(c);
    w.rank = 4;
    EXPECT_WHY(w, 3, "rank out of range");
    w.rank = -1;
    EXPECT_WHY(w, 3, "rank out of range");
    w = validCollWork(c);
    w.count = 0;  // nothing moves, but the scalars still hold
    w.sendbuff = nullptr;
    w.recvbuff = nullptr;
    EXPECT_WHY(w, 3, nullptr);
    w = validCollWork(c);
    w.nranks = 1;  // a local copy: no ring, no FIFO
    w.rank = 0;
    w.root = 0;
    w.channels[0].recv = DeviceFifo{};
    w.channels[0].ring[0] = 7;
    EXPECT_WHY(w, 3, nullptr);
  }
  DeviceWork w = validCollWork(DeviceColl::kAllGather);
  w.coll = static_cast<DeviceColl>(kNumDeviceColls);
  EXPECT_WHY(w, 3, "invalid collective");
  w = validCollWork(DeviceColl::kAllReduce);  // needs no ring order: any rank count
  w.nranks = kMaxDeviceRanks + 1;
  EXPECT_WHY(w, 3, nullptr);
  w = validCollWork(DeviceColl::kBroadcast);
  w.root = 4;
  EXPECT_WHY(w, 3, "root out of range");
  w.coll = DeviceColl::kAllGather;  // has no root
  EXPECT_WHY(w, 3, nullptr);
  w = validCollWork(DeviceColl::kAllGather);
  w.blockStride = 99;
  EXPECT_WHY(w, 3, "blockStride");
  w.coll = DeviceColl::kReduceScatter;
  EXPECT_WHY(w, 3, "blockStride");
  w.coll = DeviceColl::kReduce;  // has no blocks
  EXPECT_WHY(w, 3, nullptr);
}

void checkCollectiveValidationBuffers() {
  DeviceWork w = validCollWork(DeviceColl::kBroadcast);
  w.sendbuff = nullptr;  // rank 1 is not the root: its input is never read
  EXPECT_WHY(w, 3, nullptr);
  w.root = 1;
  EXPECT_WHY(w, 3, "null sendbuff");
  w = validCollWork(DeviceColl::kBroadcast);
  w.recvbuff = nullptr;
  EXPECT_WHY(w, 3, "null recvbuff");
  w = validCollWork(DeviceColl::kReduce);
  w.recvbuff = nullptr;  // not the root: its output is never written
  EXPECT_WHY(w, 3, nullptr);
  w.root = 1;
  EXPECT_WHY(w, 3, "null recvbuff");
  w = validCollWork(DeviceColl::kReduce);
  w.sendbuff = nullptr;
  EXPECT_WHY(w, 3, "null sendbuff");
  w = validCollWork(DeviceColl::kAllGather);
  w.recvbuff = nullptr;
  EXPECT_WHY(w, 3, "null recvbuff");
  w = validCollWork(DeviceColl::kReduceScatter);
  w.sendbuff = nullptr;
  EXPECT_WHY(w, 3, "null sendbuff");
}

void checkCollectiveValidationRings() {
  for (DeviceColl c : kNewColls) {
    DeviceWork w = validCollWork(c);
    w.channels[1].ring[2] = 4;
    EXPECT_WHY(w, 3, "rank out of range");
    w = validCollWork(c);
    w.channels[2].ring[0] = w.channels[2].ring[3];
    EXPECT_WHY(w, 3, "twice");
    w = validCollWork(c);
    DeviceChannel& ch = w.channels[1];
    std::swap(ch.ring[ch.position], ch.ring[(ch.position + 1) % 4]);  // still a permutation
    EXPECT_WHY(w, 3, "does not put this rank at its position");
    w = validCollWork(c);
    w.channels[1].position = 4;
    EXPECT_WHY(w, 3, "position is out of range");
    w = validCollWork(c);
    w.count = 16;  // only channel 0 of 3 has work: the others are not looked at
    w.blockStride = 16;
    w.channels[2].ring[0] = 9;
    w.channels[1].send.memory = nullptr;
    EXPECT_WHY(w, 3, nullptr);
  }
  DeviceWork w = validCollWork(DeviceColl::kAllReduce);  // AllReduce ignores rank and ring
  w.channels[1].ring[2] = 4;
  w.rank = 3;
  EXPECT_WHY(w, 3, nullptr);
}

void checkCollectiveValidationChunks() {
  for (DeviceColl c : kNewColls) {
    const bool ring = c == DeviceColl::kAllGather || c == DeviceColl::kReduceScatter;
    DeviceWork w = validCollWork(c);
    w.chunkElems = 33;  // more than half of a 4-step FIFO of 16-float slices
    EXPECT_WHY(w, 3, ring ? "half a channel's FIFO" : nullptr);
    w = validCollWork(c);
    w.channels[1].send.nSteps = 2;  // half is now one slice
    EXPECT_WHY(w, 3, ring ? "half a channel's FIFO" : nullptr);
    w.chunkElems = 16;
    EXPECT_WHY(w, 3, nullptr);
    w = validCollWork(c);
    w.chunkElems = 0;
    EXPECT_WHY(w, 3, "chunkElems is 0");
    w = validCollWork(c);
    w.sliceBytes = 128;
    EXPECT_WHY(w, 3, "exceeds a channel's FIFO stepBytes");
  }
  // The launchers refuse before any CUDA call, so this holds without a driver.
  DeviceWork w = validCollWork(DeviceColl::kAllGather);
  CHECK(launchAllReduce(w, 3, nullptr) == cudaErrorInvalidValue);  // not an AllReduce
  w.rank = 9;
  CHECK(launchCollective(w, 3, nullptr) == cudaErrorInvalidValue);
  w = validCollWork(DeviceColl::kReduce);
  CHECK(launchCollective(w, 0, nullptr) == cudaErrorInvalidValue);
}

// The RingArgs of src/core/collectives.cc's runRingCollectiveChannel, copied
// from it with the communicator's state as arguments (rank_, rings_[c],
// ringPositions_[c]; the chunk its ringChunkElems chose): the reference the
// device's deviceRingArgs must reproduce.
struct HostCall {
  DeviceColl coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count, elem, chunkElems;
  int nChannels, nranks, rank, root;
};
bool hostRingArgs(const HostCall& t, int channel, const std::vector<int>& ring, int position, RingArgs* out) {
  const size_t elem = t.elem;
  const size_t align = std::max<size_t>(1, 64 / elem);
  size_t begin = 0, end = 0;
  channelPart(t.count, t.nChannels, channel, align, &begin, &end);
  if (begin == end) return false;
  RingArgs a;
  a.count = end - begin;
  a.blockStride = t.count;
  a.elemSize = elem;
  a.nranks = t.nranks;
  a.position = position;
  a.ring = ring.data();
  a.rootPosition = static_cast<int>(std::find(ring.begin(), ring.end(), t.root) - ring.begin());
  a.chunkElems = t.chunkElems;
  const char* in = static_cast<const char*>(t.sendbuff);
  char* out2 = static_cast<char*>(t.recvbuff);
  if (in == nullptr) in = out2;
  if (out2 == nullptr) out2 = const_cast<char*>(in);
  a.input = in + begin * elem;
  a.output = out2 + begin * elem;
  if (t.coll == DeviceColl::kAllGather)
    a.inPlace = t.sendbuff == static_cast<char*>(t.recvbuff) + static_cast<size_t>(t.rank) * t.count * elem;
  if (t.coll == DeviceColl::kBroadcast) a.inPlace = t.sendbuff == t.recvbuff;
  *out = a;
  return true;
}

bool sameArgs(const RingArgs& x, const RingArgs& y) {
  return x.input == y.input && x.output == y.output && x.count == y.count && x.blockStride == y.blockStride &&
         x.elemSize == y.elemSize && x.nranks == y.nranks && x.position == y.position && x.ring == y.ring &&
         x.rootPosition == y.rootPosition && x.chunkElems == y.chunkElems && x.inPlace == y.inPlace;
}

// Primitives that only record what each verb was asked to move, in bytes.
struct RecordingPrims {
  struct Op {
    int verb;
    const void *src, *dst;
    size_t bytes;
    bool operator==(const Op&) const = default;
  };
  size_t elemSize = 1;
  std::vector<Op> log;
  bool add(int verb, const void* s, const void* d, size_t n) {
    log.push_back({verb, s, d, n * elemSize});
    return true;
  }
  bool send(const void* src, size_t n) { return add(0, src, nullptr, n); }
  bool recv(void* dst, size_t n) { return add(1, nullptr, dst, n); }
  bool recvReduceSend(const void* src, size_t n) { return add(2, src, nullptr, n); }
  bool recvReduceCopySend(const void* src, void* dst, size_t n, bool) { return add(3, src, dst, n); }
  bool recvReduceCopy(const void* src, void* dst, size_t n, bool) { return add(4, src, dst, n); }
  bool recvCopySend(void* dst, size_t n) { return add(5, nullptr, dst, n); }
  bool copySend(const void* src, void* dst, size_t n) { return add(6, src, dst, n); }
};

// The typed schedule (what the host runs) and the byte-counted one (what the
// byte-moving kernel runs) make the same transfers.
void checkBytesLikeTyped(DeviceColl coll, const RingArgs& typed) {
  RecordingPrims t, b;
  t.elemSize = typed.elemSize;
  const RingArgs bytes = ringArgsInBytes(typed);
  if (coll == DeviceColl::kAllGather) {
    ringAllGather(t, typed);
    ringAllGather(b, bytes);
  } else {
    ringBroadcast(t, typed);
    ringBroadcast(b, bytes);
  }
  CHECK(!t.log.empty() && t.log == b.log);
}

// One call, every channel: device args == host args; the parts tile the block.
void checkSplitOf(const HostCall& t) {
  DeviceWork w;
  w.coll = t.coll;
  w.sendbuff = t.sendbuff;
  w.recvbuff = t.recvbuff;
  w.count = t.count;
  w.blockStride = t.count;
  w.elemSize = t.elem;
  w.nranks = t.nranks;
  w.rank = t.rank;
  w.root = t.root;
  w.alignElems = std::max<size_t>(1, 64 / t.elem);  // what a device executor must pass
  w.chunkElems = t.chunkElems;
  size_t covered = 0;
  for (int c = 0; c < t.nChannels; ++c) {
    std::vector<int> ring(static_cast<size_t>(t.nranks));
    for (int p = 0; p < t.nranks; ++p) ring[p] = (p + c) % t.nranks;
    const int position = ((t.rank - c) % t.nranks + t.nranks) % t.nranks;
    w.channels[c].position = position;
    RingArgs host, dev;
    const bool hostActive = hostRingArgs(t, c, ring, position, &host);
    const bool devActive = deviceRingArgs(w, t.nChannels, c, ring.data(), &dev);
    CHECK(hostActive == devActive);
    if (!hostActive || !devActive) continue;
    CHECK(sameArgs(host, dev));
    covered += dev.count;
    if (t.coll == DeviceColl::kAllGather || t.coll == DeviceColl::kBroadcast) checkBytesLikeTyped(t.coll, dev);
  }
  CHECK(covered == t.count);
}

void checkSplitMatchesHost() {
  // Buffers are never touched: any distinct, far apart addresses do.
  char* const fakeA = reinterpret_cast<char*>(uintptr_t(1) << 32);
  char* const fakeB = reinterpret_cast<char*>(uintptr_t(1) << 44);
  for (DeviceColl coll : kNewColls) {
    for (size_t elem : {size_t(1), size_t(2), size_t(4), size_t(8)}) {
      for (size_t count : {size_t(1), size_t(63), size_t(1000), size_t(1000003)}) {
        for (int nChannels : {1, 3, 32}) {
          for (int nranks : {2, 3, 5}) {
            for (int variant = 0; variant < 3; ++variant) {  // out of place, in place, a null buffer
              HostCall t{coll, fakeA, fakeB, count, elem, 1024 / elem, nChannels, nranks, nranks - 1, /*root=*/0};
              if (variant == 1 && coll == DeviceColl::kAllGather)
                t.sendbuff = fakeB + static_cast<size_t>(t.rank) * count * elem;
              if (variant == 1 && coll == DeviceColl::kReduceScatter)
                t.recvbuff = fakeA + static_cast<size_t>(t.rank) * count * elem;
              if (variant == 1 && (coll == DeviceColl::kBroadcast || coll == DeviceColl::kReduce))
                t.sendbuff = fakeB;
              if (variant == 2 && coll == DeviceColl::kBroadcast) t.sendbuff = nullptr;  // rank != root
              if (variant == 2 && coll == DeviceColl::kReduce) t.recvbuff = nullptr;
              checkSplitOf(t);
            }
          }
        }
      }
    }
  }
}


// ---- GPU checks ----------------------------------------------------------------

void checkCollectiveKernelAttributes() {
  for (ncclDataType_t t : kAllTypes) {
    for (DeviceColl c : {DeviceColl::kAllGather, DeviceColl::kReduceScatter}) {
      if (c == DeviceColl::kAllGather && t != ncclInt8) continue;  // one kernel for every type
      cudaFuncAttributes attr{};
      CHECK_CUDA(cudaFuncGetAttributes(&attr, collectiveKernelFor(c, t)));
      CHECK(attr.maxThreadsPerBlock >= kDeviceThreads);
      std::printf("%s kernel<%s>: %d registers, %zu B local, %zu B shared\n",
                  c == DeviceColl::kAllGather ? "copy (AllGather, Broadcast)" : "reduce (ReduceScatter, Reduce)",
                  c == DeviceColl::kAllGather ? "bytes" : typeName(t), attr.numRegs, attr.localSizeBytes,
                  attr.sharedSizeBytes);
    }
  }
}

struct CollCase {
  DeviceColl coll = DeviceColl::kAllGather;
  int nranks = 2;
  int nChannels = 2;
  size_t count = 0;
  int root = 0;
  bool inPlace = false;
  bool mixedRings = false;  // odd channels run their ring the other way round
  size_t sliceBytes = 32 << 10;
  size_t chunkBytes = 128 << 10;  // half of the 8-step FIFOs
};

// The rank at position p of channel c's ring.
int ringRank(const CollCase& cc, int c, int p) {
  const int n = cc.nranks;
  return cc.mixedRings && c % 2 == 1 ? (n - 1 - p + c) % n : (p + c) % n;
}

size_t sendElems(const CollCase& cc) {
  return cc.coll == DeviceColl::kReduceScatter ? cc.count * static_cast<size_t>(cc.nranks) : cc.count;
}
size_t recvElems(const CollCase& cc) {
  return cc.coll == DeviceColl::kAllGather ? cc.count * static_cast<size_t>(cc.nranks) : cc.count;
}

// Where rank r's buffers lie in its one allocation of sendElems + recvElems
// elements (offsets in elements; -1: null, as NCCL lets a non-root pass).
void bufferOffsets(const CollCase& cc, int r, long* send, long* recv) {
  const long count = static_cast<long>(cc.count);
  const bool root = r == cc.root;
  *send = 0;
  *recv = static_cast<long>(sendElems(cc));
  if (cc.inPlace) {
    if (cc.coll == DeviceColl::kAllGather) {
      *recv = 0;
      *send = r * count;  // its own block of the output
    }
    if (cc.coll == DeviceColl::kReduceScatter) *recv = r * count;
    if (cc.coll == DeviceColl::kBroadcast || cc.coll == DeviceColl::kReduce) *recv = 0;
  } else {
    if (cc.coll == DeviceColl::kBroadcast && !root) *send = -1;
    if (cc.coll == DeviceColl::kReduce && !root) *recv = -1;
  }
}

// Rank r's DeviceWork, its FIFOs (fifos[rank][channel]) and ring order.
DeviceWork collWork(const CollCase& cc, int r, ncclDataType_t type, int ncclOp, const void* send, void* recv,
                    const std::vector<char*>& fifos, const FifoShape& shape) {
  const int n = cc.nranks;
  DeviceWork w;
  w.coll = cc.coll;
  w.sendbuff = send;
  w.recvbuff = recv;
  w.count = cc.count;
  w.blockStride = cc.count;
  w.type = type;
  w.elemSize = typeSize(type);
  CHECK(makeRedOp(type, ncclOp, n, &w.op));
  w.nranks = n;
  w.rank = r;
  w.root = cc.root;
  w.alignElems = std::max<size_t>(1, 64 / w.elemSize);
  w.chunkElems = std::max<size_t>(1, cc.chunkBytes / w.elemSize / w.alignElems * w.alignElems);
  w.sliceBytes = cc.sliceBytes / w.elemSize * w.elemSize;
  for (int c = 0; c < cc.nChannels; ++c) {
    DeviceChannel& ch = w.channels[c];
    for (int p = 0; p < n; ++p) {
      ch.ring[p] = static_cast<uint8_t>(ringRank(cc, c, p));
      if (ringRank(cc, c, p) == r) ch.position = p;
    }
    const int next = ringRank(cc, c, (ch.position + 1) % n);
    ch.recv = DeviceFifo{fifos[static_cast<size_t>(r) * cc.nChannels + c], shape.nSteps, shape.stepBytes};
    ch.send = DeviceFifo{fifos[static_cast<size_t>(next) * cc.nChannels + c], shape.nSteps, shape.stepBytes};
  }
  return w;
}

// Runs cc with every rank on this GPU; sends[r] is rank r's input, expects[r]
// its expected output (empty: not looked at).
template <class T>
void runCollLoopback(const char* name, const CollCase& cc, int ncclOp, const std::vector<std::vector<T>>& sends,
                     const std::vector<std::vector<T>>& expects) {
  const int n = cc.nranks, nc = cc.nChannels;
  const FifoShape shape{8, cc.sliceBytes};
  std::vector<DeviceBuffer<T>*> mem(n);
  std::vector<DeviceBuffer<char>*> fifoMem(static_cast<size_t>(n) * nc);
  std::vector<char*> fifos(fifoMem.size());
  DeviceBuffer<uint32_t> status(static_cast<size_t>(n) * nc);
  std::vector<cudaStream_t> streams(n);
  int device = 0;
  uint64_t cycles = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(deviceCyclesForMs(device, 20000, &cycles));
  CHECK_CUDA(cudaMemset(status.ptr, 0, fifos.size() * sizeof(uint32_t)));
  for (size_t i = 0; i < fifos.size(); ++i) {
    fifoMem[i] = new DeviceBuffer<char>(shape.totalBytes());
    fifos[i] = fifoMem[i]->ptr;
    CHECK_CUDA(cudaMemset(fifos[i], 0, shape.totalBytes()));
  }
  const size_t total = sendElems(cc) + recvElems(cc);
  std::vector<T*> recvPtr(n);
  for (int r = 0; r < n; ++r) {
    mem[r] = new DeviceBuffer<T>(total);
    CHECK_CUDA(cudaMemset(mem[r]->ptr, 0xA5, total * sizeof(T)));  // what was never written shows
    long so = 0, ro = 0;
    bufferOffsets(cc, r, &so, &ro);
    T* send = so < 0 ? nullptr : mem[r]->ptr + so;
    recvPtr[r] = ro < 0 ? nullptr : mem[r]->ptr + ro;
    if (send != nullptr)
      CHECK_CUDA(cudaMemcpy(send, sends[r].data(), sendElems(cc) * sizeof(T), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    DeviceWork w = collWork(cc, r, DataTypeOf<T>::value, ncclOp, send, recvPtr[r], fifos, shape);
    w.timeoutCycles = cycles;
    w.channelStatus = status.ptr + static_cast<size_t>(r) * nc;
    if (const char* why = validateDeviceWork(w, nc)) std::fprintf(stderr, "%s: %s\n", name, why);
    CHECK_CUDA(launchCollective(w, nc, streams[r]));
  }
  for (int r = 0; r < n; ++r) CHECK_CUDA(cudaStreamSynchronize(streams[r]));
  std::vector<uint32_t> st(fifos.size());
  CHECK_CUDA(cudaMemcpy(st.data(), status.ptr, st.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  for (uint32_t s : st) CHECK(s == 0);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    if (expects[r].empty() || recvPtr[r] == nullptr) continue;
    std::vector<T> out(recvElems(cc));
    CHECK_CUDA(cudaMemcpy(out.data(), recvPtr[r], out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < out.size(); ++i) wrong += std::memcmp(&out[i], &expects[r][i], sizeof(T)) != 0;
  }
  std::printf("loopback %-13s %-10s nranks=%d channels=%d count=%zu root=%d %s%s: %zu wrong\n",
              deviceCollName(cc.coll), name, n, nc, cc.count, cc.root, cc.inPlace ? "in-place" : "out-of-place",
              cc.mixedRings ? " mixed rings" : "", wrong);
  CHECK(wrong == 0);
  for (int r = 0; r < n; ++r) {
    delete mem[r];
    cudaStreamDestroy(streams[r]);
  }
  for (auto* f : fifoMem) delete f;
}

// Rank r's element i: small integers, exact in every type and any sum order.
template <class T>
T valueOf(int r, size_t i) {
  const int v = static_cast<int>((i * 7 + static_cast<size_t>(r) * 13) % 61) - 30;
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(v);
  } else {
    return T::fromFloat(static_cast<float>(v));
  }
}

// Inputs from valueOf, expected outputs from `combine` (the operator over
// the ranks' values, in rank order) per NCCL's definition of cc.coll.
template <class T, class Combine>
void checkColl(const char* name, const CollCase& cc, int ncclOp, Combine combine) {
  const int n = cc.nranks;
  const size_t count = cc.count;
  std::vector<std::vector<T>> sends(n, std::vector<T>(sendElems(cc))), expects(n);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < sends[r].size(); ++i) sends[r][i] = valueOf<T>(r, i);
  auto reduced = [&](size_t offset) {  // the operator over every rank's element `offset`
    std::vector<T> all(n);
    std::vector<T> out(count);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n; ++r) all[r] = sends[r][offset + i];
      out[i] = combine(all);
    }
    return out;
  };
  for (int r = 0; r < n; ++r) {
    switch (cc.coll) {
      case DeviceColl::kAllGather:
        for (int b = 0; b < n; ++b) expects[r].insert(expects[r].end(), sends[b].begin(), sends[b].end());
        break;
      case DeviceColl::kReduceScatter: expects[r] = reduced(static_cast<size_t>(r) * count); break;
      case DeviceColl::kBroadcast: expects[r] = sends[cc.root]; break;
      case DeviceColl::kReduce:
        if (r == cc.root) expects[r] = reduced(0);
        else if (cc.inPlace) expects[r] = sends[r];  // untouched
        break;
      default: break;
    }
  }
  runCollLoopback<T>(name, cc, ncclOp, sends, expects);
}

template <class T>
T sumOf(const std::vector<T>& v) {
  T s = 0;
  for (T x : v) s += x;
  return s;
}

void checkCollTypes(const CollCase& cc) {
  if (!countAllowed(cc.count)) return;
  auto none = [](const std::vector<int8_t>&) { return int8_t(0); };
  if (cc.coll == DeviceColl::kAllGather || cc.coll == DeviceColl::kBroadcast) {
    checkColl<int8_t>("int8", cc, ncclSum, none);
    checkColl<Half>("half", cc, ncclSum, [](const std::vector<Half>&) { return Half{}; });
    checkColl<double>("double", cc, ncclSum, [](const std::vector<double>&) { return 0.0; });
    return;
  }
  checkColl<float>("float sum", cc, ncclSum, sumOf<float>);
  checkColl<int32_t>("int32 avg", cc, ncclAvg, [&](const std::vector<int32_t>& v) {
    return static_cast<int32_t>(sumOf(v) / static_cast<int32_t>(v.size()));
  });
  checkColl<BFloat16>("bf16 max", cc, ncclMax, [](const std::vector<BFloat16>& v) {
    float m = v[0].toFloat();
    for (const BFloat16& x : v) m = x.toFloat() > m ? x.toFloat() : m;
    return BFloat16::fromFloat(m);
  });
}

}  // namespace

void runCollectiveHostChecks() {
  checkCollectiveKernelsLinked();
  checkCollectiveValidationScalars();
  checkCollectiveValidationBuffers();
  checkCollectiveValidationRings();
  checkCollectiveValidationChunks();
  checkSplitMatchesHost();
}

void runCollectiveGpuChecks() {
  checkCollectiveKernelAttributes();
  for (DeviceColl coll : kNewColls) {
    for (int nranks : {1, 2, 3, 4}) {
      for (size_t count : {size_t(1), size_t(1000), (size_t(1) << 18) + 12345}) {
        for (bool inPlace : {false, true}) {
          CollCase cc;
          cc.coll = coll;
          cc.nranks = nranks;
          cc.count = count;
          cc.root = static_cast<int>(count % static_cast<size_t>(nranks));
          cc.inPlace = inPlace;
          checkCollTypes(cc);
        }
      }
    }
    CollCase cc;  // many channels, rings both ways round, many tiny steps
    cc.coll = coll;
    cc.nranks = 4;
    cc.nChannels = 5;
    cc.count = 5000;
    cc.root = 3;
    cc.mixedRings = true;
    cc.sliceBytes = 64;
    cc.chunkBytes = 256;
    checkCollTypes(cc);
  }
}

}  // namespace plait::device_check
