// Buffer registration and the direct (zero-copy) path: ncclMemAlloc /
// ncclCommRegister buffers must give the same results as unregistered ones
// for AllReduce and AllGather (ranks as threads and as forked processes),
// fall back when any rank's buffer is not registered, survive deregistration
// and reallocation, and refuse bad arguments. Each test that expects the
// direct path counts the library's TRACE lines for it, so a silent fallback
// fails the test.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "direct_test_env.h"
#include "harness.h"
#include "values.h"

using namespace plait_test;

namespace {

bool gatherPushes() {
  const char* v = std::getenv("PLAIT_DIRECT_ALLGATHER_PUSH");
  return v != nullptr && std::atoi(v) != 0;
}

const ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
                                    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const size_t kLarge = (size_t{1} << 20) + 3;

struct Case {
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;
};

// All types for sum; every op on float and int32; the large count on a few.
std::vector<Case> allReduceCases(bool small) {
  std::vector<Case> cases;
  const std::vector<size_t> counts = small ? std::vector<size_t>{7, 4099} : std::vector<size_t>{1, 7, 4099};
  for (size_t count : counts) {
    for (ncclDataType_t t : kAllTypes) cases.push_back({t, ncclSum, count});
    for (ncclDataType_t t : {ncclFloat32, ncclInt32})
      for (ncclRedOp_t op : {ncclProd, ncclMax, ncclMin, ncclAvg}) cases.push_back({t, op, count});
  }
  for (ncclDataType_t t : {ncclFloat32, ncclInt32}) cases.push_back({t, ncclSum, kLarge});
  cases.push_back({ncclFloat32, ncclAvg, kLarge});
  cases.push_back({ncclBfloat16, ncclMax, kLarge});
  return cases;
}

// A rank's buffers: ncclMemAlloc'd and registered, or plain heap memory.
class Buffers {
 public:
  Buffers(ncclComm_t comm, size_t bytes, bool registered) : comm_(comm), registered_(registered) {
    if (registered_) {
      ok_ = ncclMemAlloc(&send_, bytes) == ncclSuccess && ncclMemAlloc(&recv_, bytes) == ncclSuccess &&
            ncclCommRegister(comm, send_, bytes, &sendHandle_) == ncclSuccess &&
            ncclCommRegister(comm, recv_, bytes, &recvHandle_) == ncclSuccess;
    } else {
      heap_[0].resize(bytes);
      heap_[1].resize(bytes);
      send_ = heap_[0].data();
      recv_ = heap_[1].data();
    }
  }
  ~Buffers() {
    if (!registered_) return;
    if (sendHandle_) ncclCommDeregister(comm_, sendHandle_);
    if (recvHandle_) ncclCommDeregister(comm_, recvHandle_);
    ncclMemFree(send_);
    ncclMemFree(recv_);
  }
  bool ok() const { return ok_; }
  char* send() const { return static_cast<char*>(send_); }
  char* recv() const { return static_cast<char*>(recv_); }

