// Bootstrap: unique ids, the rendezvous, ring allGather / barrier and tagged
// point-to-point with ranks as threads; failure paths (missing, duplicate
// and disagreeing ranks, abort, a peer that dies, a forked rank that exits).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../reserved_port.h"
#include "base/config.h"
#include "core/bootstrap.h"

using namespace plait;

namespace {

// Catch2 assertions are not thread-safe: rank threads report failures as strings.
#define RANK_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) return std::string(#cond) + " failed at line " + std::to_string(__LINE__); \
  } while (0)
#define RANK_OK(expr)                                                 \
  do {                                                                \
    Status rank_ok_ = (expr);                                         \
    if (!rank_ok_.isOk()) return std::string(#expr) + ": " + rank_ok_.toString(); \
  } while (0)

using Bootstraps = std::vector<std::unique_ptr<Bootstrap>>;

ncclUniqueId makeId() {
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  return id.value();
}

void runThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

// Creates nranks bootstraps, one thread per rank. Asserts nothing, so it may
// run on any thread; returns each rank's status.
std::vector<Status> tryCreateAll(const ncclUniqueId& id, int nranks, Bootstraps* out, BootstrapOptions options = {}) {
  out->clear();
  out->resize(static_cast<size_t>(nranks));
  std::vector<Status> st(static_cast<size_t>(nranks));
  runThreads(nranks, [&](int r) {
    auto bs = Bootstrap::create(id, r, nranks, options);
    if (bs.isOk()) (*out)[static_cast<size_t>(r)] = std::move(bs.value());
    else st[static_cast<size_t>(r)] = bs.takeStatus();
  });
  return st;
}

bool allOk(const std::vector<Status>& st) {
  return std::all_of(st.begin(), st.end(), [](const Status& s) { return s.isOk(); });
}

// As tryCreateAll, on the test's thread; REQUIREs success.
Bootstraps createAll(const ncclUniqueId& id, int nranks, BootstrapOptions options = {}) {
  Bootstraps out;
  for (auto& s : tryCreateAll(id, nranks, &out, options)) REQUIRE(s.toString() == "Success");
  return out;
}

// The collective workout every healthy communicator must pass.
std::string exercise(Bootstrap& bs) {
  const int r = bs.rank(), n = bs.nranks();
  Deadline d = Deadline::afterMs(30000);
  for (int p = 0; p < n; ++p) RANK_CHECK(bs.peer(p).rank == p && bs.peer(p).listenAddr.isValid());
  RANK_CHECK(bs.peer(r).pid == getpid());

  std::vector<uint64_t> small(static_cast<size_t>(n) * 3);
  for (int j = 0; j < 3; ++j) small[static_cast<size_t>(r * 3 + j)] = static_cast<uint64_t>(r * 1000 + j);
  RANK_OK(bs.allGather(small.data(), 3 * sizeof(uint64_t), d));
  for (int p = 0; p < n; ++p)
    for (int j = 0; j < 3; ++j) RANK_CHECK(small[static_cast<size_t>(p * 3 + j)] == static_cast<uint64_t>(p * 1000 + j));

  const size_t kBig = 40000;  // spans several ring chunks
  std::vector<uint8_t> big(static_cast<size_t>(n) * kBig);
  for (size_t i = 0; i < kBig; ++i) big[static_cast<size_t>(r) * kBig + i] = static_cast<uint8_t>(r * 7 + i * 13);
  RANK_OK(bs.allGather(big.data(), kBig, d));
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < kBig; i += 97) RANK_CHECK(big[static_cast<size_t>(p) * kBig + i] == static_cast<uint8_t>(p * 7 + i * 13));
  RANK_OK(bs.barrier(d));

  // Tags out of order: tag 1 twice, then tag 2; the receiver takes tag 2 first.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  int a1 = r * 10 + 1, b = r * 10 + 2, a2 = r * 10 + 11, self = r * 10 + 9;
  RANK_OK(bs.send(next, 1, &a1, sizeof(int), d));
  RANK_OK(bs.send(next, 2, &b, sizeof(int), d));
  RANK_OK(bs.send(next, 1, &a2, sizeof(int), d));
  RANK_OK(bs.send(r, 9, &self, sizeof(int), d));
  int got = -1;
  RANK_OK(bs.recv(prev, 2, &got, sizeof(int), d));
  RANK_CHECK(got == prev * 10 + 2);
  RANK_OK(bs.recv(r, 9, &got, sizeof(int), d));
  RANK_CHECK(got == r * 10 + 9);
  RANK_OK(bs.recv(prev, 1, &got, sizeof(int), d));
  RANK_CHECK(got == prev * 10 + 1);
  RANK_OK(bs.recv(prev, 1, &got, sizeof(int), d));
  RANK_CHECK(got == prev * 10 + 11);

  // A large message between two ranks that are not ring neighbours when n > 2.
  if (n >= 2) {
    std::vector<uint32_t> payload(1 << 20);
    if (r == 0) {
      for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint32_t>(i * 2654435761u);
      RANK_OK(bs.send(n / 2, 77, payload.data(), payload.size() * 4, d));
    } else if (r == n / 2) {
      RANK_OK(bs.recv(0, 77, payload.data(), payload.size() * 4, d));
      for (size_t i = 0; i < payload.size(); i += 1001) RANK_CHECK(payload[i] == static_cast<uint32_t>(i * 2654435761u));
    }
  }
  RANK_OK(bs.barrier(d));
  return "";
}

