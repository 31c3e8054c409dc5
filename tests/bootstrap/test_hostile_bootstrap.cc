// The bootstrap against hostile and broken peers (issue 11, items 3 and 7):
// raw-socket clients that send forged or malformed hellos and headers, a fake
// root, idle connections that hold the root or a rank's listener, and the
// NCCL_COMM_ID secret. On b3b9f8d these crashed the process (bad_alloc from
// a hello claiming 2^31-1 ranks, a 2^62-byte header), allocated gigabytes, or
// delayed init by the greeting timeout per idle connection.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../reserved_port.h"
#include "../scoped_env.h"
#include "base/config.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

using namespace plait;
using namespace plait::bootstrap_wire;

namespace {

using Bootstraps = std::vector<std::unique_ptr<Bootstrap>>;

int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

UniqueIdContents contentsOf(const ncclUniqueId& id) {
  auto c = decodeUniqueId(id);
  REQUIRE(c.isOk());
  return c.value();
}

ncclUniqueId freshId() {
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  return id.value();
}

// One thread per rank; returns each rank's status (no assertions on threads).
std::vector<Status> createAll(const ncclUniqueId& id, int nranks, Bootstraps* out, int64_t deadlineMs = 10000) {
  out->clear();
  out->resize(static_cast<size_t>(nranks));
  std::vector<Status> st(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      BootstrapOptions o;
      o.deadline = Deadline::afterMs(deadlineMs);
      auto bs = Bootstrap::create(id, r, nranks, o);
      if (bs.isOk()) (*out)[static_cast<size_t>(r)] = std::move(bs.value());
      else st[static_cast<size_t>(r)] = bs.takeStatus();
    });
  for (auto& t : threads) t.join();
  return st;
}

void requireAllOk(const std::vector<Status>& st) {
  for (const Status& s : st) REQUIRE(s.toString() == "Success");
}

net::Socket rawConnect(const net::SocketAddress& to) {
  auto s = net::Socket::connect(to, Deadline::afterMs(5000), nullptr);
  REQUIRE(s.isOk());
  return std::move(s.value());
}

template <class T>
void rawSend(net::Socket& s, const T& value) {
  REQUIRE(s.sendAll(&value, sizeof(value), Deadline::afterMs(5000), nullptr).isOk());
}

RootHello helloFor(const UniqueIdContents& c, int rank, int nranks) {
  RootHello h{};
  h.magic = c.magic;
  h.nonce = c.nonce;
  h.rank = rank;
  h.nranks = nranks;
  h.timeoutMs = 10000;
  h.info.rank = rank;
  h.info.pid = 1;
  std::strcpy(h.info.hostname, "intruder");
  h.info.listenAddr = net::SocketAddress::loopback(AF_INET, 9);
  return h;
}

// Reads the root's answer to a raw hello: its code (0 = admitted).
int32_t rootAnswer(net::Socket& s) {
  RootReply r{};
  REQUIRE(s.recvAll(&r, sizeof(r), Deadline::afterMs(5000), nullptr).isOk());
  return r.code;
}