 private:
  ncclComm_t comm_;
  bool registered_;
  bool ok_ = true;
  void *send_ = nullptr, *recv_ = nullptr, *sendHandle_ = nullptr, *recvHandle_ = nullptr;
  std::vector<char> heap_[2];
};

std::string describe(const Case& c, bool inPlace, const char* what) {
  std::ostringstream os;
  os << what << ": type " << c.type << " op " << c.op << " count " << c.count << (inPlace ? " in-place" : "");
  return os.str();
}

// Runs one AllReduce on `bufs`, checks it against the reference, and leaves
// the output in *out.
std::string allReduceOnce(int rank, int nranks, ncclComm_t comm, const Buffers& bufs, const Case& c, bool inPlace,
                          std::vector<char>* out) {
  const size_t bytes = c.count * sizeOf(c.type);
  fillInputs(bufs.send(), 0, c.count, c.type, c.op, rank, 0);
  char* result = inPlace ? bufs.send() : bufs.recv();
  if (ncclAllReduce(bufs.send(), result, c.count, c.type, c.op, comm, nullptr) != ncclSuccess)
    return describe(c, inPlace, "ncclAllReduce failed") + ": " + ncclGetLastError(comm);
  const Mismatch m = firstReducedMismatch(result, 0, c.count, c.type, c.op, nranks, 0);
  if (m.index >= 0)
    return describe(c, inPlace, "wrong") + ": element " + std::to_string(m.index) + " is " + std::to_string(m.got) +
           ", expected " + std::to_string(m.want);
  out->assign(result, result + bytes);
  return "";
}

// Registered and unregistered buffers give the same bytes (the float
// average may round differently in another summation order).
std::string compareAllReduce(int rank, int nranks, ncclComm_t comm, const std::vector<Case>& cases, int* directOps) {
  size_t maxBytes = 0;
  for (const Case& c : cases) maxBytes = std::max(maxBytes, c.count * sizeOf(c.type));
  Buffers reg(comm, maxBytes, true), plain(comm, maxBytes, false);
  if (!reg.ok()) return std::string("allocating or registering: ") + ncclGetLastError(comm);
  std::vector<char> viaFifo, viaDirect;
  for (const Case& c : cases) {
    for (bool inPlace : {false, true}) {
      std::string err = allReduceOnce(rank, nranks, comm, plain, c, inPlace, &viaFifo);
      if (err.empty()) err = allReduceOnce(rank, nranks, comm, reg, c, inPlace, &viaDirect);
      if (!err.empty()) return err;
      if (rank == 0) ++*directOps;
      const bool exact = !(c.op == ncclAvg && isFloat(c.type));
      if (exact && viaFifo != viaDirect) return describe(c, inPlace, "registered and unregistered results differ");
    }
  }
  return "";
}

// AllGather of `count` elements per rank on `bufs` (in place: each rank's
// input already in its slot of the output), checked element by element.
std::string allGatherOnce(int rank, int nranks, ncclComm_t comm, char* send, char* recv, ncclDataType_t t,
                          size_t count, bool inPlace) {
  const size_t bytes = count * sizeOf(t);
  char* input = inPlace ? recv + rank * bytes : send;
  for (size_t i = 0; i < count; ++i) store(input, i, t, static_cast<double>((rank * 5 + i) % 61));
  if (ncclAllGather(input, recv, count, t, comm, nullptr) != ncclSuccess)
    return std::string("ncclAllGather failed: ") + ncclGetLastError(comm);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      if (load(recv + r * bytes, i, t) != static_cast<double>((r * 5 + i) % 61))
        return "AllGather type " + std::to_string(t) + " count " + std::to_string(count) +
               (inPlace ? " in-place" : "") + ": rank " + std::to_string(r) + "'s element " + std::to_string(i) +
               " is wrong";
  return "";
}

std::string compareAllGather(int rank, int nranks, ncclComm_t comm, const std::vector<size_t>& counts,
                             int* directOps) {
  const ncclDataType_t types[] = {ncclInt8, ncclFloat32, ncclFloat64};
  size_t maxBytes = 0;
  for (size_t c : counts) maxBytes = std::max(maxBytes, c * 8 * nranks);
  Buffers reg(comm, maxBytes, true), plain(comm, maxBytes, false);
  if (!reg.ok()) return std::string("allocating or registering: ") + ncclGetLastError(comm);
  for (ncclDataType_t t : types)
    for (size_t count : counts)
      for (bool inPlace : {false, true}) {
        std::string err = allGatherOnce(rank, nranks, comm, plain.send(), plain.recv(), t, count, inPlace);
        const size_t bytes = count * sizeOf(t) * nranks;
        std::vector<char> viaFifo(plain.recv(), plain.recv() + bytes);
        if (err.empty()) err = allGatherOnce(rank, nranks, comm, reg.send(), reg.recv(), t, count, inPlace);
        if (!err.empty()) return err;
        if (std::memcmp(viaFifo.data(), reg.recv(), bytes) != 0) return "AllGather results differ";
        if (rank == 0) ++*directOps;
      }
  return "";
}

// Creates rank `rank`'s communicator in a forked process, runs body, and
// returns an exit code (printing the failure).
int processRank(int rank, int nranks, const ncclUniqueId& id, const std::function<std::string(ncclComm_t)>& body) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
    return 2;
  }
  std::string err = body(comm);
  ncclCommDestroy(comm);
  if (!err.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
  return err.empty() ? 0 : 1;
}

}  // namespace