// Runs exercise() on every rank at once; returns "" or the first failure.
std::string exerciseErrors(Bootstraps& all) {
  std::vector<std::string> errors(all.size());
  runThreads(static_cast<int>(all.size()),
             [&](int r) { errors[static_cast<size_t>(r)] = exercise(*all[static_cast<size_t>(r)]); });
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
  return "";
}

void exerciseAll(Bootstraps& all) { CHECK(exerciseErrors(all) == ""); }

int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("Unique ids round-trip and foreign ids are rejected", "[bootstrap]") {
  UniqueIdContents c;
  c.magic = kUniqueIdMagic;
  c.nonce = 0x1234567890abcdefULL;
  c.root = net::SocketAddress::parse("[fd00::2]:4242").value();
  ncclUniqueId id;
  encodeUniqueId(c, &id);
  auto back = decodeUniqueId(id);
  REQUIRE(back.isOk());
  CHECK(back->nonce == c.nonce);
  CHECK(back->root == c.root);
  CHECK_FALSE(back->hostedByRank0);

  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  auto bad = decodeUniqueId(zero);
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message() == "ncclUniqueId is not a Plait id (was it initialised with ncclGetUniqueId?)");

  ncclUniqueId real = makeId();
  auto decoded = decodeUniqueId(real);
  REQUIRE(decoded.isOk());
  CHECK(decoded->root.port() != 0);
  ncclUniqueId other = makeId();
  CHECK(std::memcmp(&real, &other, sizeof(real)) != 0);  // fresh nonce and root each time
  // Finish the roots so they do not linger: one single-rank job each.
  createAll(real, 1);
  createAll(other, 1);
}

TEST_CASE("hostHash is stable and NCCL_HOSTID overrides it", "[bootstrap]") {
  uint64_t h = hostHash();
  CHECK(h == hostHash());
  setenv("NCCL_HOSTID", "node-a", 1);
  config::resetAll();
  uint64_t a = hostHash();
  setenv("NCCL_HOSTID", "node-b", 1);
  config::resetAll();
  uint64_t b = hostHash();
  unsetenv("NCCL_HOSTID");
  config::resetAll();
  CHECK(a != h);
  CHECK(a != b);
  CHECK(hostHash() == h);
}

TEST_CASE("Bad arguments to create are rejected", "[bootstrap]") {
  ncclUniqueId id = makeId();
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(5000);
  CHECK(Bootstrap::create(id, 2, 2, o).status().code() == Code::kInvalidArgument);
  CHECK(Bootstrap::create(id, -1, 2, o).status().code() == Code::kInvalidArgument);
  CHECK(Bootstrap::create(id, 0, 0, o).status().code() == Code::kInvalidArgument);
  createAll(id, 1);
}

TEST_CASE("N ranks as threads: create, allGather, barrier, tagged send/recv", "[bootstrap]") {
  for (int n : {1, 2, 3, 5, 8}) {
    INFO("nranks " << n);
    Bootstraps all = createAll(makeId(), n);
    for (int r = 0; r < n; ++r) CHECK(all[static_cast<size_t>(r)]->nranks() == n);
    exerciseAll(all);
  }
}

