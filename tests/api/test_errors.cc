// Every bad input gets the right ncclResult_t and a message naming it.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "harness.h"

namespace {

bool lastErrorMentions(const char* word) { return std::strstr(ncclGetLastError(nullptr), word) != nullptr; }

}  // namespace

TEST_CASE("Plain queries and constants", "[api]") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(version == 22809);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)).find("remote") != std::string::npos);
  CHECK(sizeof(ncclUniqueId) == 128);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CHECK(config.magic == 0xcafebeef);
  CHECK(config.blocking == INT_MIN);
}

TEST_CASE("Invalid arguments are rejected with a message naming them", "[api][errors]") {
  auto failures = plait_test::runThreads(2, [](int rank, ncclComm_t comm) -> std::string {
    float buf[4] = {0};
    if (ncclAllReduce(nullptr, buf, 4, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("sendbuff"))
      return "null sendbuff";
    if (ncclAllReduce(buf, nullptr, 4, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("recvbuff"))
      return "null recvbuff";
    if (ncclAllReduce(buf, buf, 4, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr) !=
            ncclInvalidArgument ||
        !lastErrorMentions("datatype"))
      return "bad datatype";
    if (ncclAllReduce(buf, buf, 4, ncclFloat, static_cast<ncclRedOp_t>(ncclNumOps + 3), comm, nullptr) !=
            ncclInvalidArgument ||
        !lastErrorMentions("op"))
      return "bad op";
    if (ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, nullptr, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("comm"))
      return "null comm";
    if (ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("count"))
      return "count overflow";
    // Each count alone is addressable; count x nranks is not.
    const size_t halfMax = (SIZE_MAX >> 4) / sizeof(float) - 1;
    if (ncclAllGather(buf, buf, halfMax, ncclFloat, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("ranks overflows"))
      return "AllGather count x nranks overflow";
    if (ncclAlltoAll(buf, buf, halfMax, ncclFloat, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("ranks overflows"))
      return "AlltoAll count x nranks overflow";
    if (ncclReduceScatter(buf, buf, halfMax, ncclFloat, ncclSum, comm, nullptr) != ncclInvalidArgument ||
        !lastErrorMentions("ranks overflows"))
      return "ReduceScatter count x nranks overflow";
    int fakeStream = 0;
    if (ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, reinterpret_cast<cudaStream_t>(&fakeStream)) !=
            ncclInvalidArgument ||
        !lastErrorMentions("stream"))
      return "bad stream";
    // Null buffers are fine with count 0, and the communicator still works.
    if (ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return "count 0";
    buf[0] = 1.0f + rank;
    if (ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess || buf[0] != 3.0f)
      return "communicator unusable after rejected calls";
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

TEST_CASE("Creation arguments are checked", "[api][errors]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 0, id, 0) == ncclInvalidArgument);
  CHECK(lastErrorMentions("nranks"));
  CHECK(ncclCommInitRank(&comm, 2, id, 2) == ncclInvalidArgument);
  CHECK(lastErrorMentions("rank"));
  CHECK(ncclCommInitRank(nullptr, 1, id, 0) == ncclInvalidArgument);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInvalidArgument);
  CHECK(lastErrorMentions("magic"));
  ncclUniqueId garbage;
  std::memset(&garbage, 0x41, sizeof(garbage));
  CHECK(ncclCommInitRank(&comm, 1, garbage, 0) != ncclSuccess);
  CHECK(comm == nullptr);
}

TEST_CASE("A destroyed communicator is reported, not used", "[api][errors]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  float x = 2.0f;
  REQUIRE(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(x == 2.0f);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorMentions("destroyed"));
  CHECK(ncclCommDestroy(comm) == ncclInvalidArgument);
  int n = 0;
  CHECK(ncclCommCount(comm, &n) == ncclInvalidArgument);
}

TEST_CASE("Groups nest per thread; an unmatched End is an error", "[api][group]") {
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclGroupSimulateEnd(&info) == ncclSuccess);
  CHECK(info.estimatedTime == 0.0f);
}

TEST_CASE("ncclMemAlloc / ncclMemFree", "[api]") {
  void* p = nullptr;
  REQUIRE(ncclMemAlloc(&p, 1 << 20) == ncclSuccess);
  REQUIRE(p != nullptr);
  std::memset(p, 1, 1 << 20);
  CHECK(ncclMemFree(p) == ncclSuccess);
  int local = 0;
  CHECK(ncclMemFree(&local) == ncclInvalidArgument);
  CHECK(ncclMemAlloc(&p, 0) == ncclInvalidArgument);
}

TEST_CASE("An unknown PLAIT_MEM_ALLOC is refused by ncclMemAlloc, naming it", "[tunables]") {
  setenv("PLAIT_MEM_ALLOC", "gpu", 1);  // auto, host or device
  void* p = nullptr;
  CHECK(ncclMemAlloc(&p, 4096) == ncclInvalidUsage);
  CHECK(p == nullptr);
  CHECK(lastErrorMentions("PLAIT_MEM_ALLOC is \"gpu\""));
  unsetenv("PLAIT_MEM_ALLOC");
}

// Creating a one-rank communicator with `variable=value` fails with
// ncclInvalidArgument and an error that mentions `named`. Parameters are
// read once per process: each such case runs in its own ctest invocation
// (see CMakeLists.txt) so the value is fresh.
static void checkRefusedAtCreation(const char* variable, const char* value, const char* named) {
  setenv(variable, value, 1);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclInvalidArgument);
  CHECK(lastErrorMentions(named));
  unsetenv(variable);
}

TEST_CASE("A device channel count out of range is refused at creation in every build, naming it",
          "[tunables-device]") {
  checkRefusedAtCreation("PLAIT_DEVICE_NCHANNELS", "64", "PLAIT_DEVICE_NCHANNELS=64");  // kernels carry at most 32
}

TEST_CASE("A malformed FIFO tunable is refused at creation, naming it", "[tunables]") {
  checkRefusedAtCreation("PLAIT_SHM_STEPS", "65", "PLAIT_SHM_STEPS");  // more steps than a FIFO has room for
}