TEST_CASE("Registered AllReduce takes the direct path and matches the FIFO path (threads)", "[registration]") {
  DirectTestEnv env;
  const std::vector<Case> cases = allReduceCases(false);
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    const int directBefore = env.count("AllReduce", true), fifoBefore = env.count("AllReduce", false);
    int directOps = 0;
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
      return compareAllReduce(rank, nranks, comm, cases, &directOps);
    });
    for (auto& f : failures) FAIL_CHECK(f);
    CHECK(env.count("AllReduce", true) - directBefore == directOps * nranks);
    CHECK(env.count("AllReduce", false) - fifoBefore == directOps * nranks);  // the unregistered twins
  }
}

TEST_CASE("Registered AllReduce between processes maps peers' ncclMemAlloc memory", "[registration][process]") {
  DirectTestEnv env;
  const std::vector<Case> cases = allReduceCases(true);
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    const int before = env.count("AllReduce", true);
    int expected = 0;
    for (size_t i = 0; i < cases.size(); ++i) expected += 2 * nranks;
    auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
      int ops = 0;
      return processRank(rank, nranks, id, [&](ncclComm_t comm) {
        return compareAllReduce(rank, nranks, comm, cases, &ops);
      });
    });
    for (int r = 0; r < nranks; ++r) CHECK(codes[r] == 0);
    CHECK(env.count("AllReduce", true) - before == expected);
  }
}

TEST_CASE("Registered AllGather takes the direct path, in place and out of place", "[registration][allgather]") {
  DirectTestEnv env;
  const std::vector<size_t> counts = {1, 7, 4099, kLarge};
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    const int before = env.count("AllGather", true);
    int directOps = 0;
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
      return compareAllGather(rank, nranks, comm, counts, &directOps);
    });
    for (auto& f : failures) FAIL_CHECK(f);
    CHECK(env.count("AllGather", true) - before == directOps * nranks);
    // Between processes, unregistered AllGathers would go direct too (by
    // cross-memory attach); without it they take the FIFO path to compare with.
    setenv("PLAIT_P2P_CMA", "0", 1);
    resetLibrarySettings();
    const int pbefore = env.count("AllGather", true);
    auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
      int ops = 0;
      return processRank(rank, nranks, id, [&](ncclComm_t comm) {
        return compareAllGather(rank, nranks, comm, {7, 4099, kLarge}, &ops);
      });
    });
    unsetenv("PLAIT_P2P_CMA");
    resetLibrarySettings();
    for (int r = 0; r < nranks; ++r) CHECK(codes[r] == 0);
    CHECK(env.count("AllGather", true) - pbefore == 3 * 3 * 2 * nranks);
  }
}

