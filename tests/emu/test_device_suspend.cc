// ncclCommSuspend / ncclCommResume / ncclCommMemStats on the emulator:
// suspending gives back the GPU memory of the device path's connections, as
// the emulated runtime's own accounting (cudaMemGetInfo) sees it; operations
// are refused while suspended and run again, with right results, after
// resume; what cannot suspend (kernels captured into a graph, bad flags,
// suspending twice, resuming what is not suspended) is refused by name.
// Built for a GPU too (test_device_suspend_gpu, scripts/gpu_check.sh): there
// the ranks share one device, whose cudaMemGetInfo counts every rank and the
// driver's own granularity, so the bytes are reported rather than compared.
#include <cuda_runtime_api.h>

#include <atomic>
#include <barrier>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device_ranks.h"
#include "nccl.h"

using plait_test::deviceAlloc;
using plait_test::mismatch;
using plait_test::runDeviceRanks;

namespace {

constexpr size_t kCount = 1000;

#ifdef PLAIT_REAL_GPU
constexpr bool kEmulated = false;
#else
constexpr bool kEmulated = true;
#endif

// Device memory in use on the calling thread's device.
size_t deviceUsed() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
  return total - free;
}

// An AllReduce of (rank + base) on buf; "" when every element is the sum.
std::string allReduceChecked(ncclComm_t comm, cudaStream_t stream, float* buf, int rank, int nranks, float base) {
  std::vector<float> host(kCount, static_cast<float>(rank) + base);
  if (cudaMemcpy(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) return "cudaMemcpy";
  if (ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, stream) != ncclSuccess)
    return std::string("ncclAllReduce: ") + ncclGetLastError(comm);
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "cudaStreamSynchronize";
  if (cudaMemcpy(host.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy";
  const float want = static_cast<float>(nranks * (nranks - 1) / 2) + nranks * base;
  for (size_t i = 0; i < kCount; ++i)
    if (host[i] != want) return mismatch("AllReduce", i, host[i], want);
  return "";
}

std::string stat(ncclComm_t comm, ncclCommMemStat_t which, uint64_t* value) {
  return ncclCommMemStats(comm, which, value) == ncclSuccess ? "" : std::string("ncclCommMemStats: ") +
                                                                       ncclGetLastError(comm);
}

bool lastErrorSays(ncclComm_t comm, const char* text) { return std::strstr(ncclGetLastError(comm), text) != nullptr; }

}  // namespace

TEST_CASE("ncclCommSuspend gives the device path's GPU memory back and ncclCommResume restores it", "[emu][suspend]") {
  constexpr int kRanks = 2;
  std::barrier sync(kRanks);
  std::atomic<size_t> allSuspendable{0};
  auto failed = runDeviceRanks(kRanks, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    float* buf = deviceAlloc<float>(kCount);
    if (buf == nullptr) return "cudaMalloc";
    std::string e = allReduceChecked(comm, stream, buf, rank, kRanks, 1.0f);
    if (!e.empty()) return "before suspend: " + e;
    uint64_t suspendable = 0, suspended = 9, persistent = 9, total = 0;
    for (auto [which, v] : {std::pair{ncclStatGpuMemSuspend, &suspendable}, {ncclStatGpuMemSuspended, &suspended},
                            {ncclStatGpuMemPersist, &persistent}, {ncclStatGpuMemTotal, &total}})
      if (!(e = stat(comm, which, v)).empty()) return e;
    // Threads on two devices reach each other by P2P: a block of FIFOs in
    // each device's memory.
    if (suspendable == 0) return "no GPU memory counted for the device path";
    if (suspended != 0 || persistent != 0 || total != suspendable)
      return "stats before suspend: suspended " + std::to_string(suspended) + ", persistent " +
             std::to_string(persistent) + ", total " + std::to_string(total);
    allSuspendable += suspendable;
    sync.arrive_and_wait();  // every rank measures before any suspends
    const size_t usedBefore = deviceUsed();
    sync.arrive_and_wait();
    if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclSuccess)
      return std::string("ncclCommSuspend: ") + ncclGetLastError(comm);
    sync.arrive_and_wait();  // the peer let go of its mapping of our FIFOs too
    const size_t usedSuspended = deviceUsed();
    if (kEmulated && usedBefore - usedSuspended != suspendable)
      return "suspend freed " + std::to_string(usedBefore - usedSuspended) + " bytes (cudaMemGetInfo), " +
             "ncclCommMemStats said " + std::to_string(suspendable);
    uint64_t v = 0;
    if (!(e = stat(comm, ncclStatGpuMemSuspended, &v)).empty() || v != 1) return "not reported suspended " + e;
    if (!(e = stat(comm, ncclStatGpuMemSuspend, &v)).empty() || v != suspendable)
      return "suspendable bytes changed while suspended " + e;

    // Refused while suspended, on device and on host buffers, without breaking the communicator.
    if (ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, stream) != ncclInvalidUsage ||
        !lastErrorSays(comm, "call ncclCommResume"))
      return std::string("a device AllReduce while suspended: ") + ncclGetLastError(comm);
    std::vector<float> host(8, 1.0f);
    if (ncclAllReduce(host.data(), host.data(), 8, ncclFloat32, ncclSum, comm, nullptr) != ncclInvalidUsage)
      return "a host AllReduce while suspended was not refused";
    if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclInvalidUsage || !lastErrorSays(comm, "already suspended"))
      return std::string("suspending twice: ") + ncclGetLastError(comm);

    if (ncclCommResume(comm) != ncclSuccess) return std::string("ncclCommResume: ") + ncclGetLastError(comm);
    sync.arrive_and_wait();
    const size_t usedResumed = deviceUsed();
    if (kEmulated && usedResumed - usedSuspended != suspendable)
      return "resume allocated " + std::to_string(usedResumed - usedSuspended) + " bytes, expected " +
             std::to_string(suspendable);
    if (!kEmulated && rank == 0)  // one device for all: say what the driver saw
      std::fprintf(stderr,
                   "suspend: ncclCommMemStats counted %zu bytes over %d ranks; the device's used memory fell by "
                   "%lld bytes when all had suspended and rose by %lld on resume\n",
                   allSuspendable.load(), kRanks, static_cast<long long>(usedBefore) - static_cast<long long>(usedSuspended),
                   static_cast<long long>(usedResumed) - static_cast<long long>(usedSuspended));
    if (!(e = stat(comm, ncclStatGpuMemSuspended, &v)).empty() || v != 0) return "still reported suspended " + e;
    if (!(e = allReduceChecked(comm, stream, buf, rank, kRanks, 10.0f)).empty()) return "after resume: " + e;
    if (ncclCommResume(comm) != ncclInvalidUsage || !lastErrorSays(comm, "not suspended"))
      return std::string("resuming what is not suspended: ") + ncclGetLastError(comm);
    // As NCCL: without NCCL_SUSPEND_MEM there is nothing to suspend.
    if (ncclCommSuspend(comm, 0) != ncclSuccess) return std::string("suspend(0): ") + ncclGetLastError(comm);
    if (!(e = stat(comm, ncclStatGpuMemSuspended, &v)).empty() || v != 0) return "suspend(0) suspended " + e;
    if (ncclCommSuspend(comm, 0x6) != ncclInvalidArgument || !lastErrorSays(comm, "the only flag is NCCL_SUSPEND_MEM"))
      return std::string("unknown flags: ") + ncclGetLastError(comm);
    if (ncclCommMemStats(comm, static_cast<ncclCommMemStat_t>(7), &v) != ncclInvalidArgument ||
        !lastErrorSays(comm, "not an ncclCommMemStat_t"))
      return std::string("a bad stat: ") + ncclGetLastError(comm);
    if (ncclCommMemStats(comm, ncclStatGpuMemTotal, nullptr) != ncclInvalidArgument)
      return "a NULL value was not refused";
    if (!(e = allReduceChecked(comm, stream, buf, rank, kRanks, 2.0f)).empty()) return "at the end: " + e;
    // Destroyed while suspended (by runDeviceRanks).
    if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclSuccess)
      return std::string("suspending before destroy: ") + ncclGetLastError(comm);
    return cudaFree(buf) == cudaSuccess ? "" : "cudaFree";
  });
  CHECK(failed == std::vector<std::string>{});
}