TEST_CASE("Several bootstraps run concurrently and in sequence in one process", "[bootstrap]") {
  ncclUniqueId idA = makeId(), idB = makeId();
  Bootstraps a, b;
  std::vector<Status> stA, stB;
  std::string errA, errB;
  std::thread ta([&] {
    stA = tryCreateAll(idA, 3, &a);
    if (allOk(stA)) errA = exerciseErrors(a);
  });
  stB = tryCreateAll(idB, 4, &b);
  if (allOk(stB)) errB = exerciseErrors(b);
  ta.join();
  for (auto& s : stA) CHECK(s.toString() == "Success");
  for (auto& s : stB) CHECK(s.toString() == "Success");
  CHECK(errA == "");
  CHECK(errB == "");
  for (int i = 0; i < 5; ++i) {
    Bootstraps s = createAll(makeId(), 2);
    exerciseAll(s);
  }
}

TEST_CASE("NCCL_COMM_ID: every process computes the same id; rank 0 hosts the root", "[bootstrap]") {
  const test::ReservedPort reserved;
  std::string where = reserved.address();
  setenv("NCCL_COMM_ID", where.c_str(), 1);
  config::resetAll();
  ncclUniqueId id1 = makeId(), id2 = makeId();
  CHECK(std::memcmp(&id1, &id2, sizeof(id1)) == 0);
  auto c = decodeUniqueId(id1);
  REQUIRE(c.isOk());
  CHECK(c->hostedByRank0);
  CHECK(c->root.toString() == where);
  for (int round = 0; round < 2; ++round) {  // the port is reusable by the next job
    Bootstraps all = createAll(id1, 3);
    exerciseAll(all);
  }
  unsetenv("NCCL_COMM_ID");
  config::resetAll();
}

TEST_CASE("NCCL_SOCKET_FAMILY=AF_INET6 bootstraps over IPv6; a bad NCCL_SOCKET_IFNAME is reported", "[bootstrap]") {
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  config::resetAll();
  auto v6 = net::chooseInterfaceAddress();
  if (v6.isOk()) {
    ncclUniqueId id = makeId();
    CHECK(decodeUniqueId(id)->root.family() == AF_INET6);
    Bootstraps all = createAll(id, 3);
    CHECK(all[1]->peer(2).listenAddr.family() == AF_INET6);
    exerciseAll(all);
  } else {
    WARN("no IPv6 interface here: " << v6.status().toString());
  }
  unsetenv("NCCL_SOCKET_FAMILY");
  setenv("NCCL_SOCKET_IFNAME", "=no-such-interface", 1);
  config::resetAll();
  auto none = createUniqueId();
  unsetenv("NCCL_SOCKET_IFNAME");
  config::resetAll();
  REQUIRE_FALSE(none.isOk());
  CHECK(none.status().message().find("no-such-interface") != std::string::npos);
}

TEST_CASE("A rank that never arrives: the others fail by the deadline, naming it", "[bootstrap][fault]") {
  ncclUniqueId id = makeId();
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(1500);
  std::vector<Status> st(2);
  auto start = Clock::now();
  runThreads(2, [&](int r) { st[static_cast<size_t>(r)] = Bootstrap::create(id, r, 3, o).takeStatus(); });
  int64_t ms = msSince(start);
  for (auto& s : st) {
    INFO(s.toString());
    CHECK(s.code() == Code::kRemoteError);
    CHECK(s.message().find("rank 2 never joined") != std::string::npos);
  }
  CHECK(ms >= 1000);
  CHECK(ms < 1700);
}

TEST_CASE("Duplicate ranks and disagreeing nranks are rejected with a clear message", "[bootstrap][fault]") {
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(10000);
  {
    ncclUniqueId id = makeId();
    std::vector<Status> st(2);
    auto start = Clock::now();
    runThreads(2, [&](int i) { st[static_cast<size_t>(i)] = Bootstrap::create(id, 0, 2, o).takeStatus(); });
    CHECK(msSince(start) < 3000);
    for (auto& s : st) {
      INFO(s.toString());
      CHECK(s.code() == Code::kInvalidArgument);
      CHECK(s.message().find("rank 0 joined twice") != std::string::npos);
    }
  }
  {
    ncclUniqueId id = makeId();
    std::vector<Status> st(2);
    auto start = Clock::now();
    runThreads(2, [&](int i) { st[static_cast<size_t>(i)] = Bootstrap::create(id, i, 2 + i, o).takeStatus(); });
    CHECK(msSince(start) < 3000);
    for (auto& s : st) {
      INFO(s.toString());
      CHECK(s.code() == Code::kInvalidArgument);
      CHECK(s.message().find("nranks mismatch") != std::string::npos);
    }
  }
}

