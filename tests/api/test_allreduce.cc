// AllReduce against an independent reference: every type x op x count x
// placement, for rank counts {1,2,3,4,5,8} as threads of one process.
// The same binary runs under several PLAIT_ALGO / PLAIT_NCHANNELS settings
// (see CMakeLists.txt), so each algorithm and the multi-channel path are
// checked.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <sstream>

#include "harness.h"
#include "values.h"
#include "plait/stream.hpp"

using namespace plait_test;

namespace {

const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// Runs one AllReduce on this rank and returns a description of the first
// wrong element, or "".
std::string checkOne(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count,
                     bool inPlace) {
  const size_t bytes = count * sizeOf(t);
  std::vector<char> send(bytes + 64), recv(bytes + 64, 0x5a);
  fillInputs(send.data(), 0, count, t, op, rank, 0);
  void* out = inPlace ? send.data() : recv.data();
  // Guard bytes after the output must survive.
  std::memset(static_cast<char*>(out) + bytes, 0x77, 64);
  if (ncclAllReduce(send.data(), out, count, t, op, comm, nullptr) != ncclSuccess)
    return std::string("ncclAllReduce failed: ") + ncclGetLastError(comm);
  if (const Mismatch m = firstReducedMismatch(out, 0, count, t, op, nranks, 0); m.index >= 0) {
    std::ostringstream os;
    os << "type " << t << " op " << op << " count " << count << (inPlace ? " in-place" : " out-of-place")
       << ": element " << m.index << " is " << m.got << ", expected " << m.want;
    return os.str();
  }
  for (int g = 0; g < 64; ++g)
    if (static_cast<unsigned char>(static_cast<char*>(out)[bytes + g]) != 0x77)
      return "wrote past the end of the output (count " + std::to_string(count) + ")";
  return "";
}

std::string sweep(int rank, int nranks, ncclComm_t comm, const std::vector<size_t>& counts) {
  for (ncclDataType_t t : sweepTypes())
    for (ncclRedOp_t op : kOps)
      for (size_t count : counts)
        for (bool inPlace : {false, true}) {
          std::string err = checkOne(rank, nranks, comm, t, op, count, inPlace);
          if (!err.empty()) return err;
        }
  return "";
}

}  // namespace

