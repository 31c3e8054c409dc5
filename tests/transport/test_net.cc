// The network transport over loopback, inside one process: the socket
// transport's non-blocking API (net.h contract), then NetTransport's
// connectors and proxy with two "ranks" as threads that call each other
// remote.
#include <unistd.h>

#include <barrier>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/tls/tls.h"
#include "transport/net/net_plugin.h"
#include "transport/net/net_transport.h"
#include "transport/net_test_util.h"
#include "../scoped_env.h"

using namespace plait;

TEST_CASE("socket net: devices and properties follow NCCL_SOCKET_IFNAME", "[net]") {
  const PlaitNetV8& net = loopbackSocketNet();
  int ndev = 0;
  REQUIRE(net.devices(&ndev) == 0);
  REQUIRE(ndev == 1);
  PlaitNetProperties props{};
  REQUIRE(net.getProperties(0, &props) == 0);
  CHECK(std::string(props.name) == "lo");
  CHECK(props.ptrSupport == kNetPtrHost);
  CHECK(props.maxRecvs == 1);
  CHECK(net.getProperties(1, &props) != 0);
}

// What the loader checks of a plugin (tests/fuzz, net_plugin, feeds it anything).
TEST_CASE("net plugin loader: unusable tables and device properties are refused by name", "[net]") {
  PlaitNetV8 table = *socketNet();
  CHECK(checkNetTable(table, "built-in").isOk());
  PlaitNetV8 noName = table;
  noName.name = nullptr;
  CHECK(checkNetTable(noName, "libnccl-net-x.so").message().find("libnccl-net-x.so has no name") != std::string::npos);
  PlaitNetV8 longName = table;
  const std::string tooLong(kMaxNetNameBytes + 1, 'n');
  longName.name = tooLong.c_str();
  CHECK_FALSE(checkNetTable(longName, "x").isOk());
  PlaitNetV8 noIsend = table;
  noIsend.isend = nullptr;
  CHECK(checkNetTable(noIsend, "x").message().find("has no isend function") != std::string::npos);
  PlaitNetV8 noDmaBuf = table;  // optional: GPUDirect RDMA is then unsupported
  noDmaBuf.regMrDmaBuf = nullptr;
  noDmaBuf.iflush = nullptr;
  CHECK(checkNetTable(noDmaBuf, "x").isOk());

  PlaitNetProperties props{};
  props.ptrSupport = kNetPtrHost;
  props.maxRecvs = 1;
  CHECK(checkNetProperties(props, 0, "Socket").isOk());
  props.ptrSupport = kNetPtrCuda;
  CHECK(checkNetProperties(props, 0, "Socket").message().find("no support for host memory") != std::string::npos);
  props.ptrSupport = kNetPtrHost;
  props.maxRecvs = 0;
  CHECK_FALSE(checkNetProperties(props, 0, "Socket").isOk());
  props.maxRecvs = 1;
  props.netDeviceType = kNetDeviceUnpack;
  CHECK(checkNetProperties(props, 3, "X").message().find("network X device 3") != std::string::npos);

  // chooseNetAmong skips an unusable table (before calling anything of it)
  // and takes the next; NCCL_NET names one.
  auto chosen = chooseNetAmong({{&noIsend, "broken.so"}, {&loopbackSocketNet(), "built-in"}}, "");
  REQUIRE(chosen.isOk());
  CHECK(chosen->from == "built-in");
  CHECK(chooseNetAmong({{&noName, "broken.so"}}, "").status().message().find("broken.so (unusable table)") !=
        std::string::npos);
  CHECK(chooseNetAmong({{&loopbackSocketNet(), "built-in"}}, "IB").status().code() == Code::kInvalidArgument);
}

// Regression (tests/fuzz, net_plugin): a plugin's TRACE line without a file
// name crashed the logger (strrchr on null).
TEST_CASE("net plugin logger: a TRACE line with a null file name is printed, not a crash", "[net]") {
  {
    test::ScopedEnv level("PLAIT_DEBUG", "TRACE");
    test::ScopedEnv subsys("PLAIT_DEBUG_SUBSYS", "NET");
    test::ScopedEnv file("PLAIT_DEBUG_FILE", "/dev/null");
    config::resetAll();
    log::reset();
    REQUIRE(log::enabled(log::Level::kTrace, log::kNet));
    netLogger(static_cast<int>(log::Level::kTrace), 0, nullptr, 7, "%s", "a plugin's line");
    netLogger(static_cast<int>(log::Level::kWarn), 0, nullptr, 7, "%s", "a plugin's warning");
    CHECK(takeNetError() == "a plugin's warning");
  }
  config::resetAll();
  log::reset();
}

