// The device API through the library, on the emulator: windows registered
// with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) on ncclMemAlloc
// memory and a device communicator from ncclDevCommCreate, used by a kernel
// written as nccl-tests' LSA AllReduce (lsa_kernels.cu) — ranks as threads,
// as forked processes, and several ranks driven by one thread inside a
// group. The sums are checked against the host's through the user's own
// buffer pointers (the kernels load and store through the flat mappings: the
// same pages). Also the refusals: memory that is not CUDA VMM, NCCL_WIN_ENABLE=0.
// Built for a GPU too (test_device_api_windows_gpu, run by gpu_check.sh).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lsa_kernels.h"

using namespace plait_device_api_test;

namespace {

constexpr int kBlocks = 3, kThreads = 32;
constexpr size_t kCount = 20011;

// Rank r's device: its own where there are enough (the emulator has 8),
// else shared (a one-GPU machine, with PLAIT_ALLOW_SHARED_DEVICE=1).
int deviceFor(int rank) {
  int count = 1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
  return rank % count;
}

int64_t expected(int nranks, size_t i, int64_t seed) {
  return 1000003LL * nranks * (nranks + 1) / 2 + static_cast<int64_t>(nranks) * static_cast<int64_t>(i) * seed;
}

// One rank's resources for the device API.
struct DeviceApiRank {
  ncclComm_t comm = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ncclWindow_t sendWin = nullptr, recvWin = nullptr;
  ncclDevComm devComm{};
  ncclDevResourceRequirements extra{};  // a user buffer beside the barriers
  ncclDevResourceHandle extraHandle = 0;
  cudaStream_t stream = nullptr;
};

// Runs `launches` LSA AllReduces and returns how many elements were wrong
// (-1 when a call failed; *error says which).
long runAllReduces(DeviceApiRank& r, int nranks, int launches, std::string* error) {
  long wrong = 0;
  std::vector<int64_t> out(kCount);
  for (int launch = 0; launch < launches; ++launch) {
    if (launchLsaAllReduce(r.sendWin, r.recvWin, kCount, launch + 1, r.devComm, kBlocks, kThreads, r.stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(r.stream) != cudaSuccess ||
        cudaMemcpy(out.data(), r.recv, kCount * sizeof(int64_t), cudaMemcpyDeviceToHost) != cudaSuccess) {
      *error = "launch or copy failed";
      return -1;
    }
    for (size_t i = 0; i < kCount; ++i) wrong += out[i] != expected(nranks, i, launch + 1);
  }
  return wrong;
}

// Allocation and registration of one rank's windows and device
// communicator; "" or what failed.
std::string setUp(DeviceApiRank& r) {
  if (ncclMemAlloc(&r.send, kCount * sizeof(int64_t)) != ncclSuccess ||
      ncclMemAlloc(&r.recv, kCount * sizeof(int64_t)) != ncclSuccess)
    return std::string("ncclMemAlloc: ") + ncclGetLastError(r.comm);
  if (ncclGroupStart() != ncclSuccess ||
      ncclCommWindowRegister(r.comm, r.send, kCount * sizeof(int64_t), &r.sendWin, NCCL_WIN_COLL_SYMMETRIC) !=
          ncclSuccess ||
      ncclCommWindowRegister(r.comm, r.recv, kCount * sizeof(int64_t), &r.recvWin, NCCL_WIN_COLL_SYMMETRIC) !=
          ncclSuccess ||
      ncclGroupEnd() != ncclSuccess)
    return std::string("ncclCommWindowRegister: ") + ncclGetLastError(r.comm);
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaBarrierCount = kBlocks;
  r.extra.bufferSize = 1000;
  r.extra.bufferAlign = 16;
  r.extra.outBufferHandle = &r.extraHandle;
  reqs.resourceRequirementsList = &r.extra;
  if (ncclDevCommCreate(r.comm, &reqs, &r.devComm) != ncclSuccess)
    return std::string("ncclDevCommCreate: ") + ncclGetLastError(r.comm);
  if (cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreate";
  return "";
}

std::string tearDown(DeviceApiRank& r) {
  std::string error;
  if (r.stream != nullptr) cudaStreamDestroy(r.stream);
  if (ncclDevCommDestroy(r.comm, &r.devComm) != ncclSuccess) error += " ncclDevCommDestroy";
  if (ncclDevCommDestroy(r.comm, &r.devComm) != ncclInvalidArgument) error += " second ncclDevCommDestroy";
  if (ncclCommWindowDeregister(r.comm, r.sendWin) != ncclSuccess ||
      ncclCommWindowDeregister(r.comm, r.recvWin) != ncclSuccess)
    error += " ncclCommWindowDeregister";
  if (ncclMemFree(r.send) != ncclSuccess || ncclMemFree(r.recv) != ncclSuccess) error += " ncclMemFree";
  if (ncclCommDestroy(r.comm) != ncclSuccess) error += " ncclCommDestroy";
  return error;
}

// A whole rank: what a thread or a forked process runs. Returns the wrong
// element count, or -1 with *error set.
long wholeRank(const ncclUniqueId& id, int nranks, int rank, int launches, ncclDevComm* seen, std::string* error) {
  DeviceApiRank r;
  if (cudaSetDevice(deviceFor(rank)) != cudaSuccess || ncclCommInitRank(&r.comm, nranks, id, rank) != ncclSuccess) {
    *error = "init";
    return -1;
  }
  *error = setUp(r);
  if (!error->empty()) return -1;
  if (seen != nullptr) *seen = r.devComm;
  const long wrong = runAllReduces(r, nranks, launches, error);
  *error += tearDown(r);
  return error->empty() ? wrong : -1;
}

}  // namespace

TEST_CASE("LSA AllReduce kernels on the library's windows and device communicator, ranks as threads",
          "[device-api][emu]") {
  const int nranks = GENERATE(2, 3, 4);
  INFO(nranks << " ranks");
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<long> wrong(nranks, -2);
  std::vector<std::string> errors(nranks);
  std::vector<ncclDevComm> seen(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] { wrong[r] = wholeRank(id, nranks, r, 4, &seen[r], &errors[r]); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(wrong[r] == 0);
    CHECK(seen[r].rank == r);
    CHECK(seen[r].nRanks == nranks);
    CHECK(seen[r].lsaRank == r);
    CHECK(seen[r].lsaSize == nranks);
    CHECK(seen[r].lsaBarrier.nBarriers == kBlocks);
    CHECK(seen[r].resourceWindow != nullptr);
    CHECK(seen[r].resourceWindow_inlined.lsaRank == r);
    CHECK(seen[r].resourceWindow_inlined.worldRank == r);
    CHECK(seen[r].resourceWindow_inlined.stride4G > 0);
  }
}

TEST_CASE("Window and resource pointers: the flat layout over the library's mappings", "[device-api][emu]") {
  const int nranks = 3;
  ncclComm_t comms[nranks];
  const int devs[nranks] = {deviceFor(0), deviceFor(1), deviceFor(2)};
  REQUIRE(ncclCommInitAll(comms, nranks, devs) == ncclSuccess);
  std::vector<DeviceApiRank> ranks(nranks);
  // One thread drives every rank: registration and creation run at the
  // group's end, one thread per communicator.
  for (int r = 0; r < nranks; ++r) {
    ranks[r].comm = comms[r];
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(ncclMemAlloc(&ranks[r].send, kCount * sizeof(int64_t)) == ncclSuccess);
    REQUIRE(ncclMemAlloc(&ranks[r].recv, kCount * sizeof(int64_t)) == ncclSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (auto& r : ranks) {
    REQUIRE(ncclCommWindowRegister(r.comm, r.send, kCount * sizeof(int64_t), &r.sendWin, NCCL_WIN_COLL_SYMMETRIC) ==
            ncclSuccess);
    REQUIRE(ncclCommWindowRegister(r.comm, r.recv, kCount * sizeof(int64_t), &r.recvWin, NCCL_WIN_COLL_SYMMETRIC) ==
            ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaBarrierCount = kBlocks;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (auto& r : ranks) {
    r.extra.bufferSize = 1000;
    r.extra.bufferAlign = 16;
    r.extra.outBufferHandle = &r.extraHandle;
    reqs.resourceRequirementsList = &r.extra;
    REQUIRE(ncclDevCommCreate(r.comm, &reqs, &r.devComm) == ncclSuccess);  // copied: reqs may change now
    reqs.resourceRequirementsList = nullptr;
  }
  INFO(ncclGetLastError(nullptr));
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < nranks; ++r) {
    DeviceApiRank& x = ranks[r];
    REQUIRE(x.sendWin != nullptr);
    // The barrier words come first: (3 + n) x 3 words = 72 bytes, one unit.
    CHECK(x.extraHandle == 1);
    ncclWindow_vidmem w;
    REQUIRE(cudaMemcpy(&w, x.sendWin, sizeof w, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(w.lsaRank == r);
    CHECK(w.worldRank == r);
    const size_t stride = static_cast<size_t>(w.stride4G) << 32;
    const int peer = (r + 1) % nranks;
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    void** outDevice = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&outDevice), 5 * sizeof(void*)) == cudaSuccess);
    REQUIRE(launchPointers(x.sendWin, 24, peer, peer, x.devComm, x.extraHandle, outDevice, nullptr) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    void* out[5] = {};
    REQUIRE(cudaMemcpy(out, outDevice, sizeof out, cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaFree(outDevice);
    CHECK(out[0] == w.lsaFlatBase + r * stride + 24);
    CHECK(out[1] == w.lsaFlatBase + peer * stride + 24);
    CHECK(out[2] == out[1]);
    const ncclWindow_vidmem& res = x.devComm.resourceWindow_inlined;
    CHECK(out[3] == res.lsaFlatBase + r * stride + 128);
    CHECK(out[4] == res.lsaFlatBase + peer * stride + 128);
    // The peer's copy is the peer's buffer: bytes written through its
    // ncclMemAlloc pointer are read back through this rank's flat mapping.
    const int64_t mark = 0x5eed0000 + r;
    REQUIRE(cudaMemcpy(static_cast<char*>(ranks[peer].send) + 24, &mark, sizeof mark, cudaMemcpyHostToDevice) ==
            cudaSuccess);
    int64_t back = 0;
    REQUIRE(cudaMemcpy(&back, out[1], sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == mark);
  }
  // Kernels of every rank at once, on their own streams.
  for (int launch = 0; launch < 3; ++launch) {
    for (int r = 0; r < nranks; ++r) {
      REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
      if (ranks[r].stream == nullptr) REQUIRE(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking) == 0);
      REQUIRE(launchLsaAllReduce(ranks[r].sendWin, ranks[r].recvWin, kCount, launch + 7, ranks[r].devComm, kBlocks,
                                 kThreads, ranks[r].stream) == cudaSuccess);
    }
    for (auto& r : ranks) REQUIRE(cudaStreamSynchronize(r.stream) == cudaSuccess);
    std::vector<int64_t> got(kCount);
    for (int r = 0; r < nranks; ++r) {
      REQUIRE(cudaMemcpy(got.data(), ranks[r].recv, kCount * sizeof(int64_t), cudaMemcpyDeviceToHost) == cudaSuccess);
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i) wrong += got[i] != expected(nranks, i, launch + 7);
      CHECK(wrong == 0);
    }
  }
  // Registered windows keep their memory: ncclMemFree refuses until deregistered.
  CHECK(ncclMemFree(ranks[0].send) == ncclInvalidArgument);
  for (auto& r : ranks) {
    const std::string e = tearDown(r);
    CHECK(e.empty());
  }
}

TEST_CASE("Ranks as forked processes share windows through passed fds", "[device-api][emu][process]") {
  const int nranks = 2;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<pid_t> children;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::string error;
      const long wrong = wholeRank(id, nranks, r, 3, nullptr, &error);
      if (!error.empty()) std::fprintf(stderr, "rank %d: %s\n", r, error.c_str());
      _exit(wrong == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("Windows on memory that is not CUDA VMM are refused on every rank", "[device-api][emu]") {
  const int nranks = 2;
  ncclComm_t comms[nranks];
  const int devs[nranks] = {deviceFor(0), deviceFor(1)};
  REQUIRE(ncclCommInitAll(comms, nranks, devs) == ncclSuccess);
  void* bufs[nranks] = {};
  ncclWindow_t wins[nranks] = {};
  for (int r = 0; r < nranks; ++r) {
    REQUIRE(cudaSetDevice(deviceFor(r)) == cudaSuccess);
    REQUIRE(cudaMalloc(&bufs[r], 1 << 20) == cudaSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < nranks; ++r)
    REQUIRE(ncclCommWindowRegister(comms[r], bufs[r], 1 << 20, &wins[r], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);
  const std::string why = ncclGetLastError(nullptr);
  INFO(why);
  CHECK(why.find("not CUDA VMM memory") != std::string::npos);
  for (int r = 0; r < nranks; ++r) {
    CHECK(wins[r] == nullptr);
    cudaFree(bufs[r]);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}

// Run with NCCL_WIN_ENABLE=0 (its own ctest): windows are local
// registrations, device communicators are refused with the reason.
TEST_CASE("NCCL_WIN_ENABLE=0: local windows, and ncclDevCommCreate says why not", "[device-api][emu][win-off]") {
  ncclComm_t comm = nullptr;
  const int dev = 0;
  REQUIRE(ncclCommInitAll(&comm, 1, &dev) == ncclSuccess);
  void* buf = nullptr;
  REQUIRE(ncclMemAlloc(&buf, 4096) == ncclSuccess);
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  CHECK(win != nullptr);
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaBarrierCount = 1;
  ncclDevComm dc;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc) == ncclInvalidUsage);
  const std::string why = ncclGetLastError(comm);
  INFO(why);
  CHECK(why.find("NCCL_WIN_ENABLE=0") != std::string::npos);
  reqs.lsaMultimem = true;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc) == ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(comm)).find("lsaMultimem") != std::string::npos);
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

// A symmetric registration waits for every rank; ncclCommAbort from another
// thread ends the wait of a rank whose peer never comes.
TEST_CASE("ncclCommAbort ends a window registration whose peer never joins", "[device-api][emu]") {
  ncclComm_t comms[2];
  const int devs[2] = {deviceFor(0), deviceFor(1)};
  REQUIRE(ncclCommInitAll(comms, 2, devs) == ncclSuccess);
  REQUIRE(cudaSetDevice(devs[0]) == cudaSuccess);
  void* buf = nullptr;
  REQUIRE(ncclMemAlloc(&buf, 1 << 20) == ncclSuccess);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(ncclCommAbort(comms[0]) == ncclSuccess);
  });
  const auto start = std::chrono::steady_clock::now();
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(comms[0], buf, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess);
  const auto waited = std::chrono::steady_clock::now() - start;
  aborter.join();
  CHECK(win == nullptr);
  CHECK(waited >= std::chrono::milliseconds(250));
  CHECK(waited < std::chrono::seconds(20));
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
}

// Deregistration is local: a rank that deregistered a window its peer kept
// is out of step, and the next registration says so on every rank instead
// of mapping peers' memory at the wrong offsets.
TEST_CASE("Ranks out of step registering windows get an error naming the offsets", "[device-api][emu]") {
  ncclComm_t comms[2];
  const int devs[2] = {deviceFor(0), deviceFor(1)};
  REQUIRE(ncclCommInitAll(comms, 2, devs) == ncclSuccess);
  void* first[2] = {};
  void* second[2] = {};
  ncclWindow_t a[2] = {}, b[2] = {};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(cudaSetDevice(devs[r]) == cudaSuccess);
    REQUIRE(ncclMemAlloc(&first[r], 1 << 20) == ncclSuccess);
    REQUIRE(ncclMemAlloc(&second[r], 1 << 20) == ncclSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 2; ++r)
    REQUIRE(ncclCommWindowRegister(comms[r], first[r], 1 << 20, &a[r], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclCommWindowDeregister(comms[0], a[0]) == ncclSuccess);  // rank 1 keeps its copy
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < 2; ++r)
    REQUIRE(ncclCommWindowRegister(comms[r], second[r], 1 << 20, &b[r], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  const std::string why = ncclGetLastError(nullptr);
  INFO(why);
  CHECK(why.find("out of step registering windows") != std::string::npos);
  CHECK((b[0] == nullptr && b[1] == nullptr));
  CHECK(ncclCommWindowDeregister(comms[1], a[1]) == ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    CHECK(ncclMemFree(first[r]) == ncclSuccess);
    CHECK(ncclMemFree(second[r]) == ncclSuccess);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}
