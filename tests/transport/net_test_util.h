// net_test_util.h — driving a net.h table by hand in tests: connect a
// send/recv comm pair over device 0, wait for a request; two NetTransport
// ranks as threads of one process.
#pragma once

#include <barrier>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "transport/net/net.h"
#include "transport/net/net_plugin.h"
#include "transport/net/net_transport.h"
#include "transport/oob.h"

namespace plait {

// Connects one send comm to one recv comm over device 0, driving both sides.
inline void connectPair(const PlaitNetV8& net, void** sendComm, void** recvComm) {
  char handle[kNetHandleBytes];
  void* listenComm = nullptr;
  REQUIRE(net.listen(0, handle, &listenComm) == 0);
  *sendComm = *recvComm = nullptr;
  PlaitNetDeviceHandle* dh = nullptr;
  Deadline d = Deadline::afterMs(5000);
  while ((*sendComm == nullptr || *recvComm == nullptr) && !d.expired()) {
    if (*sendComm == nullptr) REQUIRE(net.connect(0, handle, sendComm, &dh) == 0);
    if (*recvComm == nullptr) REQUIRE(net.accept(listenComm, recvComm, &dh) == 0);
  }
  REQUIRE(*sendComm != nullptr);
  REQUIRE(*recvComm != nullptr);
  REQUIRE(net.closeListen(listenComm) == 0);
}

// Tests a request until done; returns the size (or -1 on error). `other`,
// if not null, is tested meanwhile (the send side progresses only when
// tested) and waited for too once `req` is done (so it is freed); an error
// on `other` just stops testing it.
inline int waitRequest(const PlaitNetV8& net, void* req, void* other = nullptr) {
  Deadline d = Deadline::afterMs(10000);
  int result = -2;
  while (!d.expired()) {
    if (other != nullptr) {
      int otherDone = 0;
      if (net.test(other, &otherDone, nullptr) != 0 || otherDone) other = nullptr;
    }
    if (result == -2) {
      int done = 0, size = 0;
      if (net.test(req, &done, &size) != 0) return -1;
      if (done) result = size;
    }
    if (result != -2 && other == nullptr) return result;
  }
  FAIL("request never completed");
  return -1;
}

// The socket transport on the loopback interface, initialised once.
inline const PlaitNetV8& loopbackSocketNet() {
  static const PlaitNetV8* net = [] {
    setenv("PLAIT_SOCKET_IFNAME", "lo", 1);
    const PlaitNetV8* n = socketNet();
    REQUIRE(n->init(netLogger) == 0);
    return n;
  }();
  return *net;
}

// Two ranks as threads.
class ThreadOob final : public OobExchange {
 public:
  struct Shared {
    std::mutex mu;
    std::barrier<> sync{2};
    std::vector<char> data;
  };
  ThreadOob(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int nranks() const override { return 2; }
  Status allGather(void* data, size_t bytes, Deadline) override {
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      s_.data.resize(bytes * 2);
      std::memcpy(&s_.data[bytes * rank_], static_cast<char*>(data) + bytes * rank_, bytes);
    }
    s_.sync.arrive_and_wait();
    std::memcpy(data, s_.data.data(), bytes * 2);
    s_.sync.arrive_and_wait();
    return Status::ok();
  }
  Status barrier(Deadline) override {
    s_.sync.arrive_and_wait();
    return Status::ok();
  }

 private:
  Shared& s_;
  int rank_;
};

// Options of one of two ranks, each remote to the other.
inline NetTransportOptions twoRankOptions(int rank, const std::atomic<uint32_t>* abortFlag) {
  NetTransportOptions o;
  o.nChannels = 1;
  o.ring = FifoShape{4, 4096};
  o.p2p = FifoShape{4, 4096};
  o.ringPrev = {1 - rank};
  o.ringNext = {1 - rank};
  o.remote = {rank != 0, rank != 1};
  o.abortFlag = abortFlag;
  o.waitTimeoutMs = 10000;
  return o;
}


}  // namespace plait