TEST_CASE("socket net: messages of every size arrive in order over several streams", "[net]") {
  setenv("PLAIT_SOCKET_NSTREAMS", GENERATE("1", "3"), 1);
  setenv("PLAIT_SOCKET_MIN_PART_BYTES", "4096", 1);
  const bool encrypted = GENERATE(false, true);  // ncclSetEncryption's TLS on every stream
  plait::config::resetAll();
  if (encrypted) REQUIRE(tls::enablePsk("test key").isOk());
  const uint64_t sealed = tls::counters().sealedBytes.load();
  const PlaitNetV8& net = loopbackSocketNet();
  void *sc, *rc;
  connectPair(net, &sc, &rc);
  tls::disable();  // the comms keep what they were opened with
  const std::vector<int> sizes = {0, 1, 7, 4096, 4097, 3 * 4096 + 5, 1 << 20};
  std::vector<std::vector<char>> out, in;
  std::vector<void*> sreq, rreq;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(sizes[i]);
    for (int k = 0; k < sizes[i]; ++k) out[i][k] = static_cast<char>(k * 7 + i);
    in.emplace_back((1 << 20) + 16, 0);
    void* data = in[i].data();
    int cap = static_cast<int>(in[i].size());
    int tag = 0;
    void* mh = nullptr;
    void* r = nullptr;
    REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &mh, &r) == 0);
    REQUIRE(r != nullptr);
    rreq.push_back(r);
    void* s = nullptr;
    REQUIRE(net.isend(sc, out[i].data(), sizes[i], 0, nullptr, &s) == 0);
    REQUIRE(s != nullptr);
    sreq.push_back(s);
  }
  // Complete in reverse order of posting: test() must progress the others too.
  for (size_t i = sizes.size(); i-- > 0;) {
    REQUIRE(waitRequest(net, sreq[i]) == sizes[i]);
    REQUIRE(waitRequest(net, rreq[i]) == sizes[i]);
  }
  for (size_t i = 0; i < sizes.size(); ++i) CHECK((sizes[i] == 0 || std::memcmp(in[i].data(), out[i].data(), sizes[i]) == 0));
  // Encrypted: every payload byte went through TLS (plus hellos and size words).
  uint64_t payload = 0;
  for (int n : sizes) payload += static_cast<uint64_t>(n);
  if (encrypted) CHECK(tls::counters().sealedBytes.load() - sealed > payload);
  else CHECK(tls::counters().sealedBytes.load() == sealed);
  net.closeSend(sc);
  net.closeRecv(rc);
  unsetenv("PLAIT_SOCKET_NSTREAMS");
  unsetenv("PLAIT_SOCKET_MIN_PART_BYTES");
  plait::config::resetAll();
}

TEST_CASE("socket net: a message larger than the receive fails; a closed peer is named", "[net]") {
  const PlaitNetV8& net = loopbackSocketNet();
  void *sc, *rc;
  connectPair(net, &sc, &rc);
  std::vector<char> buf(100);
  void* data = buf.data();
  int cap = 10, tag = 0;
  void* mh = nullptr;
  void *r = nullptr, *s = nullptr;
  REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &mh, &r) == 0);
  REQUIRE(net.isend(sc, buf.data(), 100, 0, nullptr, &s) == 0);
  CHECK(waitRequest(net, r, s) == -1);
  CHECK_THAT(takeNetError(), Catch::Contains("exceeds the posted receive of 10 bytes"));
  net.closeRecv(rc);
  net.closeSend(sc);

  connectPair(net, &sc, &rc);
  cap = 100;
  REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &mh, &r) == 0);
  net.closeSend(sc);
  CHECK(waitRequest(net, r) == -1);
  CHECK_THAT(takeNetError(), Catch::Contains("connection to 127.0.0.1:") && Catch::Contains("closed by the peer"));
  net.closeRecv(rc);
}