// A graph that captured a kernel keeps the FIFO addresses it was given:
// such a communicator refuses to suspend (every rank, since one captured)
// and goes on working.
TEST_CASE("A communicator whose kernels were captured into a CUDA graph refuses to suspend", "[emu][suspend]") {
  constexpr int kRanks = 2;
  auto failed = runDeviceRanks(kRanks, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    float* buf = deviceAlloc<float>(kCount);
    if (buf == nullptr) return "cudaMalloc";
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    // Only rank 0 captures; rank 1 runs the same AllReduce directly.
    if (rank == 0) {
      if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return "BeginCapture";
      if (ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, stream) != ncclSuccess)
        return std::string("captured AllReduce: ") + ncclGetLastError(comm);
      if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return "EndCapture";
      if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return "GraphInstantiate";
      if (cudaGraphLaunch(exec, stream) != cudaSuccess) return "GraphLaunch";
    } else if (ncclAllReduce(buf, buf, kCount, ncclFloat32, ncclSum, comm, stream) != ncclSuccess) {
      return std::string("AllReduce: ") + ncclGetLastError(comm);
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "cudaStreamSynchronize";
    if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) != ncclInvalidUsage)
      return "ncclCommSuspend was not refused";
    const char* want = rank == 0 ? "captured into a CUDA graph" : "refused by rank 0";
    if (!lastErrorSays(comm, want)) return std::string("the refusal does not say '") + want + "': " + ncclGetLastError(comm);
    uint64_t v = 9;
    if (ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v) != ncclSuccess || v != 0) return "reported suspended";
    std::string e = allReduceChecked(comm, stream, buf, rank, kRanks, 3.0f);
    if (exec != nullptr) {
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
    cudaFree(buf);
    return e.empty() ? "" : "after the refusal: " + e;
  });
  CHECK(failed == std::vector<std::string>{});
}