TEST_CASE("AllReduce: every type, op, count and placement matches the reference", "[allreduce]") {
  const std::vector<size_t> counts = {0, 1, 7, 1023, 4099, 70001};
  for (int nranks : {1, 2, 3, 4, 5, 8}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) { return sweep(rank, nranks, comm, counts); });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("AllReduce: large buffers (1M+7 elements) across rank counts", "[allreduce][large]") {
  const size_t count = (1u << 20) + 7;
  for (int nranks : {2, 3, 4, 5, 8}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
      for (ncclDataType_t t : {ncclFloat32, ncclFloat16, ncclInt8})
        for (bool inPlace : {false, true}) {
          std::string err = checkOne(rank, nranks, comm, t, ncclSum, count, inPlace);
          if (!err.empty()) return err;
        }
      return checkOne(rank, nranks, comm, ncclBfloat16, ncclMax, count, false);
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("AllReduce: all ranks get bit-identical float results", "[allreduce]") {
  const int nranks = 4;
  const size_t count = 100003;
  std::vector<std::vector<float>> results(nranks);
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
    std::vector<float> in(count);
    uint32_t x = 12345u + static_cast<uint32_t>(rank);
    for (auto& v : in) {  // values whose sums round differently in different orders
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) * 1e-7f;
    }
    results[rank].resize(count);
    if (ncclAllReduce(in.data(), results[rank].data(), count, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string(ncclGetLastError(comm));
    return std::string();
  });
  for (auto& f : failures) FAIL(f);
  for (int r = 1; r < nranks; ++r) CHECK(std::memcmp(results[0].data(), results[r].data(), count * 4) == 0);
}

TEST_CASE("AllReduce: PreMulSum scales each rank's input", "[allreduce][premulsum]") {
  const int nranks = 3;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
    const size_t count = 5000;
    std::vector<double> in(count, 1.0 + rank), out(count);
    double scalar = 0.5 * (rank + 1);  // each rank's own scalar applies to its own input
    ncclRedOp_t op;
    if (ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat64, ncclScalarHostImmediate, comm) != ncclSuccess)
      return std::string(ncclGetLastError(comm));
    if (ncclAllReduce(in.data(), out.data(), count, ncclFloat64, op, comm, nullptr) != ncclSuccess)
      return std::string(ncclGetLastError(comm));
    ncclRedOpDestroy(op, comm);
    double want = 0;
    for (int r = 0; r < nranks; ++r) want += (1.0 + r) * 0.5 * (r + 1);
    for (size_t i = 0; i < count; ++i)
      if (out[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(out[i]);
    return std::string();
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

TEST_CASE("ncclCommInitAll: ranks as threads of one process, driven from one thread by a group", "[init]") {
  const int n = 3;
  ncclComm_t comms[n];
  REQUIRE(ncclCommInitAll(comms, n, nullptr) == ncclSuccess);
  std::vector<std::vector<int32_t>> bufs(n, std::vector<int32_t>(1000));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 1000; ++i) bufs[r][i] = r * 1000 + i;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r)
    REQUIRE(ncclAllReduce(bufs[r].data(), bufs[r].data(), 1000, ncclInt32, ncclSum, comms[r], nullptr) ==
            ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 1000; ++i) REQUIRE(bufs[r][i] == 3000 + 3 * i);
  for (int r = 0; r < n; ++r) {
    int count = 0, rank = -1, dev = 0;
    CHECK(ncclCommCount(comms[r], &count) == ncclSuccess);
    CHECK(ncclCommUserRank(comms[r], &rank) == ncclSuccess);
    CHECK(ncclCommCuDevice(comms[r], &dev) == ncclSuccess);
    CHECK(count == n);
    CHECK(rank == r);
#ifdef PLAIT_DEVICE_STAGING
    CHECK(dev == r);  // device r of the emulated runtime (devlist NULL: the first n devices)
#else
    CHECK(dev == -1);  // no CUDA runtime in the process
#endif
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}

TEST_CASE("One thread creates several ranks inside a group", "[init][group]") {
  const int n = 3;
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[n];
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r) REQUIRE(ncclCommInitRank(&comms[r], n, id, r) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  std::vector<std::vector<double>> bufs(n, std::vector<double>(333));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 333; ++i) bufs[r][i] = r + i;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < n; ++r)
    REQUIRE(ncclAllReduce(bufs[r].data(), bufs[r].data(), 333, ncclFloat64, ncclMax, comms[r], nullptr) ==
            ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 333; ++i) REQUIRE(bufs[r][i] == n - 1 + i);
  for (int r = 0; r < n; ++r) CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
}

// A call without a stream runs on the caller's thread; one queued on a host
// stream before it runs on the stream's. Both on one communicator at once
// would share its connections (here: rank 1 queues its stream AllReduce late,
// so rank 0's blocking one would meet it). The call without a stream waits for
// the communicator's stream operations first, as CUDA's legacy default stream
// waits for the other streams.
TEST_CASE("A call without a stream waits for the communicator's host-stream operations", "[stream]") {
  auto failures = runThreads(2, [](int rank, ncclComm_t comm) -> std::string {
    plait::HostStream stream;
    std::vector<int64_t> a(4096, rank + 1), b(4096, 100 * (rank + 1));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (ncclAllReduce(a.data(), a.data(), a.size(), ncclInt64, ncclSum, comm, stream.handle()) != ncclSuccess)
      return ncclGetLastError(comm);
    if (ncclAllReduce(b.data(), b.data(), b.size(), ncclInt64, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("blocking AllReduce: ") + ncclGetLastError(comm);
    plait::Status s = stream.synchronize();
    if (!s.isOk()) return s.toString();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != 3 || b[i] != 300)
        return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + ", " + std::to_string(b[i]);
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

TEST_CASE("Host streams run operations asynchronously and in order", "[stream]") {
  auto failures = runThreads(2, [](int rank, ncclComm_t comm) -> std::string {
    plait::HostStream stream;
    std::vector<int64_t> a(1000, rank + 1), b(1000, 10 * (rank + 1));
    if (ncclAllReduce(a.data(), a.data(), a.size(), ncclInt64, ncclSum, comm, stream.handle()) != ncclSuccess)
      return ncclGetLastError(comm);
    // The second operation reads the first's output: only in-order execution gives 3*2=6... per element.
    if (ncclAllReduce(a.data(), b.data(), a.size(), ncclInt64, ncclSum, comm, stream.handle()) != ncclSuccess)
      return ncclGetLastError(comm);
    plait::Status s = stream.synchronize();
    if (!s.isOk()) return s.toString();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != 3 || b[i] != 6) return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + ", " +
                                          std::to_string(b[i]);
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
}
