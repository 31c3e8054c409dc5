// Ranks on other hosts in a report (src/core/op_status.h): processes that
// pretend to be on different hosts (NCCL_HOSTID), so they reach each other
// over the network transport and cannot see each other's op board. A rank
// that never arrives is named, with where it is, in the others' timeout
// error; ranks that disagree fail fast with ncclInvalidUsage naming both.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

// Forks `hosts.size()` ranks (rank r with NCCL_HOSTID=hosts[r]); each runs
// body(rank, comm) and sends back the text it returns. The parent stays
// single-threaded: a child hosts the bootstrap root.
std::vector<std::string> runOnHosts(const std::vector<std::string>& hosts,
                                    const std::function<std::string(int, ncclComm_t)>& body) {
  const int n = static_cast<int>(hosts.size());
  int idPipe[2];
  REQUIRE(pipe(idPipe) == 0);
  const pid_t server = fork();
  if (server == 0) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) _exit(1);
    if (write(idPipe[1], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) _exit(1);
    for (;;) pause();
  }
  ncclUniqueId id;
  REQUIRE(read(idPipe[0], &id, sizeof id) == static_cast<ssize_t>(sizeof id));
  std::vector<int> out(static_cast<size_t>(n));
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    int p[2];
    REQUIRE(pipe(p) == 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      setenv("NCCL_HOSTID", hosts[static_cast<size_t>(r)].c_str(), 1);
      ncclComm_t comm = nullptr;
      std::string text = ncclCommInitRank(&comm, n, id, r) == ncclSuccess
                             ? body(r, comm)
                             : std::string("init failed: ") + ncclGetLastError(nullptr);
      ncclCommAbort(comm);
      if (write(p[1], text.data(), text.size()) < 0) _exit(1);
      _exit(0);
    }
    close(p[1]);
    out[static_cast<size_t>(r)] = p[0];
    pids.push_back(pid);
  }
  std::vector<std::string> texts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    ssize_t got;
    while ((got = read(out[static_cast<size_t>(r)], buf, sizeof buf)) > 0) texts[static_cast<size_t>(r)].append(buf, static_cast<size_t>(got));
    close(out[static_cast<size_t>(r)]);
  }
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  return texts;
}

}  // namespace

// Run with PLAIT_TIMEOUT=3 (CMakeLists.txt): the survey runs after 1.5 s.
TEST_CASE("A rank on another host that never arrives is named with where it is", "[op_status][missing]") {
  auto texts = runOnHosts({"host-a", "host-a", "host-b"}, [](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(256, 1.0f), gathered(3 * 256);
    if (ncclAllReduce(buf.data(), buf.data(), 256, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("AllReduce failed: ") + ncclGetLastError(comm);
    if (rank == 2) {  // skips the AllGather, and answers the others' questions until they gave up
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return "skipped";
    }
    ncclResult_t r = ncclAllGather(buf.data(), gathered.data(), 256, ncclFloat, comm, nullptr);
    return std::to_string(r) + ": " + ncclGetLastError(comm);
  });
  // Ranks 0 and 1 (one host) wait for rank 2 with the same deadline. The one
  // that times out first aborts, and the other, still waiting in the ring,
  // may see that abort before its own deadline (seen once under ASan): its
  // error then names the aborted rank instead, which is right too. At least
  // one of them gives the full report.
  int reports = 0;
  for (int rank : {0, 1}) {
    const std::string& t = texts[static_cast<size_t>(rank)];
    INFO("rank " << rank << ": " << t);
    CHECK(t.rfind(std::to_string(ncclRemoteError) + ":", 0) == 0);
    if (t.find("timed out") == std::string::npos) {
      CHECK(t.find("rank " + std::to_string(1 - rank) + " (pid ") != std::string::npos);
      CHECK(t.find("aborted") != std::string::npos);
      continue;
    }
    ++reports;
    CHECK(t.find("rank 2 (host ") != std::string::npos);
    CHECK(t.find("is at AllReduce #1 (count 256, float, sum) for ") != std::string::npos);
    // Ranks 0 and 1 time out at about the same moment: the one that writes
    // its report second may find the other gone already (seen under TSan).
    const std::string both = rank == 0 ? "ranks 0 (this one), 1" : "ranks 0, 1 (this one)";
    const std::string alone = "rank " + std::to_string(rank) + " (this one) is at AllGather #2 (count 256, float)";
    const size_t other = t.find("rank " + std::to_string(1 - rank) + " (host ");
    const size_t close = other == std::string::npos ? other : t.find(')', other);
    const bool otherGone = close != std::string::npos && t.compare(close, 10, ") is gone ") == 0;
    CHECK((t.find(both + " are at AllGather #2 (count 256, float)") != std::string::npos ||
           (t.find(alone) != std::string::npos && otherGone)));
  }
  CHECK(reports >= 1);
  CHECK(texts[2] == "skipped");
}

// Two roots of a Reduce both wait for the other's part: without the survey
// they would wait until PLAIT_TIMEOUT.
TEST_CASE("Ranks on two hosts that disagree fail fast naming each other", "[op_status][disagree]") {
  auto start = std::chrono::steady_clock::now();
  auto texts = runOnHosts({"host-a", "host-b"}, [](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(1 << 16, 1.0f);
    ncclResult_t r = ncclReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, rank, comm, nullptr);
    return std::to_string(r) + ": " + ncclGetLastError(comm);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int rank : {0, 1}) {
    const std::string& t = texts[static_cast<size_t>(rank)];
    INFO("rank " << rank << ": " << t);
    // The rank whose survey found the disagreement reports it; the other sees
    // its connections close (it may also have found it first).
    if (t.rfind(std::to_string(ncclInvalidUsage) + ":", 0) == 0) {
      CHECK(t.find("rank " + std::to_string(1 - rank) + " (on another host) runs Reduce #1") != std::string::npos);
      CHECK(t.find("root " + std::to_string(rank)) != std::string::npos);
    } else {
      CHECK(t.rfind(std::to_string(ncclRemoteError) + ":", 0) == 0);
    }
  }
  const bool someoneFound = texts[0].rfind(std::to_string(ncclInvalidUsage) + ":", 0) == 0 ||
                            texts[1].rfind(std::to_string(ncclInvalidUsage) + ":", 0) == 0;
  CHECK(someoneFound);
  CHECK(s < 20);  // PLAIT_TIMEOUT is 30 here: well before it
}
