// The UCX module (libplait-net-ucx.so) over loopback TCP inside one process:
// receives must report the size of what arrived, also when the message was
// already there (UCX's unexpected queue) when the receive was posted.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/clock.h"
#include "transport/net/net_plugin.h"
#include "transport/net_test_util.h"

using namespace plait;

namespace {

// Null (and the test skips) when UCX cannot run over loopback TCP here.
const PlaitNetV8* loopbackUcx() {
  static const PlaitNetV8* net = []() -> const PlaitNetV8* {
    setenv("PLAIT_SOCKET_IFNAME", "lo", 1);
    setenv("UCX_TLS", "tcp", 1);
    auto api = loadNetModule(PLAIT_UCX_MODULE, nullptr);
    REQUIRE(api.isOk());
    int ndev = 0;
    if (api.value()->init(netLogger) != 0 || api.value()->devices(&ndev) != 0 || ndev < 1) return nullptr;
    return api.value();
  }();
  return net;
}

// Gives UCX's worker time to take in what arrived: accept() on a listen comm
// that nobody connects to progresses the worker and returns at once.
void progressFor(const PlaitNetV8& net, int ms) {
  char handle[kNetHandleBytes];
  void* listenComm = nullptr;
  REQUIRE(net.listen(0, handle, &listenComm) == 0);
  for (Deadline d = Deadline::afterMs(ms); !d.expired();) {
    void* comm = nullptr;
    PlaitNetDeviceHandle* dh = nullptr;
    if (net.accept(listenComm, &comm, &dh) != 0 || comm != nullptr) FAIL("accept on an idle listen comm");
  }
  REQUIRE(net.closeListen(listenComm) == 0);
}

}  // namespace

// Regression: 2 nodes x 1 rank, NCCL_NET=UCX UCX_TLS=tcp, reduce_perf failed
// with "FIFO step holds 0 bytes, expected 8": the root's proxy posted a
// receive after the 8-byte step had arrived, UCX completed it in place and
// the module reported 0 bytes.
TEST_CASE("ucx net: a receive posted after its message arrived reports the message's size", "[net][ucx]") {
  const PlaitNetV8* netp = loopbackUcx();
  if (netp == nullptr) {
    WARN("skipped: UCX has no usable loopback TCP device here");
    return;
  }
  const PlaitNetV8& net = *netp;
  void *sc, *rc;
  connectPair(net, &sc, &rc);
  // Eager sizes (the unexpected-queue path) and one rendezvous-sized message.
  const std::vector<int> sizes = {8, 0, 1, 4, 100, 4096, 8191, 65536, 1 << 20};
  std::vector<std::vector<char>> out;
  std::vector<void*> sreq;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(sizes[i]);
    for (int k = 0; k < sizes[i]; ++k) out[i][k] = static_cast<char>(k * 13 + i);
    void* s = nullptr;
    REQUIRE(net.isend(sc, out[i].data(), sizes[i], 0x100, nullptr, &s) == 0);
    REQUIRE(s != nullptr);
    sreq.push_back(s);
  }
  progressFor(net, 200);  // the messages are now waiting, unexpected
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<char> in(1 << 21, 0);
    void* data = in.data();
    int cap = static_cast<int>(in.size()), tag = 0x100;
    void* mh = nullptr;
    void* r = nullptr;
    REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &mh, &r) == 0);
    REQUIRE(r != nullptr);
    INFO("message " << i << " of " << sizes[i] << " bytes");
    // The send is tested meanwhile (a rendezvous send progresses only then)
    // and, being complete afterwards, freed: it is not tested again.
    REQUIRE(waitRequest(net, r, sreq[i]) == sizes[i]);
    CHECK(std::memcmp(in.data(), out[i].data(), sizes[i]) == 0);
  }
  net.closeSend(sc);
  net.closeRecv(rc);
}
