// device_compile_check — proves the device instantiations compiled and
// linked (every type's AllReduce kernel exists), checks the launcher's
// argument validation, and, only where a GPU is present, reads each kernel's
// attributes and runs ring AllReduces with every rank of the ring on the one
// GPU (one stream per rank, FIFOs in device memory), plus a time-out and an
// abort. device_collectives_check.cc does the same for AllGather,
// ReduceScatter, Broadcast and Reduce. Without a GPU (or a driver) it prints
// "no GPU: compiled only" and passes.
//
// A plain host program (g++), linked with plait_device and the CUDA runtime.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_work.h"
#include "algorithms/reduce.h"
#include "algorithms/types.h"
#include "device_check.h"
#include "transport/fifo.h"

namespace {

using namespace plait;
using namespace plait::device_check;

// ---- host-only checks ----------------------------------------------------------

void checkKernelsLinked() {
  for (ncclDataType_t t : kAllTypes) CHECK(allReduceKernelFor(t) != nullptr);
  CHECK(allReduceKernelFor(static_cast<ncclDataType_t>(ncclNumTypes)) == nullptr);
}

DeviceWork validWork() {
  static char buf[1024];
  static char fifo[kFifoControlBytes + 64];
  DeviceWork w;
  w.sendbuff = buf;
  w.recvbuff = buf;
  w.count = 16;
  w.type = ncclFloat32;
  w.elemSize = 4;
  w.nranks = 2;
  w.alignElems = 16;
  w.chunkElems = 16;
  w.sliceBytes = 64;
  for (DeviceChannel& c : w.channels) {
    c.recv = DeviceFifo{fifo, 1, 64};
    c.send = DeviceFifo{fifo, 1, 64};
    c.position = 1;
  }
  return w;
}

void checkValidation() {
  CHECK(validateDeviceWork(validWork(), 1) == nullptr);
  CHECK(validateDeviceWork(validWork(), 0) != nullptr);
  CHECK(validateDeviceWork(validWork(), kMaxDeviceChannels + 1) != nullptr);
  DeviceWork w = validWork();
  w.elemSize = 2;
  CHECK(validateDeviceWork(w, 1) != nullptr);
  w = validWork();
  w.channels[0].position = 2;
  CHECK(validateDeviceWork(w, 1) != nullptr);
  w = validWork();
  w.sliceBytes = 128;  // larger than the FIFO's steps
  CHECK(validateDeviceWork(w, 1) != nullptr);
  w = validWork();
  w.sliceBytes = 6;  // not a multiple of the element
  CHECK(validateDeviceWork(w, 1) != nullptr);
  w = validWork();
  w.channels[0].send.memory = nullptr;
  CHECK(validateDeviceWork(w, 1) != nullptr);
  w.count = 0;  // nothing to move: nothing to check
  CHECK(validateDeviceWork(w, 1) == nullptr);
  w = validWork();
  w.nranks = 1;  // no FIFO needed, no position checked
  w.channels[0].recv = DeviceFifo{};
  CHECK(validateDeviceWork(w, 1) == nullptr);
  // Rejected before any CUDA call, so this holds without a driver too.
  w = validWork();
  w.type = static_cast<ncclDataType_t>(ncclNumTypes);
  CHECK(launchAllReduce(w, 1, nullptr) == cudaErrorInvalidValue);
}

void checkChannelParts() {
  for (size_t count : {size_t(0), size_t(1), size_t(63), size_t(1000003)}) {
    for (int nChannels : {1, 3, 32}) {
      size_t expectBegin = 0;
      for (int c = 0; c < nChannels; ++c) {
        size_t b = 0, e = 0;
        channelPart(count, nChannels, c, 16, &b, &e);
        CHECK(b == expectBegin);
        CHECK(b <= e && e <= count);
        CHECK(e == count || (e - b) % 16 == 0);
        expectBegin = e;
      }
      CHECK(expectBegin == count);
    }
  }
}

// ---- GPU checks ----------------------------------------------------------------

void checkKernelAttributes() {
  for (ncclDataType_t t : kAllTypes) {
    cudaFuncAttributes attr{};
    CHECK_CUDA(cudaFuncGetAttributes(&attr, allReduceKernelFor(t)));
    CHECK(attr.maxThreadsPerBlock >= kDeviceThreads);
    std::printf("allReduceKernel<%s>: %d registers, %zu B local, %zu B shared, %d max threads\n", typeName(t),
                attr.numRegs, attr.localSizeBytes, attr.sharedSizeBytes, attr.maxThreadsPerBlock);
  }
}

struct LoopbackOptions {
  int nranks = 2;
  int nChannels = 2;
  size_t count = 0;
  size_t offsetElems = 0;  // misalign the user buffers by this many elements
  bool inPlace = false;
  size_t sliceBytes = 32 << 10;
  size_t chunkBytes = 128 << 10;
};

// All ranks of a ring on this GPU: rank r's channel c receives in fifos[r][c]
// and sends into fifos[(r+1) % n][c]; its position in channel c's ring is
// (r + c) % n (rings rotated per channel, as the communicator does).
// inputs[r] has opts.count elements; expected is the result every rank must
// hold.
template <class T>
void runLoopback(const char* name, int ncclOp, const LoopbackOptions& opts, const std::vector<std::vector<T>>& inputs,
                 const std::vector<T>& expected) {
  if (!countAllowed(opts.count)) return;
  const int n = opts.nranks;
  const ncclDataType_t type = DataTypeOf<T>::value;
  const size_t elem = sizeof(T);
  const FifoShape shape{8, opts.sliceBytes};
  const size_t align = 64 / elem > 0 ? 64 / elem : 1;

  std::vector<DeviceBuffer<T>*> send(n), recv(n);
  std::vector<DeviceBuffer<char>*> fifos(static_cast<size_t>(n) * opts.nChannels);
  DeviceBuffer<uint32_t> status(static_cast<size_t>(n) * opts.nChannels);
  std::vector<cudaStream_t> streams(n);
  int device = 0;
  uint64_t cycles = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(deviceCyclesForMs(device, 20000, &cycles));
  CHECK_CUDA(cudaMemset(status.ptr, 0, static_cast<size_t>(n) * opts.nChannels * sizeof(uint32_t)));
  for (auto& f : fifos) {
    f = new DeviceBuffer<char>(shape.totalBytes());
    CHECK_CUDA(cudaMemset(f->ptr, 0, shape.totalBytes()));
  }
  for (int r = 0; r < n; ++r) {
    send[r] = new DeviceBuffer<T>(opts.count + opts.offsetElems);
    recv[r] = opts.inPlace ? nullptr : new DeviceBuffer<T>(opts.count + opts.offsetElems);
    CHECK_CUDA(cudaMemcpy(send[r]->ptr + opts.offsetElems, inputs[r].data(), opts.count * elem, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  for (int r = 0; r < n; ++r) {
    DeviceWork w;
    w.sendbuff = send[r]->ptr + opts.offsetElems;
    w.recvbuff = opts.inPlace ? send[r]->ptr + opts.offsetElems : recv[r]->ptr + opts.offsetElems;
    w.count = opts.count;
    w.type = type;
    w.elemSize = elem;
    CHECK(makeRedOp(type, ncclOp, n, &w.op));
    w.nranks = n;
    w.alignElems = align;
    w.chunkElems = opts.chunkBytes / elem / align * align;
    w.sliceBytes = opts.sliceBytes / elem * elem;
    w.timeoutCycles = cycles;
    w.channelStatus = status.ptr + static_cast<size_t>(r) * opts.nChannels;
    for (int c = 0; c < opts.nChannels; ++c) {
      w.channels[c].recv = DeviceFifo{fifos[static_cast<size_t>(r) * opts.nChannels + c]->ptr, shape.nSteps, shape.stepBytes};
      w.channels[c].send =
          DeviceFifo{fifos[static_cast<size_t>((r + 1) % n) * opts.nChannels + c]->ptr, shape.nSteps, shape.stepBytes};
      w.channels[c].position = (r + c) % n;
    }
    CHECK_CUDA(launchAllReduce(w, opts.nChannels, streams[r]));
  }
  for (int r = 0; r < n; ++r) CHECK_CUDA(cudaStreamSynchronize(streams[r]));
  std::vector<uint32_t> st(static_cast<size_t>(n) * opts.nChannels);
  CHECK_CUDA(cudaMemcpy(st.data(), status.ptr, st.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  for (uint32_t s : st) CHECK(s == 0);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    std::vector<T> out(opts.count);
    const T* src = (opts.inPlace ? send[r]->ptr : recv[r]->ptr) + opts.offsetElems;
    CHECK_CUDA(cudaMemcpy(out.data(), src, opts.count * elem, cudaMemcpyDeviceToHost));
    if (opts.count > 0 && std::memcmp(out.data(), expected.data(), opts.count * elem) != 0) {
      for (size_t i = 0; i < opts.count; ++i) wrong += std::memcmp(&out[i], &expected[i], elem) != 0;
    }
  }
  std::printf("loopback %-10s nranks=%d channels=%d count=%zu offset=%zu %s: %zu wrong\n", name, n, opts.nChannels,
              opts.count, opts.offsetElems, opts.inPlace ? "in-place" : "out-of-place", wrong);
  CHECK(wrong == 0);
  for (int r = 0; r < n; ++r) {
    delete send[r];
    delete recv[r];
    cudaStreamDestroy(streams[r]);
  }
  for (auto* f : fifos) delete f;
}

void checkLoopbackFloatSum(const LoopbackOptions& opts) {
  std::vector<std::vector<float>> in(opts.nranks, std::vector<float>(opts.count));
  std::vector<float> expect(opts.count);
  for (size_t i = 0; i < opts.count; ++i) {
    float sum = 0;
    for (int r = 0; r < opts.nranks; ++r) {
      in[r][i] = static_cast<float>((r + 1) * (static_cast<int>(i % 17) - 8));  // exact in any order
      sum += in[r][i];
    }
    expect[i] = sum;
  }
  runLoopback<float>("float sum", ncclSum, opts, in, expect);
}

void checkLoopbackInt32Avg(const LoopbackOptions& opts) {  // SumPostDiv
  std::vector<std::vector<int32_t>> in(opts.nranks, std::vector<int32_t>(opts.count));
  std::vector<int32_t> expect(opts.count);
  for (size_t i = 0; i < opts.count; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < opts.nranks; ++r) {
      in[r][i] = static_cast<int32_t>(r * 1000 + static_cast<int>(i % 1001) - 500);
      sum += in[r][i];
    }
    expect[i] = static_cast<int32_t>(sum / opts.nranks);
  }
  runLoopback<int32_t>("int32 avg", ncclAvg, opts, in, expect);
}

void checkLoopbackBf16Max(const LoopbackOptions& opts) {
  std::vector<std::vector<BFloat16>> in(opts.nranks, std::vector<BFloat16>(opts.count));
  std::vector<BFloat16> expect(opts.count);
  for (size_t i = 0; i < opts.count; ++i) {
    float best = -1e30f;
    for (int r = 0; r < opts.nranks; ++r) {
      const float v = static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13) % 101) - 50);
      in[r][i] = BFloat16::fromFloat(v);
      best = v > best ? v : best;
    }
    expect[i] = BFloat16::fromFloat(best);
  }
  runLoopback<BFloat16>("bf16 max", ncclMax, opts, in, expect);
}

void checkLoopbackHalfAvg(const LoopbackOptions& opts) {  // PreMulSum(1/n), scaled on each rank
  // Only where 1/n is exact in half: otherwise the expected bits depend on
  // where the ring rounds its partial sums, which this test does not model.
  if ((opts.nranks & (opts.nranks - 1)) != 0) return;
  std::vector<std::vector<Half>> in(opts.nranks, std::vector<Half>(opts.count));
  std::vector<Half> expect(opts.count);
  // Inputs are multiples of n so that x/n is exact in half and any order of
  // the float sum is exact.
  for (size_t i = 0; i < opts.count; ++i) {
    float sum = 0;
    for (int r = 0; r < opts.nranks; ++r) {
      const int v = static_cast<int>((i + static_cast<size_t>(r) * 5) % 31) - 15;
      in[r][i] = Half::fromFloat(static_cast<float>(v * opts.nranks));
      sum += static_cast<float>(v);
    }
    expect[i] = Half::fromFloat(sum);
  }
  runLoopback<Half>("half avg", ncclAvg, opts, in, expect);
}

// One rank of a two-rank ring, launched alone: its first receive can never
// complete, so the wait must end by the deadline (abort == false) or by the
// abort flag set from the host while the kernel runs, and mark its FIFO ends.
void checkLoneRankStops(bool abort) {
  const FifoShape shape{2, 4096};
  const size_t count = 4096;
  DeviceBuffer<float> buf(count);
  DeviceBuffer<char> recvFifo(shape.totalBytes()), sendFifo(shape.totalBytes());
  DeviceBuffer<uint32_t> status(1);
  uint32_t* abortFlag = nullptr;  // mapped pinned host memory the kernel polls
  CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&abortFlag), sizeof(uint32_t), cudaHostAllocMapped));
  *abortFlag = 0;
  uint32_t* abortFlagDev = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&abortFlagDev), abortFlag, 0));
  CHECK_CUDA(cudaMemset(buf.ptr, 0, count * sizeof(float)));
  CHECK_CUDA(cudaMemset(recvFifo.ptr, 0, shape.totalBytes()));
  CHECK_CUDA(cudaMemset(sendFifo.ptr, 0, shape.totalBytes()));
  CHECK_CUDA(cudaMemset(status.ptr, 0, sizeof(uint32_t)));
  int device = 0;
  uint64_t cycles = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(deviceCyclesForMs(device, abort ? 60000 : 50, &cycles));

  DeviceWork w;
  w.sendbuff = buf.ptr;
  w.recvbuff = buf.ptr;
  w.count = count;
  w.type = ncclFloat32;
  w.elemSize = 4;
  CHECK(makeRedOp(ncclFloat32, ncclSum, 2, &w.op));
  w.nranks = 2;
  w.alignElems = 16;
  w.chunkElems = 1024;
  w.sliceBytes = 4096;
  w.timeoutCycles = cycles;
  w.abortFlag = abortFlagDev;
  w.channelStatus = status.ptr;
  w.channels[0].recv = DeviceFifo{recvFifo.ptr, shape.nSteps, shape.stepBytes};
  w.channels[0].send = DeviceFifo{sendFifo.ptr, shape.nSteps, shape.stepBytes};
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_CUDA(launchAllReduce(w, 1, stream));
  if (abort) {
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // stuck in its first receive
    __atomic_store_n(abortFlag, 1u, __ATOMIC_RELEASE);
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  uint32_t st = 0;
  CHECK_CUDA(cudaMemcpy(&st, status.ptr, sizeof st, cudaMemcpyDeviceToHost));
  const DeviceStatus want = abort ? DeviceStatus::kAborted : DeviceStatus::kTimeout;
  std::printf("lone rank (%s): status %u (%s)\n", abort ? "abort flag" : "deadline", st,
              deviceStatusName(static_cast<DeviceStatus>(st)));
  CHECK(st == static_cast<uint32_t>(want));
  FifoControl rc{}, sc{};
  CHECK_CUDA(cudaMemcpy(&rc, recvFifo.ptr, sizeof rc, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(&sc, sendFifo.ptr, sizeof sc, cudaMemcpyDeviceToHost));
  CHECK(rc.receiverAborted == 1);
  CHECK(sc.senderAborted == 1);
  CHECK(sc.tail == 1);  // its first send (one step) went out before the receive that never completes
  cudaStreamDestroy(stream);
  cudaFreeHost(abortFlag);
}

void runGpuChecks() {
  checkKernelAttributes();
  for (int nranks : {1, 2, 3, 4}) {
    for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20, (size_t(1) << 20) + 12345}) {
      LoopbackOptions o;
      o.nranks = nranks;
      o.count = count;
      checkLoopbackFloatSum(o);
      checkLoopbackInt32Avg(o);
      checkLoopbackBf16Max(o);
      checkLoopbackHalfAvg(o);
    }
  }
  LoopbackOptions o;
  o.nranks = 3;
  o.count = 777777;
  o.offsetElems = 1;  // element-aligned only: the scalar path
  checkLoopbackFloatSum(o);
  checkLoopbackBf16Max(o);
  o.offsetElems = 0;
  o.inPlace = true;
  o.nranks = 4;
  o.nChannels = 5;
  checkLoopbackFloatSum(o);
  checkLoopbackHalfAvg(o);
  o.sliceBytes = 64;  // many tiny steps
  o.chunkBytes = 256;
  o.count = 5000;
  checkLoopbackInt32Avg(o);
  checkLoneRankStops(false);
  checkLoneRankStops(true);
}

}  // namespace

int main() {
  checkKernelsLinked();
  checkValidation();
  checkChannelParts();
  runCollectiveHostChecks();

  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no GPU: compiled only (%s); GPU checks of AllReduce, AllGather, ReduceScatter, Broadcast and "
                "Reduce skipped\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
  } else {
    runGpuChecks();
    runCollectiveGpuChecks();
  }
  if (gFailures != 0) {
    std::fprintf(stderr, "%d check(s) failed\n", gFailures);
    return 1;
  }
  std::printf("device_compile_check: ok\n");
  return 0;
}
