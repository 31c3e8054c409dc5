// The symmetric kernels (algorithms/device/symmetric_kernel.cu) through the
// public API, on the emulator: AllReduce, ReduceScatter and AllGather on
// device buffers inside NCCL_WIN_COLL_SYMMETRIC windows, on 2-4 ranks (one
// thread driving them in a group, as nccl-tests -g), every type of the sweep
// and every operator, in and out of place, at offsets inside the windows.
// Results are checked against tests/api/values.h's independent reference,
// and the bytes past each output against a guard pattern; each call must
// have launched the symmetric kernel (the emulator counts launches by
// parameter type); buffers outside windows and a user's PreMulSum (whose
// scalar may differ per rank) must run the ring. Then what must not hang: a rank that passes a buffer
// outside its windows while its peers use theirs (their barrier times out,
// [deadline], run with PLAIT_TIMEOUT=2), and ncclCommAbort ending a kernel
// whose peer never came. Built for a GPU too (test_symmetric_collectives_gpu,
// run by scripts/gpu_check.sh; there the launch counts are not checked).
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../api/values.h"
#include "nccl.h"

#if defined(PLAIT_DEVICE_EMULATION)
#include "plait_emu/runtime_api.h"
#endif

using namespace plait_test;

namespace {

// Small parts per thread block, so that a few thousand elements already
// spread over several blocks (read when the first collective runs).
const bool kSmallBlocks = [] { return setenv("PLAIT_SYMMETRIC_BLOCK_BYTES", "4096", 0) == 0; }();

constexpr size_t kWindowBytes = 1 << 20;
constexpr unsigned char kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

uint64_t symmetricLaunches() {
#if defined(PLAIT_DEVICE_EMULATION)
  return plait_emu::kernelsLaunchedTaking("plait::SymmetricWork");
#else
  return 0;
#endif
}

#if defined(PLAIT_DEVICE_EMULATION)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

int deviceFor(int rank) {
  int count = 1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
  return rank % count;
}

struct RankBuffers {
  ncclComm_t comm = nullptr;
  char* send = nullptr;
  char* recv = nullptr;
  ncclWindow_t sendWin = nullptr, recvWin = nullptr;
  cudaStream_t stream = nullptr;
};

// n ranks on one thread, each with a send and a receive window.
class Team {
 public:
  explicit Team(int n) : ranks_(n) {
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = deviceFor(r);
    std::vector<ncclComm_t> comms(n);
    REQUIRE(ncclCommInitAll(comms.data(), n, devs.data()) == ncclSuccess);
    for (int r = 0; r < n; ++r) {
      RankBuffers& b = ranks_[r];
      b.comm = comms[r];
      REQUIRE(cudaSetDevice(devs[r]) == cudaSuccess);
      REQUIRE(ncclMemAlloc(reinterpret_cast<void**>(&b.send), kWindowBytes) == ncclSuccess);
      REQUIRE(ncclMemAlloc(reinterpret_cast<void**>(&b.recv), kWindowBytes) == ncclSuccess);
      REQUIRE(cudaStreamCreate(&b.stream) == cudaSuccess);
    }
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (RankBuffers& b : ranks_) {
      REQUIRE(ncclCommWindowRegister(b.comm, b.send, kWindowBytes, &b.sendWin, NCCL_WIN_COLL_SYMMETRIC) ==
              ncclSuccess);
      REQUIRE(ncclCommWindowRegister(b.comm, b.recv, kWindowBytes, &b.recvWin, NCCL_WIN_COLL_SYMMETRIC) ==
              ncclSuccess);
    }
    REQUIRE(ncclGroupEnd() == ncclSuccess);
  }
  ~Team() {
    for (RankBuffers& b : ranks_) {
      CHECK(cudaStreamSynchronize(b.stream) == cudaSuccess);
      if (b.comm != nullptr) {  // an aborted one is gone, its windows with it
        CHECK(ncclCommWindowDeregister(b.comm, b.sendWin) == ncclSuccess);
        CHECK(ncclCommWindowDeregister(b.comm, b.recvWin) == ncclSuccess);
        CHECK(ncclCommDestroy(b.comm) == ncclSuccess);
      }
      CHECK(cudaStreamDestroy(b.stream) == cudaSuccess);
      CHECK(ncclMemFree(b.send) == ncclSuccess);
      CHECK(ncclMemFree(b.recv) == ncclSuccess);
    }
  }
  RankBuffers& operator[](int r) { return ranks_[r]; }
  int size() const { return static_cast<int>(ranks_.size()); }
  void abort(int r) {
    CHECK(ncclCommAbort(ranks_[r].comm) == ncclSuccess);
    ranks_[r].comm = nullptr;
  }