TEST_CASE("Direct results are bit-identical on every rank and across runs", "[registration]") {
  DirectTestEnv env;
  for (int nranks : {3, 4}) {
    const size_t count = 300007;
    std::vector<std::vector<float>> results(nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      Buffers bufs(comm, count * 4, true);
      if (!bufs.ok()) return ncclGetLastError(comm);
      auto* in = reinterpret_cast<float*>(bufs.send());
      uint32_t x = 777u + static_cast<uint32_t>(rank);
      for (size_t i = 0; i < count; ++i) {  // sums that round differently in different orders
        x = x * 1664525u + 1013904223u;
        in[i] = static_cast<float>(x >> 8) * 1e-7f;
      }
      results[rank].resize(count);
      for (int run = 0; run < 2; ++run) {
        if (ncclAllReduce(in, bufs.recv(), count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
          return ncclGetLastError(comm);
        if (run == 1 && std::memcmp(results[rank].data(), bufs.recv(), count * 4) != 0) return "runs differ";
        std::memcpy(results[rank].data(), bufs.recv(), count * 4);
      }
      return "";
    });
    for (auto& f : failures) FAIL(f);
    for (int r = 1; r < nranks; ++r) CHECK(std::memcmp(results[0].data(), results[r].data(), count * 4) == 0);
  }
  CHECK(env.count("AllReduce", true) == 2 * (3 + 4));  // two runs on every rank
}

TEST_CASE("PreMulSum with a different scalar on each rank, direct", "[registration][premulsum]") {
  DirectTestEnv env;
  const int nranks = 3;
  auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, nranks, id, [&](ncclComm_t comm) -> std::string {
      const size_t count = 70001;
      Buffers bufs(comm, count * 8, true);
      if (!bufs.ok()) return ncclGetLastError(comm);
      auto* in = reinterpret_cast<double*>(bufs.send());
      for (size_t i = 0; i < count; ++i) in[i] = 1.0 + rank + static_cast<double>(i % 4);
      double scalar = 0.5 * (rank + 1);
      ncclRedOp_t op;
      if (ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm) != ncclSuccess)
        return ncclGetLastError(comm);
      if (ncclAllReduce(in, in, count, ncclFloat64, op, comm, nullptr) != ncclSuccess) return ncclGetLastError(comm);
      ncclRedOpDestroy(op, comm);
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < nranks; ++r) want += (1.0 + r + static_cast<double>(i % 4)) * 0.5 * (r + 1);
        if (in[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(in[i]);
      }
      return "";
    });
  });
  for (int r = 0; r < nranks; ++r) CHECK(codes[r] == 0);
  CHECK(env.count("AllReduce", true) == nranks);
}

TEST_CASE("Ranks that did not all register fall back to the FIFO path, correctly", "[registration]") {
  DirectTestEnv env;
  const int nranks = 3;
  const size_t count = 50000;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    Buffers reg(comm, count * 4 * nranks, rank == 1), plain(comm, count * 4 * nranks, false);
    if (!reg.ok()) return ncclGetLastError(comm);
    std::vector<char> out;
    for (bool inPlace : {false, true}) {
      std::string err = allReduceOnce(rank, nranks, comm, reg, {ncclFloat32, ncclSum, count}, inPlace, &out);
      if (err.empty()) err = allGatherOnce(rank, nranks, comm, reg.send(), reg.recv(), ncclInt32, count, inPlace);
      if (!err.empty()) return err;
    }
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
  CHECK(env.count("AllReduce", true) == 0);
  CHECK(env.count("AllGather", true) == 0);
  CHECK(env.count("AllReduce", false) == 2 * nranks);
  CHECK(env.count("AllGather", false) == 2 * nranks);
}