// A ring allGather of one int per rank on every rank; "" or the first error.
std::string allGatherWorks(Bootstraps& all) {
  std::vector<std::string> errors(all.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < all.size(); ++r)
    threads.emplace_back([&, r] {
      std::vector<int> v(all.size(), -1);
      v[r] = static_cast<int>(r) * 3;
      Status st = all[r]->allGather(v.data(), sizeof(int), Deadline::afterMs(10000));
      if (!st.isOk()) errors[r] = st.toString();
      for (size_t p = 0; p < v.size() && errors[r].empty(); ++p)
        if (v[p] != static_cast<int>(p) * 3) errors[r] = "wrong slot " + std::to_string(p);
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

using plait::test::ScopedEnv;

}  // namespace

TEST_CASE("A hello claiming 2^31-1 ranks fails the job with a clear error; the process survives", "[hostile]") {
  ncclUniqueId id = freshId();
  net::Socket intruder = rawConnect(contentsOf(id).root);
  rawSend(intruder, helloFor(contentsOf(id), 0, 0x7fffffff));
  CHECK(rootAnswer(intruder) == static_cast<int32_t>(Code::kInvalidArgument));
  Bootstraps all;
  auto start = Clock::now();
  auto st = createAll(id, 2, &all);
  CHECK(msSince(start) < 3000);
  for (const Status& s : st) {
    INFO(s.toString());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("outside 1..") != std::string::npos);
  }
}

TEST_CASE("Hellos without the job's nonce are turned away and the job goes on", "[hostile]") {
  ncclUniqueId id = freshId();
  UniqueIdContents c = contentsOf(id);
  RootHello forged = helloFor(c, 0, 0x7fffffff);
  forged.nonce ^= 1;
  net::Socket a = rawConnect(c.root);
  rawSend(a, forged);
  CHECK(rootAnswer(a) == static_cast<int32_t>(Code::kInvalidArgument));
  RootHello dup = helloFor(c, 1, 3);
  dup.nonce ^= 2;
  net::Socket b = rawConnect(c.root);
  rawSend(b, dup);
  Bootstraps all;
  requireAllOk(createAll(id, 3, &all));
  CHECK(allGatherWorks(all) == "");
}

TEST_CASE("Idle and half-sent connections to the root do not delay the rendezvous", "[hostile]") {
  ncclUniqueId id = freshId();
  UniqueIdContents c = contentsOf(id);
  std::vector<net::Socket> idle;
  for (int i = 0; i < 6; ++i) idle.push_back(rawConnect(c.root));
  RootHello half = helloFor(c, 0, 3);
  REQUIRE(idle[0].sendAll(&half, sizeof(half) / 2, Deadline::afterMs(1000), nullptr).isOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the root has seen them first
  Bootstraps all;
  auto start = Clock::now();
  requireAllOk(createAll(id, 3, &all));
  // Serial greeting reads took 5 s per idle connection (30 s here).
  CHECK(msSince(start) < 3000);
  CHECK(allGatherWorks(all) == "");
}

TEST_CASE("Idle connections to a rank's listener do not delay its peers", "[hostile]") {
  Bootstraps all;
  requireAllOk(createAll(freshId(), 3, &all));
  std::vector<net::Socket> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(rawConnect(all[0]->peer(0).listenAddr));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // 1 -> 0 is not a ring connection: rank 0 accepts it now, behind the idle ones.
  auto start = Clock::now();
  int value = 42, got = 0;
  Status sent;
  std::thread sender([&] { sent = all[1]->send(0, 5, &value, sizeof(value), Deadline::afterMs(10000)); });
  Status received = all[0]->recv(1, 5, &got, sizeof(got), Deadline::afterMs(10000));
  sender.join();
  CHECK(sent.toString() == "Success");
  CHECK(received.toString() == "Success");
  CHECK(got == 42);
  CHECK(msSince(start) < 3000);
}

TEST_CASE("A forged peer hello: without the nonce it is ignored; a 2^62-byte header is an error, not a crash",
          "[hostile]") {
  ncclUniqueId id = freshId();
  UniqueIdContents c = contentsOf(id);
  Bootstraps all;
  requireAllOk(createAll(id, 3, &all));
  const net::SocketAddress target = all[2]->peer(2).listenAddr;
  {
    // Wrong nonce: rank 2 ignores it and still hears the real rank 0.
    net::Socket forged = rawConnect(target);
    rawSend(forged, PeerHello{c.magic, c.nonce + 1, 0, 0});
    rawSend(forged, MessageHeader{0, 7, uint64_t(1) << 62});
    int value = 7, got = 0;
    std::thread sender([&] { (void)all[0]->send(2, 7, &value, sizeof(value), Deadline::afterMs(10000)); });
    CHECK(all[2]->recv(0, 7, &got, sizeof(got), Deadline::afterMs(10000)).toString() == "Success");
    sender.join();
    CHECK(got == 7);
  }
  {
    // The nonce is known (an insider, or NCCL_COMM_ID without a secret): rank
    // 2 takes the forged connection as rank 1's... it already has rank 1's
    // ring connection, so use a fresh job where rank 0 -> 2 is not yet made.
    ncclUniqueId id2 = freshId();
    UniqueIdContents c2 = contentsOf(id2);
    Bootstraps job;
    requireAllOk(createAll(id2, 3, &job));
    net::Socket forged = rawConnect(job[2]->peer(2).listenAddr);
    rawSend(forged, PeerHello{c2.magic, c2.nonce, 0, 0});
    rawSend(forged, MessageHeader{0, 7, uint64_t(1) << 62});
    int got = 0;
    Status st = job[2]->recv(0, 7, &got, sizeof(got), Deadline::afterMs(5000));
    INFO(st.toString());
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.message().find("malformed message header") != std::string::npos);
    forged = rawConnect(job[1]->peer(1).listenAddr);  // and an unknown kind
    rawSend(forged, PeerHello{c2.magic, c2.nonce, 2, 0});
    rawSend(forged, MessageHeader{99, 7, 4});
    st = job[1]->recv(2, 7, &got, sizeof(got), Deadline::afterMs(5000));
    CHECK(st.message().find("malformed message header") != std::string::npos);
  }
}

TEST_CASE("A fake root: a 4 GiB error text or a malformed peer table fail the rank at once", "[hostile]") {
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    auto listener = net::Socket::listen(net::SocketAddress::loopback(AF_INET, 0), 4);
    REQUIRE(listener.isOk());
    UniqueIdContents c;
    c.magic = kUniqueIdMagic;
    c.nonce = 12345;
    c.root = listener->localAddress();
    ncclUniqueId id;
    encodeUniqueId(c, &id);
    Status st;
    std::thread rank([&] {
      BootstrapOptions o;
      o.deadline = Deadline::afterMs(10000);
      st = Bootstrap::create(id, 0, 1, o).takeStatus();
    });
    auto conn = listener->accept(Deadline::afterMs(5000), nullptr);
    REQUIRE(conn.isOk());
    RootHello h{};
    REQUIRE(conn->recvAll(&h, sizeof(h), Deadline::afterMs(5000), nullptr).isOk());
    auto start = Clock::now();
    if (variant == 0) {
      rawSend(*conn, RootReply{static_cast<int32_t>(Code::kInvalidArgument), 0xFFFFFFFFu});
    } else if (variant == 1) {
      rawSend(*conn, RootReply{1000, 4});
      rawSend(*conn, 0);
    } else {
      rawSend(*conn, RootReply{0, 0});
      PeerInfo bad{};
      bad.rank = 0;  // but no valid listen address
      std::memset(bad.hostname, 'x', sizeof(bad.hostname));
      rawSend(*conn, bad);
    }
    rank.join();
    INFO(st.toString());
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.message().find("malformed") != std::string::npos);
    CHECK(msSince(start) < 2000);
  }
}