 private:
  std::vector<RankBuffers> ranks_;
};

enum class Coll { kAllReduce, kReduceScatter, kAllGather };

const char* collName(Coll c) {
  return c == Coll::kAllReduce ? "AllReduce" : c == Coll::kReduceScatter ? "ReduceScatter" : "AllGather";
}

struct Case {
  Coll coll;
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;   // AllReduce: the buffer; the others: one rank's block
  size_t offset;  // elements into the windows
  bool inPlace;
};

std::string describe(const Case& c, int n) {
  return std::string(collName(c.coll)) + " n=" + std::to_string(n) + " type=" + std::to_string(c.type) +
         " op=" + std::to_string(c.op) + " count=" + std::to_string(c.count) + " offset=" +
         std::to_string(c.offset) + (c.inPlace ? " in place" : "");
}

// Runs one case on every rank of `team` and checks it; returns "" or what
// was wrong.
std::string runCase(Team& team, const Case& c) {
  const int n = team.size();
  const size_t elem = sizeOf(c.type);
  const size_t blocks = c.coll == Coll::kAllReduce ? 1 : static_cast<size_t>(n);
  const size_t sendElems = c.coll == Coll::kReduceScatter ? blocks * c.count : c.count;
  const size_t recvElems = c.coll == Coll::kAllGather ? blocks * c.count : c.count;
  const size_t region = (c.inPlace ? std::max(sendElems, recvElems) : recvElems) * elem;
  std::vector<const char*> sends(n);
  std::vector<char*> recvs(n);
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = team[r];
    char* base = b.recv + c.offset * elem;
    std::vector<unsigned char> guard(region + kGuardBytes, kGuard);
    if (cudaMemcpy(base, guard.data(), guard.size(), cudaMemcpyHostToDevice) != cudaSuccess) return "cudaMemcpy";
    const size_t mine = static_cast<size_t>(r) * c.count * elem;
    sends[r] = !c.inPlace ? b.send + c.offset * elem : c.coll == Coll::kAllGather ? base + mine : base;
    recvs[r] = c.inPlace && c.coll == Coll::kReduceScatter ? base + mine : base;
    std::vector<char> input(sendElems * elem);
    for (size_t i = 0; i < sendElems; ++i) store(input.data(), i, c.type, inputValue(c.type, c.op, r, i));
    if (cudaMemcpy(const_cast<char*>(sends[r]), input.data(), input.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      return "cudaMemcpy";
  }
  const uint64_t before = symmetricLaunches();
  if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart";
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = team[r];
    ncclResult_t res = ncclSuccess;
    switch (c.coll) {
      case Coll::kAllReduce: res = ncclAllReduce(sends[r], recvs[r], c.count, c.type, c.op, b.comm, b.stream); break;
      case Coll::kReduceScatter:
        res = ncclReduceScatter(sends[r], recvs[r], c.count, c.type, c.op, b.comm, b.stream);
        break;
      case Coll::kAllGather: res = ncclAllGather(sends[r], recvs[r], c.count, c.type, b.comm, b.stream); break;
    }
    if (res != ncclSuccess) return std::string("rank ") + std::to_string(r) + ": " + ncclGetLastError(b.comm);
  }
  if (ncclGroupEnd() != ncclSuccess) return std::string("ncclGroupEnd: ") + ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    if (cudaStreamSynchronize(team[r].stream) != cudaSuccess) return "cudaStreamSynchronize";
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(team[r].comm, &async) != ncclSuccess || async != ncclSuccess)
      return "rank " + std::to_string(r) + ": " + ncclGetLastError(team[r].comm);
  }