// The handle a connector gets is a copy of the listener's bytes, sent by a
// peer; the socket module keeps its connect progress in it between calls. A
// progress pointer it did not put there is refused, never followed (the
// review of 2026-11-30: it was read, written, its fds closed and deleted).
// Where the pointer lies is found without knowing the layout: the bytes a
// first connect() call changes. Encrypted, that call cannot finish (the TLS
// handshake needs the listener's answer), so the progress is there to find.
TEST_CASE("socket net: a handle carrying connector state from elsewhere is refused", "[net]") {
  const PlaitNetV8& net = loopbackSocketNet();
  REQUIRE(tls::enablePsk("test key").isOk());
  char handle[kNetHandleBytes];
  void* listenComm = nullptr;
  REQUIRE(net.listen(0, handle, &listenComm) == 0);
  char progress[kNetHandleBytes];
  std::memcpy(progress, handle, sizeof handle);
  void *sc = nullptr, *rc = nullptr;
  PlaitNetDeviceHandle* dh = nullptr;
  REQUIRE(net.connect(0, progress, &sc, &dh) == 0);
  REQUIRE(sc == nullptr);  // under way
  std::vector<size_t> changed;
  for (size_t i = 0; i < sizeof handle; ++i)
    if (progress[i] != handle[i]) changed.push_back(i);
  REQUIRE_FALSE(changed.empty());
  for (uint64_t forged : {uint64_t{0x4141414141414141}, uint64_t{0x1000}}) {
    char bad[kNetHandleBytes];
    std::memcpy(bad, handle, sizeof handle);
    for (size_t i : changed) bad[i] = static_cast<char>(forged >> (8 * ((i - changed.front()) % 8)));
    void* badComm = nullptr;
    CHECK(net.connect(0, bad, &badComm, &dh) != 0);
    CHECK(badComm == nullptr);
    CHECK_THAT(takeNetError(), Catch::Contains("connector state this process did not make"));
  }
  // The genuine progress still completes.
  Deadline d = Deadline::afterMs(5000);
  while ((sc == nullptr || rc == nullptr) && !d.expired()) {
    if (sc == nullptr) REQUIRE(net.connect(0, progress, &sc, &dh) == 0);
    if (rc == nullptr) REQUIRE(net.accept(listenComm, &rc, &dh) == 0);
  }
  tls::disable();
  REQUIRE(sc != nullptr);
  REQUIRE(rc != nullptr);
  net.closeSend(sc);
  net.closeRecv(rc);
  REQUIRE(net.closeListen(listenComm) == 0);
}

TEST_CASE("net transport: ring and point-to-point FIFOs between two ranks over the proxy", "[net]") {
  loopbackSocketNet();
  ThreadOob::Shared shared;
  std::atomic<uint32_t> abortFlags[2] = {0, 0};
  std::unique_ptr<NetTransport> t[2];
  std::thread threads[2];
  std::string connectErrors[2];  // Catch2 assertions stay on the test's thread
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      ThreadOob oob(shared, r);
      auto res = NetTransport::connect(oob, twoRankOptions(r, &abortFlags[r]), Deadline::afterMs(10000));
      if (res.isOk()) t[r] = std::move(res).value();
      else connectErrors[r] = res.status().toString();
    });
  for (auto& th : threads) th.join();
  REQUIRE(connectErrors[0].empty());
  REQUIRE(connectErrors[1].empty());
  REQUIRE(t[0]->ringSend(0) != nullptr);
  REQUIRE(t[1]->ringRecv(0) != nullptr);
  CHECK_THAT(t[0]->description(), Catch::StartsWith("NET/Socket/lo"));

  constexpr int kSteps = 200;
  std::string senderError;
  std::thread sender([&] {
    FifoSender* f = t[0]->ringSend(0);
    for (int i = 0; i < kSteps; ++i) {
      auto buf = f->acquire();
      if (!buf.isOk()) {
        senderError = buf.status().toString();
        return;
      }
      const size_t n = static_cast<size_t>(i * 37 % 4096);
      std::memset(buf.value(), i & 0xff, n);
      f->post(n);
    }
    FifoSender* p = t[0]->p2pSend(1);
    auto buf = p->acquire();
    if (!buf.isOk()) {
      senderError = buf.status().toString();
      return;
    }
    std::memcpy(buf.value(), "hello", 5);
    p->post(5 | (uint64_t(1) << 63));
  });
  FifoReceiver* f = t[1]->ringRecv(0);
  for (int i = 0; i < kSteps; ++i) {
    size_t n = 0;
    auto buf = f->acquire(&n);
    REQUIRE(buf.isOk());
    REQUIRE(n == static_cast<size_t>(i * 37 % 4096));
    for (size_t k = 0; k < n; ++k) REQUIRE(buf.value()[k] == static_cast<char>(i & 0xff));
    f->release();
  }
  size_t n = 0;
  auto p = t[1]->p2pRecv(0)->acquire(&n);
  INFO(p.status().message());
  REQUIRE(p.isOk());
  CHECK(n == (5 | (uint64_t(1) << 63)));
  CHECK(std::memcmp(p.value(), "hello", 5) == 0);
  t[1]->p2pRecv(0)->release();
  sender.join();
  CHECK(senderError.empty());

  // Rank 0 aborts: rank 1's ring receive fails naming rank 0 and the connection.
  abortFlags[0] = 1;
  t[0]->abort();
  auto fail = t[1]->ringRecv(0)->acquire(&n);
  REQUIRE_FALSE(fail.isOk());
  CHECK(fail.status().code() == Code::kRemoteError);
  CHECK_THAT(fail.status().message(), Catch::Contains("rank 0: connection to 127.0.0.1:") &&
                                          Catch::Contains("closed by the peer during ring receive"));
  t[0].reset();
  t[1].reset();
}