TEST_CASE("abort() and the caller's abort flag unblock a recv within 200 ms", "[bootstrap][fault]") {
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);  // 0: abort(); 1: caller's flag; 2: abort() while a caller's flag is set up
    std::atomic<uint32_t> flag{0};
    BootstrapOptions o;
    if (variant > 0) o.abortFlag = &flag;
    Bootstraps all = createAll(makeId(), 2, o);
    std::atomic<int64_t> setAtNs{0};
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      setAtNs = static_cast<int64_t>(nowNs());
      if (variant == 1) flag = 1;
      else all[0]->abort();
    });
    int x;
    Status st = all[0]->recv(1, 5, &x, sizeof(x), Deadline::afterMs(10000));
    int64_t lagMs = (static_cast<int64_t>(nowNs()) - setAtNs) / 1000000;
    aborter.join();
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.message().find("aborted") != std::string::npos);
    CHECK(lagMs < 200);
    CHECK(all[0]->aborted());
    // Later calls fail at once too.
    CHECK(all[0]->barrier(Deadline::afterMs(10000)).code() == Code::kRemoteError);
  }
}

TEST_CASE("A peer that goes away makes recv fail naming it", "[bootstrap][fault]") {
  Bootstraps all = createAll(makeId(), 3);
  all[1].reset();
  int x;
  // Rank 0 holds no connection from rank 1 in a 3-ring (1 sends to 2): it
  // can only time out, naming the rank it waited for.
  Status st = all[0]->recv(1, 3, &x, sizeof(x), Deadline::afterMs(300));
  INFO(st.toString());
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.message().find("rank 1 (host ") != std::string::npos);
  // Rank 2 reads from rank 1's ring connection and sees it close.
  Status st2 = all[2]->recv(1, 3, &x, sizeof(x), Deadline::afterMs(10000));
  INFO(st2.toString());
  CHECK(st2.code() == Code::kRemoteError);
  CHECK(st2.message().find("rank 1 (host ") != std::string::npos);
  CHECK(st2.message().find("pid " + std::to_string(getpid())) != std::string::npos);
}

TEST_CASE("A forked rank that exits mid-protocol: the parent's recv fails naming it", "[bootstrap][fault][process]") {
  int pipeFds[2];
  REQUIRE(pipe(pipeFds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(pipeFds[1]);
    ncclUniqueId id;
    if (read(pipeFds[0], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) _exit(2);
    BootstrapOptions o;
    o.deadline = Deadline::afterMs(20000);
    auto bs = Bootstrap::create(id, 1, 2, o);
    if (!bs.isOk()) _exit(3);
    int v = 41;
    if (!bs.value()->barrier(o.deadline).isOk()) _exit(4);
    if (!bs.value()->send(0, 1, &v, sizeof(v), o.deadline).isOk()) _exit(5);
    _exit(0);  // dies before sending tag 2
  }
  close(pipeFds[0]);
  ncclUniqueId id = makeId();
  REQUIRE(write(pipeFds[1], &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id)));
  close(pipeFds[1]);
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(20000);
  auto bs = Bootstrap::create(id, 0, 2, o);
  REQUIRE(bs.isOk());
  REQUIRE(bs.value()->barrier(o.deadline).isOk());
  CHECK(bs.value()->peer(1).pid == child);
  int v = 0;
  REQUIRE(bs.value()->recv(1, 1, &v, sizeof(v), o.deadline).isOk());
  CHECK(v == 41);
  auto start = Clock::now();
  Status st = bs.value()->recv(1, 2, &v, sizeof(v), o.deadline);
  INFO(st.toString());
  CHECK(msSince(start) < 5000);
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.message().find("rank 1 (host ") != std::string::npos);
  CHECK(st.message().find("pid " + std::to_string(child)) != std::string::npos);
  int wstatus = 0;
  REQUIRE(waitpid(child, &wstatus, 0) == child);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
}

TEST_CASE("recv with the wrong size is an error and keeps the stream usable", "[bootstrap]") {
  Bootstraps all = createAll(makeId(), 2);
  Deadline d = Deadline::afterMs(10000);
  int64_t big = 5;
  int a = 6;
  REQUIRE(all[0]->send(1, 1, &big, sizeof(big), d).isOk());
  REQUIRE(all[0]->send(1, 1, &a, sizeof(a), d).isOk());
  int got = 0;
  Status st = all[1]->recv(0, 1, &got, sizeof(got), d);
  CHECK(st.code() == Code::kInvalidUsage);
  REQUIRE(all[1]->recv(0, 1, &got, sizeof(got), d).isOk());
  CHECK(got == 6);
}