#if defined(PLAIT_DEVICE_EMULATION)
  const uint64_t launched = symmetricLaunches() - before;
  if (launched != static_cast<uint64_t>(n))
    return std::to_string(launched) + " symmetric kernels launched, expected " + std::to_string(n);
#else
  (void)before;
#endif
  for (int r = 0; r < n; ++r) {
    std::vector<char> out(recvElems * elem + kGuardBytes);
    if (cudaMemcpy(out.data(), recvs[r], out.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy";
    for (size_t i = 0; i < recvElems; ++i) {
      double want = 0;
      if (c.coll == Coll::kAllGather) {
        std::vector<char> one(elem);
        store(one.data(), 0, c.type, inputValue(c.type, c.op, static_cast<int>(i / c.count), i % c.count));
        want = load(one.data(), 0, c.type);
      } else {
        const size_t at = c.coll == Coll::kReduceScatter ? static_cast<size_t>(r) * c.count + i : i;
        want = expectedValue(c.type, c.op, n, at);
      }
      const double got = load(out.data(), i, c.type);
      if (std::fabs(got - want) > tolerance(c.type, c.op, n, want))
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " + std::to_string(got) +
               ", expected " + std::to_string(want);
    }
    // Past the output: the guard, unless in place where the input lies there.
    const size_t after = recvElems * elem;
    const bool inputAfter = c.inPlace && c.coll == Coll::kReduceScatter && r < n - 1;
    for (size_t k = 0; k < kGuardBytes && !inputAfter; ++k)
      if (static_cast<unsigned char>(out[after + k]) != kGuard)
        return "rank " + std::to_string(r) + ": byte " + std::to_string(k) + " past the output was overwritten";
  }
  return "";
}

std::vector<int> rankCounts() { return quickSweep() ? std::vector<int>{2, 4} : std::vector<int>{2, 3, 4}; }

}  // namespace

TEST_CASE("Symmetric AllReduce, ReduceScatter and AllGather on window buffers", "[symmetric][emu]") {
  (void)kSmallBlocks;
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (int n : rankCounts()) {
    Team team(n);
    for (ncclDataType_t t : sweepTypes()) {
      std::vector<Case> cases;
      for (ncclRedOp_t op : ops) {
        cases.push_back({Coll::kAllReduce, t, op, 5003, 3, false});
        cases.push_back({Coll::kReduceScatter, t, op, 1501, 1, false});
      }
      cases.push_back({Coll::kAllReduce, t, ncclSum, 1, 0, true});
      cases.push_back({Coll::kAllReduce, t, ncclSum, 4099, 0, true});
      cases.push_back({Coll::kReduceScatter, t, ncclMax, 777, 5, true});
      cases.push_back({Coll::kAllGather, t, ncclSum, 2001, 1, false});
      cases.push_back({Coll::kAllGather, t, ncclSum, 64, 0, true});
      for (const Case& c : cases) {
        const std::string wrong = runCase(team, c);
        if (!wrong.empty()) FAIL_CHECK(describe(c, n) << ": " << wrong);
      }
    }
  }
}