// Two ranks as threads connected over loopback with twoRankOptions, as
// `adjust` changes them; the test stops here if either could not connect.
struct ConnectedPair {
  std::atomic<uint32_t> abortFlags[2] = {0, 0};
  std::unique_ptr<NetTransport> t[2];
};
void connectPair(ConnectedPair& pair, const std::function<void(NetTransportOptions&)>& adjust) {
  loopbackSocketNet();
  ThreadOob::Shared shared;
  std::string connectErrors[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      ThreadOob oob(shared, r);
      NetTransportOptions o = twoRankOptions(r, &pair.abortFlags[r]);
      adjust(o);
      auto res = NetTransport::connect(oob, o, Deadline::afterMs(10000));
      if (res.isOk()) pair.t[r] = std::move(res).value();
      else connectErrors[r] = res.status().toString();
    });
  for (auto& th : threads) th.join();
  REQUIRE(connectErrors[0].empty());
  REQUIRE(connectErrors[1].empty());
}

// Ring sends over the built-in socket module may leave their payload in the
// user's buffer (FifoSender::postReference): the proxy sends it from there.
// The bytes arrive, waitDrained() says when the buffer may change, a
// connector that takes no references (point-to-point) refuses such a step,
// and after a failure abandonReferences() returns once the proxy has let go.
TEST_CASE("net transport: ring steps by reference are sent from the caller's memory", "[net]") {
  ConnectedPair pair;
  connectPair(pair, [](NetTransportOptions& o) { o.sendFromBuffers = true; });  // as the host path's
  auto& t = pair.t;
  FifoSender* send = t[0]->ringSend(0);
  FifoReceiver* recv = t[1]->ringRecv(0);
  REQUIRE(send->takesReferences());
  CHECK_FALSE(t[0]->p2pSend(1)->takesReferences());

  // More steps than the FIFO holds, each from its own part of one buffer;
  // the step buffers themselves are filled with something else.
  constexpr int kSteps = 12;
  std::vector<unsigned char> user(kSteps * 4096);
  for (size_t i = 0; i < user.size(); ++i) user[i] = static_cast<unsigned char>(i * 7 + 3);
  std::string sendError;
  std::thread sender([&] {
    for (int i = 0; i < kSteps; ++i) {
      auto buf = send->acquire();
      if (!buf.isOk()) { sendError = buf.status().toString(); return; }
      std::memset(buf.value(), 0xEE, 4096);
      send->postReference(user.data() + i * 4096, 4000 + i);
    }
    Status drained = send->waitDrained();
    if (!drained.isOk()) sendError = drained.toString();
  });
  for (int i = 0; i < kSteps; ++i) {
    size_t n = 0;
    auto buf = recv->acquire(&n);
    INFO("step " << i << ": " << buf.status().message());
    REQUIRE(buf.isOk());
    REQUIRE(n == static_cast<size_t>(4000 + i));
    CHECK(std::memcmp(buf.value(), user.data() + i * 4096, n) == 0);
    recv->release();
  }
  sender.join();
  CHECK(sendError.empty());
  CHECK(send->drained());

  SECTION("a connector that takes no references fails the step, naming why") {
    FifoSender* p2p = t[0]->p2pSend(1);
    REQUIRE(p2p->acquire().isOk());
    p2p->postReference(user.data(), 100);  // misuse: the proxy must not follow it
    Deadline until = Deadline::afterMs(5000);
    while (!p2p->peerAborted() && !until.expired()) usleep(1000);
    CHECK(p2p->peerAborted());
    CHECK_THAT(t[0]->failure(), Catch::Contains("by reference on a connector that takes none"));
  }
  SECTION("a connector that takes no references still sends what was posted before its sender aborted") {
    FifoSender* p2p = t[0]->p2pSend(1);
    auto buf = p2p->acquire();
    REQUIRE(buf.isOk());
    std::memcpy(buf.value(), "bye", 3);
    p2p->post(3 | kStepLast);
    p2p->abort();
    size_t n = 0;
    auto got = t[1]->p2pRecv(0)->acquire(&n);
    INFO(got.status().message());
    REQUIRE(got.isOk());
    CHECK(n == (3 | kStepLast));
    CHECK(std::memcmp(got.value(), "bye", 3) == 0);
  }
  SECTION("after a failure the proxy lets go of the steps it has not sent") {
    // The receiver takes nothing: steps by reference stay posted once the
    // sockets are full, then the sender gives up.
    std::vector<char> page(4096, 'x');
    uint64_t lastPost = nowNs();
    for (int posted = 0; posted < 100000 && nowNs() - lastPost < 200'000'000;) {
      if (send->tryAcquire() == nullptr) {
        usleep(1000);
        continue;
      }
      send->postReference(page.data(), page.size());
      ++posted;
      lastPost = nowNs();
    }
    REQUIRE_FALSE(send->drained());  // 200 ms without a free step: the sockets are full
    CHECK(send->abandonReferences(10000));
    CHECK(send->peerAborted());
    // The schedule's own giving up is no network failure: nothing to name.
    CHECK(t[0]->failure().empty());
  }
  t[0].reset();
  t[1].reset();
}