// Without cross-memory attach a pushing AllGather needs registered outputs
// and falls back; with it, it writes into the unregistered ones directly.
TEST_CASE("Only the inputs registered: AllGather goes direct, AllReduce falls back", "[registration][allgather]") {
  const bool cma = GENERATE(false, true);
  INFO("PLAIT_P2P_CMA=" << cma);
  setenv("PLAIT_P2P_CMA", cma ? "1" : "0", 1);
  DirectTestEnv env;
  const int nranks = 2;
  const size_t count = 4099;
  auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, nranks, id, [&](ncclComm_t comm) -> std::string {
      void *send = nullptr, *handle = nullptr;
      std::vector<char> recv(count * 4 * nranks);
      if (ncclMemAlloc(&send, count * 4) != ncclSuccess || ncclCommRegister(comm, send, count * 4, &handle) != ncclSuccess)
        return ncclGetLastError(comm);
      std::string err = allGatherOnce(rank, nranks, comm, static_cast<char*>(send), recv.data(), ncclFloat32, count,
                                      false);
      if (err.empty() && ncclAllReduce(send, recv.data(), count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
        err = ncclGetLastError(comm);
      ncclCommDeregister(comm, handle);
      ncclMemFree(send);
      return err;
    });
  });
  unsetenv("PLAIT_P2P_CMA");
  for (int r = 0; r < nranks; ++r) CHECK(codes[r] == 0);
  CHECK(env.count("AllGather", true) == (gatherPushes() && !cma ? 0 : nranks));
  CHECK(env.count("AllReduce", true) == 0);
}

TEST_CASE("Deregister, free and reallocate: peers never use a stale mapping", "[registration][process]") {
  DirectTestEnv env;
  const int nranks = 3;
  const size_t count = 1 << 16;
  auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, nranks, id, [&](ncclComm_t comm) -> std::string {
      for (int round = 0; round < 4; ++round) {
        void *buf = nullptr, *handle = nullptr;
        if (ncclMemAlloc(&buf, count * 4) != ncclSuccess) return ncclGetLastError(nullptr);
        auto* v = static_cast<int32_t*>(buf);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(round * 1000 + rank + i % 7);
        const bool registered = round != 2;  // round 2 unregistered: must fall back
        if (registered && ncclCommRegister(comm, buf, count * 4, &handle) != ncclSuccess) return ncclGetLastError(comm);
        if (ncclAllReduce(buf, buf, count, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess)
          return ncclGetLastError(comm);
        for (size_t i = 0; i < count; ++i) {
          const int32_t want = nranks * (round * 1000 + static_cast<int32_t>(i % 7)) + nranks * (nranks - 1) / 2;
          if (v[i] != want)
            return "round " + std::to_string(round) + " element " + std::to_string(i) + " is " + std::to_string(v[i]);
        }
        if (registered && ncclCommDeregister(comm, handle) != ncclSuccess) return ncclGetLastError(comm);
        if (ncclMemFree(buf) != ncclSuccess) return ncclGetLastError(nullptr);
      }
      return "";
    });
  });
  for (int r = 0; r < nranks; ++r) CHECK(codes[r] == 0);
  CHECK(env.count("AllReduce", true) == 3 * nranks);
  CHECK(env.count("AllReduce", false) == nranks);
}

TEST_CASE("Below PLAIT_DIRECT_MIN_BYTES registered buffers take the FIFO path", "[registration]") {
  DirectTestEnv env("65536");
  auto failures = runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    Buffers bufs(comm, 1 << 20, true);
    if (!bufs.ok()) return ncclGetLastError(comm);
    std::vector<char> out;
    for (size_t count : {size_t{1000}, size_t{16383}, size_t{16384}, size_t{100000}}) {
      std::string err = allReduceOnce(rank, 2, comm, bufs, {ncclFloat32, ncclSum, count}, false, &out);
      if (!err.empty()) return err;
    }
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
  CHECK(env.count("AllReduce", true) == 2 * 2);  // 64 KiB and 400 KB
  CHECK(env.count("AllReduce", false) == 0);      // smaller ones never ask
}

TEST_CASE("A peer that dies before the direct handshake makes the survivor fail, not hang",
          "[registration][process][fault]") {
  DirectTestEnv env;
  setenv("PLAIT_TIMEOUT", "30", 1);
  resetLibrarySettings();
  auto codes = runProcesses(2, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 2;
    void *buf = nullptr, *handle = nullptr;
    if (ncclMemAlloc(&buf, 1 << 20) != ncclSuccess || ncclCommRegister(comm, buf, 1 << 20, &handle) != ncclSuccess)
      return 3;
    if (rank == 1) _exit(0);  // gone without a word
    const ncclResult_t r = ncclAllReduce(buf, buf, 1 << 18, ncclFloat32, ncclSum, comm, nullptr);
    const bool named = std::strstr(ncclGetLastError(comm), "rank 1") != nullptr;
    ncclCommAbort(comm);
    return r == ncclRemoteError && named ? 0 : 1;
  });
  unsetenv("PLAIT_TIMEOUT");
  CHECK(codes[0] == 0);
}