TEST_CASE("Buffers outside windows run the ring, with the same results", "[symmetric][emu]") {
  Team team(2);
  void* plain[2] = {};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(cudaMalloc(&plain[r], 4096 * sizeof(float)) == cudaSuccess);
    std::vector<float> in(4096, static_cast<float>(r + 1));
    REQUIRE(cudaMemcpy(plain[r], in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  const uint64_t before = symmetricLaunches();
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 2; ++r)
    REQUIRE(ncclAllReduce(plain[r], plain[r], 4096, ncclFloat32, ncclSum, team[r].comm, team[r].stream) ==
            ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaStreamSynchronize(team[r].stream) == cudaSuccess);
    std::vector<float> out(4096);
    REQUIRE(cudaMemcpy(out.data(), plain[r], out.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out.front() == 3.0f);
    CHECK(out.back() == 3.0f);
    CHECK(cudaFree(plain[r]) == cudaSuccess);
  }
  CHECK(symmetricLaunches() == before);
}

// A user's PreMulSum may scale each rank's data by its own scalar, which a
// symmetric kernel (one rank reducing everyone's data) cannot apply: the ring.
TEST_CASE("A user's PreMulSum on window buffers runs the ring, each rank's own scalar", "[symmetric][emu]") {
  Team team(2);
  const float scalars[2] = {2.0f, 3.0f};
  ncclRedOp_t ops[2];
  for (int r = 0; r < 2; ++r) {
    REQUIRE(ncclRedOpCreatePreMulSum(&ops[r], const_cast<float*>(&scalars[r]), ncclFloat32, ncclScalarHostImmediate,
                                     team[r].comm) == ncclSuccess);
    std::vector<float> in(1000, static_cast<float>(r + 1));
    REQUIRE(cudaMemcpy(team[r].send, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  const uint64_t before = symmetricLaunches();
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 2; ++r)
    REQUIRE(ncclAllReduce(team[r].send, team[r].recv, 1000, ncclFloat32, ops[r], team[r].comm, team[r].stream) ==
            ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaStreamSynchronize(team[r].stream) == cudaSuccess);
    std::vector<float> out(1000);
    REQUIRE(cudaMemcpy(out.data(), team[r].recv, out.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(out.front() == 2.0f * 1 + 3.0f * 2);
    CHECK(out.back() == 2.0f * 1 + 3.0f * 2);
    CHECK(ncclRedOpDestroy(ops[r], team[r].comm) == ncclSuccess);
  }
  CHECK(symmetricLaunches() == before);
}

// NCCL 2.32's per-call configuration on device buffers: "ring" keeps window
// buffers off the symmetric kernel, the default takes it, "symmetric" alone
// outside windows is refused (ncclInvalidUsage, nothing launched), and the
// launchCompletionEvent is recorded once the kernel is launched.
TEST_CASE("ncclAllReduceConfig on device buffers: algorithm selection and the launch event", "[symmetric][emu]") {
  Team team(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> in(1000, static_cast<float>(r + 1));
    REQUIRE(cudaMemcpy(team[r].send, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  cudaEvent_t events[2];
  for (auto& e : events) REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  auto allReduce = [&](const char* selection, bool withEvent, ncclResult_t want) {
    ncclCollConfig_t c[2] = {NCCL_COLLCONFIG_INITIALIZER, NCCL_COLLCONFIG_INITIALIZER};
    REQUIRE(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < 2; ++r) {
      c[r].algSelection = selection;
      if (withEvent) c[r].launchCompletionEvent = events[r];
      CHECK(ncclAllReduceConfig(team[r].send, team[r].recv, 1000, ncclFloat32, ncclSum, team[r].comm,
                                team[r].stream, &c[r]) == want);
    }
    CHECK(ncclGroupEnd() == ncclSuccess);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(cudaStreamSynchronize(team[r].stream) == cudaSuccess);
      if (want != ncclSuccess) continue;
      std::vector<float> out(1000);
      REQUIRE(cudaMemcpy(out.data(), team[r].recv, out.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
              cudaSuccess);
      CHECK(out.front() == 3.0f);
      CHECK(out.back() == 3.0f);
      if (withEvent) CHECK(cudaEventQuery(events[r]) == cudaSuccess);
    }
  };
  // Which kernel ran is counted by the emulator only (0 on a GPU).
  const uint64_t perCall = kEmulated ? 2 : 0;
  uint64_t before = symmetricLaunches();
  allReduce("ring", true, ncclSuccess);
  CHECK(symmetricLaunches() == before);
  allReduce(nullptr, false, ncclSuccess);
  CHECK(symmetricLaunches() == before + perCall);
  before = symmetricLaunches();
  allReduce("symmetric", true, ncclSuccess);
  CHECK(symmetricLaunches() == before + perCall);
  // Outside windows the symmetric kernel cannot run: refused when forced.
  void* plain[2] = {};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(cudaMalloc(&plain[r], 1000 * sizeof(float)) == cudaSuccess);
    ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
    c.algSelection = "symmetric";
    CHECK(ncclAllReduceConfig(plain[r], plain[r], 1000, ncclFloat32, ncclSum, team[r].comm, team[r].stream, &c) ==
          ncclInvalidUsage);
    CHECK_THAT(ncclGetLastError(team[r].comm), Catch::Contains("allows AllReduce only symmetric"));
    CHECK(cudaFree(plain[r]) == cudaSuccess);
  }
  for (auto& e : events) CHECK(cudaEventDestroy(e) == cudaSuccess);
}

// The barriers count launches in device memory, not in the kernel's
// parameters: a captured AllReduce replays in step (in place: 1 + 2 = 3,
// then 6, then 12 on both ranks). One thread captures both ranks in turn
// (capturing runs nothing) and launches the graphs; no other thread touches
// CUDA's legacy stream meanwhile, which a capture of a blocking stream
// forbids (cudaErrorStreamCaptureImplicit on a GPU; the emulator does not
// model it).
TEST_CASE("A symmetric AllReduce captured into a CUDA graph replays", "[symmetric][emu]") {
  Team team(2);
  constexpr size_t kN = 3000;
  cudaGraph_t graphs[2] = {};
  cudaGraphExec_t execs[2] = {};
  for (int r = 0; r < 2; ++r) {
    std::vector<float> host(kN, 1.0f + r);
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(cudaMemcpy(team[r].recv, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  const uint64_t before = symmetricLaunches();
  for (int r = 0; r < 2; ++r) {
    RankBuffers& b = team[r];
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(ncclAllReduce(b.recv, b.recv, kN, ncclFloat32, ncclSum, b.comm, b.stream) == ncclSuccess);
    REQUIRE(cudaStreamEndCapture(b.stream, &graphs[r]) == cudaSuccess);
    REQUIRE(cudaGraphInstantiate(&execs[r], graphs[r], 0) == cudaSuccess);
  }
#if defined(PLAIT_DEVICE_EMULATION)
  CHECK(symmetricLaunches() - before == 2);  // captured once per rank; replays are the graph's
#else
  (void)before;
#endif
  for (int replay = 0; replay < 3; ++replay)
    for (int r = 0; r < 2; ++r) REQUIRE(cudaGraphLaunch(execs[r], team[r].stream) == cudaSuccess);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaStreamSynchronize(team[r].stream) == cudaSuccess);
    std::vector<float> host(kN);
    REQUIRE(cudaMemcpy(host.data(), team[r].recv, kN * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t wrong = 0;
    for (float v : host) wrong += v != 12.0f;
    CHECK(wrong == 0);
    CHECK(cudaGraphExecDestroy(execs[r]) == cudaSuccess);
    CHECK(cudaGraphDestroy(graphs[r]) == cudaSuccess);
  }
}

// Rank 1 waits on a peer that never launches; ncclCommAbort must end its
// kernel long before any deadline (PLAIT_TIMEOUT is the default here).
TEST_CASE("ncclCommAbort ends a symmetric kernel whose peer never came", "[symmetric][emu]") {
  Team team(2);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(ncclAllReduce(team[1].send, team[1].recv, 8192, ncclFloat32, ncclSum, team[1].comm, team[1].stream) ==
          ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(cudaStreamQuery(team[1].stream) == cudaErrorNotReady);  // still waiting at its barrier
  team.abort(1);
  CHECK(cudaStreamSynchronize(team[1].stream) == cudaSuccess);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  team.abort(0);
}

// Run with PLAIT_TIMEOUT=2: rank 0 passes a receive buffer outside its
// windows and runs the ring while rank 1 runs the symmetric kernel; both
// give up at their deadlines with errors that say why, and nothing hangs.
TEST_CASE("A rank without windows against ranks with them: both time out and say why", "[symmetric][deadline]") {
  Team team(2);
  void* plain = nullptr;
  REQUIRE(cudaSetDevice(deviceFor(0)) == cudaSuccess);
  REQUIRE(cudaMalloc(&plain, 8192 * sizeof(float)) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(ncclAllReduce(team[0].send, plain, 8192, ncclFloat32, ncclSum, team[0].comm, team[0].stream) ==
          ncclSuccess);
  REQUIRE(ncclAllReduce(team[1].send, team[1].recv, 8192, ncclFloat32, ncclSum, team[1].comm, team[1].stream) ==
          ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      REQUIRE(ncclCommGetAsyncError(team[r].comm, &async) == ncclSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(async == ncclRemoteError);
    const std::string why = ncclGetLastError(team[r].comm);
    INFO("rank " << r << ": " << why);
    CHECK(why.find("timed out") != std::string::npos);
    if (r == 1) CHECK(why.find("symmetric kernel's barrier") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  for (int r = 0; r < 2; ++r) {
    team.abort(r);
    CHECK(cudaStreamSynchronize(team[r].stream) == cudaSuccess);
  }
  CHECK(cudaFree(plain) == cudaSuccess);
}

// ncclCommSuspend releases the device path's connections but not the
// windows: after ncclCommResume the same windows still run the symmetric
// kernel. Their structures and signal words are the communicator's
// persistent GPU memory (ncclCommMemStats).
TEST_CASE("Windows outlive ncclCommSuspend and run the symmetric kernel after ncclCommResume", "[symmetric][emu]") {
  Team team(2);
  const Case c{Coll::kAllReduce, ncclFloat32, ncclSum, 3000, 0, false};
  REQUIRE(runCase(team, c) == "");
  uint64_t persistent[2] = {}, total[2] = {}, suspendable[2] = {};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(ncclCommMemStats(team[r].comm, ncclStatGpuMemPersist, &persistent[r]) == ncclSuccess);
    REQUIRE(ncclCommMemStats(team[r].comm, ncclStatGpuMemSuspend, &suspendable[r]) == ncclSuccess);
    REQUIRE(ncclCommMemStats(team[r].comm, ncclStatGpuMemTotal, &total[r]) == ncclSuccess);
    CHECK(persistent[r] > 0);  // two windows' device structures and the signal words
    CHECK(total[r] == persistent[r] + suspendable[r]);
  }
  // Collective: one thread per rank.
  auto eachRank = [&](auto call) {
    ncclResult_t res[2] = {ncclInternalError, ncclInternalError};
    std::thread t[2];
    for (int r = 0; r < 2; ++r) t[r] = std::thread([&, r] { res[r] = call(team[r].comm); });
    for (auto& th : t) th.join();
    CHECK(res[0] == ncclSuccess);
    CHECK(res[1] == ncclSuccess);
  };
  eachRank([](ncclComm_t comm) { return ncclCommSuspend(comm, NCCL_SUSPEND_MEM); });
  for (int r = 0; r < 2; ++r) {
    uint64_t v = 0;
    REQUIRE(ncclCommMemStats(team[r].comm, ncclStatGpuMemPersist, &v) == ncclSuccess);
    CHECK(v == persistent[r]);
  }
  eachRank([](ncclComm_t comm) { return ncclCommResume(comm); });
  CHECK(runCase(team, Case{Coll::kAllReduce, ncclFloat32, ncclSum, 5000, 16, true}) == "");
  CHECK(runCase(team, Case{Coll::kAllGather, ncclInt32, ncclSum, 700, 0, false}) == "");
  // Suspended again, then the windows deregistered and the communicators
  // destroyed while suspended (the Team's destructor).
  eachRank([](ncclComm_t comm) { return ncclCommSuspend(comm, NCCL_SUSPEND_MEM); });
}
