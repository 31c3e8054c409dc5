// ncclSetEncryption (NCCL 2.32): argument checks, ranks computing right over
// an encrypted bootstrap, and a rank holding another key refused with an
// error that says so (a forked process: the setting is per process).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "nccl.h"

namespace {

ncclResult_t setKey(const char* psk) {
  ncclEncryptionConfig_t c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  c.mode = psk ? NCCL_ENCRYPTION_MODE_PSK : NCCL_ENCRYPTION_MODE_NONE;
  c.psk = psk;
  return ncclSetEncryption(&c);
}

std::string lastError() { return ncclGetLastError(nullptr); }

}  // namespace

TEST_CASE("ncclSetEncryption checks its config and names what is wrong", "[encryption]") {
  CHECK(ncclSetEncryption(nullptr) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("config is NULL"));

  ncclEncryptionConfig_t c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  CHECK(c.mode == NCCL_ENCRYPTION_MODE_NONE);
  CHECK(c.psk == nullptr);
  c.magic = 0x1234;
  CHECK(ncclSetEncryption(&c) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("magic is 0x1234"));

  c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  c.size = 8;
  CHECK(ncclSetEncryption(&c) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("config->size is 8 bytes"));

  c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  c.mode = 7;
  CHECK(ncclSetEncryption(&c) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("config->mode is 7"));

  c = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  c.mode = NCCL_ENCRYPTION_MODE_PSK;
  CHECK(ncclSetEncryption(&c) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("psk is NULL"));
  c.psk = "";
  CHECK(ncclSetEncryption(&c) == ncclInvalidArgument);
  CHECK_THAT(lastError(), Catch::Contains("key (psk) is empty"));

  CHECK(setKey("a key") == ncclSuccess);
  CHECK(setKey(nullptr) == ncclSuccess);  // NONE: off again
}

TEST_CASE("ranks with the same key compute right over an encrypted bootstrap", "[encryption]") {
  REQUIRE(setKey("same key on every rank") == ncclSuccess);
  constexpr int kRanks = 3;
  auto errors = plait_test::runThreads(kRanks, [](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(1000);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank * 1000 + i);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return lastError();
    for (size_t i = 0; i < buf.size(); ++i) {
      const float want = static_cast<float>(3000 + 3 * i);  // (0 + 1 + 2) * 1000 + 3i
      if (buf[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(buf[i]);
    }
    // A split builds a new bootstrap (new connections, new handshakes).
    ncclComm_t half = nullptr;
    if (ncclCommSplit(comm, rank % 2, rank, &half, nullptr) != ncclSuccess) return lastError();
    int one = 1;
    if (ncclAllReduce(&one, &one, 1, ncclInt32, ncclSum, half, nullptr) != ncclSuccess) return lastError();
    const int want = rank % 2 == 0 ? 2 : 1;
    ncclCommDestroy(half);
    return one == want ? "" : "split sum " + std::to_string(one);
  });
  setKey(nullptr);
  for (const std::string& e : errors) FAIL_CHECK(e);
}

TEST_CASE("a rank holding another key fails its init saying why", "[encryption][process]") {
  REQUIRE(setKey("key of the job") == ncclSuccess);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);  // the root runs here, with the job's key
  int pipeFd[2];
  REQUIRE(::pipe(pipeFd) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipeFd[0]);
    setKey("a stale key");
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, 2, id, 1);
    std::string report = std::to_string(static_cast<int>(r)) + "|" + lastError();
    (void)!::write(pipeFd[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipeFd[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipeFd[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  ::close(pipeFd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  setKey(nullptr);
  INFO(report);
  CHECK(report.rfind(std::to_string(static_cast<int>(ncclRemoteError)) + "|", 0) == 0);
  CHECK_THAT(report, Catch::Contains("TLS handshake") && Catch::Contains("same key"));
}