// Regression: the socket module holds 32 requests per connection. With
// deeper FIFOs (PLAIT_SHM_STEPS=64; a point-to-point step takes two
// requests) the proxy posted until the module said "full" and then returned
// before testing what it had posted: no step ever completed, both ranks
// waited for each other's data for ever. The sender posts every step before
// the receiver takes one, so the proxy must complete steps while it cannot
// post more.
TEST_CASE("net transport: FIFOs deeper than the network's request limit still complete", "[net]") {
  ConnectedPair pair;
  connectPair(pair, [](NetTransportOptions& o) {
    o.ring = FifoShape{kMaxFifoSteps, 4096};
    o.p2p = FifoShape{kMaxFifoSteps, 4096};
  });
  auto& t = pair.t;

  for (FifoSender* f : {t[0]->ringSend(0), t[0]->p2pSend(1)}) {
    for (int i = 0; i < kMaxFifoSteps; ++i) {  // the whole FIFO, before anything is received
      auto buf = f->acquire();
      REQUIRE(buf.isOk());
      std::memset(buf.value(), i + 1, 100);
      f->post(100);
    }
  }
  for (FifoReceiver* f : {t[1]->ringRecv(0), t[1]->p2pRecv(0)}) {
    for (int i = 0; i < kMaxFifoSteps; ++i) {
      size_t n = 0;
      auto buf = f->acquire(&n);
      INFO("step " << i << ": " << buf.status().message());
      REQUIRE(buf.isOk());
      REQUIRE(n == 100);
      CHECK(buf.value()[0] == static_cast<char>(i + 1));
      CHECK(buf.value()[99] == static_cast<char>(i + 1));
      f->release();
    }
  }
  t[0].reset();
  t[1].reset();
}