TEST_CASE("Registration arguments are checked, and registered memory cannot be freed", "[registration][api]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  auto mentions = [](const char* word) { return std::strstr(ncclGetLastError(nullptr), word) != nullptr; };
  void* buf = nullptr;
  REQUIRE(ncclMemAlloc(&buf, 10000) == ncclSuccess);
  void* handle = nullptr;
  CHECK(ncclCommRegister(nullptr, buf, 10000, &handle) == ncclInvalidArgument);
  CHECK(mentions("comm"));
  CHECK(ncclCommRegister(comm, nullptr, 10000, &handle) == ncclInvalidArgument);
  CHECK(mentions("buff"));
  CHECK(ncclCommRegister(comm, buf, 0, &handle) == ncclInvalidArgument);
  CHECK(mentions("size"));
  CHECK(ncclCommRegister(comm, buf, 10000, nullptr) == ncclInvalidArgument);
  CHECK(mentions("handle"));
  REQUIRE(ncclCommRegister(comm, buf, 10000, &handle) == ncclSuccess);
  CHECK(handle != nullptr);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);
  CHECK(mentions("still registered"));
  CHECK(ncclMemFree(static_cast<char*>(buf) + 64) == ncclInvalidArgument);
  CHECK(ncclCommDeregister(comm, nullptr) == ncclInvalidArgument);
  int notAHandle = 0;
  CHECK(ncclCommDeregister(comm, &notAHandle) == ncclInvalidArgument);
  CHECK(mentions("not a live registration"));
  CHECK(ncclCommWindowDeregister(comm, static_cast<ncclWindow_t>(handle)) == ncclInvalidArgument);
  CHECK(ncclCommDeregister(comm, handle) == ncclSuccess);
  CHECK(ncclCommDeregister(comm, handle) == ncclInvalidArgument);  // twice
  CHECK(mentions("already deregistered"));
  // A handle is not handed out again at once: a stale second deregistration
  // after a new registration finds nothing, and leaves the new one alone
  // (the allocator used to return the freed entry's address to the next one).
  void* next = nullptr;
  REQUIRE(ncclCommRegister(comm, buf, 10000, &next) == ncclSuccess);
  CHECK(next != handle);
  CHECK(ncclCommDeregister(comm, handle) == ncclInvalidArgument);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);  // still registered through `next`
  CHECK(ncclCommDeregister(comm, next) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);  // twice

  // Windows, and memory that is not from ncclMemAlloc (accepted, recorded).
  std::vector<char> heap(8192);
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(comm, heap.data(), heap.size(), nullptr, 0) == ncclInvalidArgument);
  CHECK(ncclCommWindowRegister(comm, heap.data(), heap.size(), &win, 0x100) == ncclInvalidArgument);
  CHECK(mentions("winFlags"));
  REQUIRE(ncclCommWindowRegister(comm, heap.data(), heap.size(), &win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess);
  CHECK(ncclCommDeregister(comm, win) == ncclInvalidArgument);
  CHECK(mentions("window"));
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess);

  // Destroying a communicator drops its registrations: the memory can be freed.
  REQUIRE(ncclMemAlloc(&buf, 4096) == ncclSuccess);
  REQUIRE(ncclCommRegister(comm, buf, 4096, &handle) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(ncclCommRegister(comm, heap.data(), 64, &handle) == ncclInvalidArgument);  // destroyed comm
}
