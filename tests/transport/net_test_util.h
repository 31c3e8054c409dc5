// net_test_util.h — driving a net.h table by hand in tests: connect a
// send/recv comm pair over device 0, wait for a request.
#pragma once

#include <catch2/catch.hpp>

#include "base/clock.h"
#include "transport/net/net.h"

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

}  // namespace plait