TEST_CASE("A duplicate rank fails the job and ranks arriving later hear it at once", "[hostile]") {
  ncclUniqueId id = freshId();
  UniqueIdContents c = contentsOf(id);
  Status st0, st1;
  auto start = Clock::now();
  std::thread rank0([&] {
    BootstrapOptions o;
    o.deadline = Deadline::afterMs(20000);
    st0 = Bootstrap::create(id, 0, 2, o).takeStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  net::Socket dup = rawConnect(c.root);
  rawSend(dup, helloFor(c, 0, 2));
  CHECK(rootAnswer(dup) == static_cast<int32_t>(Code::kInvalidArgument));
  rank0.join();
  // The root has now seen two connections for nranks = 2; rank 1 must still
  // be told why, not find the root gone and retry until its deadline.
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(20000);
  st1 = Bootstrap::create(id, 1, 2, o).takeStatus();
  CHECK(msSince(start) < 5000);
  for (const Status& s : {st0, st1}) {
    INFO(s.toString());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("rank 0 joined twice") != std::string::npos);
  }
}

TEST_CASE("NCCL_COMM_ID: PLAIT_COMM_SECRET enters the nonce; a rank with another secret is refused",
          "[hostile]") {
  const test::ReservedPort reserved;
  const std::string where = reserved.address();
  ScopedEnv commId("NCCL_COMM_ID", where.c_str());
  ncclUniqueId open = freshId(), a, b;
  {
    ScopedEnv secret("PLAIT_COMM_SECRET", "first-secret");
    a = freshId();
  }
  {
    ScopedEnv secret("PLAIT_COMM_SECRET", "second-secret");
    b = freshId();
  }
  CHECK(contentsOf(a).nonce != contentsOf(open).nonce);
  CHECK(contentsOf(a).nonce != contentsOf(b).nonce);
  CHECK(contentsOf(a).root == contentsOf(b).root);
  Status st0, st1;
  std::thread rank0([&] {
    BootstrapOptions o;
    o.deadline = Deadline::afterMs(1500);
    st0 = Bootstrap::create(a, 0, 2, o).takeStatus();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  BootstrapOptions o;
  o.deadline = Deadline::afterMs(5000);
  st1 = Bootstrap::create(b, 1, 2, o).takeStatus();
  rank0.join();
  INFO(st1.toString());
  CHECK(st1.code() == Code::kInvalidArgument);
  CHECK(st1.message().find("does not match") != std::string::npos);
  CHECK(st0.code() == Code::kRemoteError);  // rank 1 never joined
  // With the same secret on both ranks the job runs, and (root on loopback)
  // every rank listens on loopback only. Its root binds the same port: once
  // the first root's thread has let it go (CI saw "Address already in use"
  // when rank 0 returned first).
  REQUIRE(reserved.waitUntilFree());
  Bootstraps all;
  requireAllOk(createAll(a, 2, &all));
  for (int r = 0; r < 2; ++r) CHECK(all[0]->peer(r).listenAddr.isLoopback());
  CHECK(allGatherWorks(all) == "");
}

TEST_CASE("nranks beyond the supported maximum is an argument error", "[hostile]") {
  auto st = Bootstrap::create(freshId(), 0, kMaxRanks + 1, BootstrapOptions{});
  REQUIRE_FALSE(st.isOk());
  CHECK(st.status().code() == Code::kInvalidArgument);
}