// Regression: with more channels than ranks (two nodes of one rank, three
// or more channels; the device path's 16 channels always), the sender took
// ring channel `nranks` for a point-to-point connector and connected it to
// the receiver's point-to-point listener: one listener waited for ever and
// init timed out ("timed out making network connections with rank(s) 1
// (from)"). Each channel's steps must arrive on that channel.
TEST_CASE("net transport: more ring channels than ranks connect each channel to its own receiver", "[net]") {
  loopbackSocketNet();
  constexpr int kChannels = 5;
  ThreadOob::Shared shared;
  std::atomic<uint32_t> abortFlags[2] = {0, 0};
  std::unique_ptr<NetTransport> t[2];
  std::thread threads[2];
  std::string connectErrors[2];
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      ThreadOob oob(shared, r);
      NetTransportOptions o = twoRankOptions(r, &abortFlags[r]);
      o.nChannels = kChannels;
      o.ringPrev.assign(kChannels, 1 - r);
      o.ringNext.assign(kChannels, 1 - r);
      auto res = NetTransport::connect(oob, o, Deadline::afterMs(10000));
      if (res.isOk()) t[r] = std::move(res).value();
      else connectErrors[r] = res.status().toString();
    });
  for (auto& th : threads) th.join();
  REQUIRE(connectErrors[0] == "");
  REQUIRE(connectErrors[1] == "");
  for (int c = 0; c < kChannels; ++c) {
    auto buf = t[0]->ringSend(c)->acquire();
    REQUIRE(buf.isOk());
    std::memset(buf.value(), 'a' + c, 16);
    t[0]->ringSend(c)->post(16 + c);
  }
  auto p2p = t[0]->p2pSend(1)->acquire();
  REQUIRE(p2p.isOk());
  std::memcpy(p2p.value(), "p2p", 3);
  t[0]->p2pSend(1)->post(3 | kStepLast);
  for (int c = kChannels; c-- > 0;) {  // in reverse: no channel may wait on another
    size_t n = 0;
    auto buf = t[1]->ringRecv(c)->acquire(&n);
    REQUIRE(buf.isOk());
    CHECK(n == static_cast<size_t>(16 + c));
    CHECK(buf.value()[0] == static_cast<char>('a' + c));
    t[1]->ringRecv(c)->release();
  }
  size_t n = 0;
  auto got = t[1]->p2pRecv(0)->acquire(&n);
  REQUIRE(got.isOk());
  CHECK(n == (3 | kStepLast));
  CHECK(std::memcmp(got.value(), "p2p", 3) == 0);
  t[1]->p2pRecv(0)->release();
  t[0].reset();
  t[1].reset();
}

// Regression (issue 11, item 2): a network peer forges the size word of a
// point-to-point step. Before the fix the proxy copied it unchanged into the
// receiver's FIFO, and core/p2p.cc acted on the single-copy flag (bit 62) by
// reading a peer-chosen address of a peer-chosen pid — its own pid made it a
// memcpy from any address. Now the receiving proxy refuses any word with a
// flag other than "last step", and the receive fails naming the sender.
TEST_CASE("net transport: a forged step size word fails the receive naming the sender", "[net]") {
  loopbackSocketNet();
  const uint64_t forged = GENERATE(uint64_t(24) | kStepLast | kStepRendezvous,  // single-copy descriptor
                                   uint64_t(64) | (uint64_t(1) << 55));          // an unknown flag
  ThreadOob::Shared shared;
  std::atomic<uint32_t> abortFlags[2] = {0, 0};
  std::unique_ptr<NetTransport> t[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      ThreadOob oob(shared, r);
      auto res = NetTransport::connect(oob, twoRankOptions(r, &abortFlags[r]), Deadline::afterMs(10000));
      if (res.isOk()) t[r] = std::move(res).value();
    });
  for (auto& th : threads) th.join();
  REQUIRE(t[0] != nullptr);
  REQUIRE(t[1] != nullptr);

  // What a hostile sender writes: a descriptor naming the receiver's own
  // process and a low address (0x10 crashed the receiver before the fix).
  struct {
    uint64_t bytes, addr;
    int32_t pid, reserved;
  } descriptor{4096, 0x10, static_cast<int32_t>(getpid()), 0};
  FifoSender* p = t[0]->p2pSend(1);
  auto buf = p->acquire();
  REQUIRE(buf.isOk());
  std::memcpy(buf.value(), &descriptor, sizeof descriptor);
  p->post(forged);

  size_t n = 0;
  auto got = t[1]->p2pRecv(0)->acquire(&n);
  INFO("word " << forged << " delivered as " << n);
  REQUIRE_FALSE(got.isOk());
  CHECK(got.status().code() == Code::kRemoteError);
  CHECK_THAT(got.status().message(), Catch::Contains("rank 0: sent an invalid step size word") &&
                                         Catch::Contains("point-to-point receive"));
  t[0].reset();
  t[1].reset();
}
