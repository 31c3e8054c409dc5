// A local peer that forges a single-copy descriptor (issue 11, item 2, the
// point-to-point layer). Two forked ranks on one host; rank 1 writes a step
// straight into rank 0's point-to-point FIFO (it has rank 0's segment mapped,
// as every local sender has): size word 24 | last | single-copy, descriptor
// naming rank 0's own pid and address 0x10. On b3b9f8d rank 0 acted on it
// (cmaRead of its own pid was a memcpy from 0x10: SIGSEGV). Now rank 0's
// receive fails with ncclRemoteError naming rank 1 — because single copy was
// not agreed (PLAIT_P2P_CMA=0) or, when it was, because the pid is not rank 1's.
// The same for a forged write request (kStepPut, Gather's blocks), which rank
// 0 would answer with its buffer's address.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/config.h"
#include "forged_peer.h"
#include "transport/fifo.h"
#include "transport/line_fifo.h"

using namespace plait;

namespace {

using test::p2pTask;

int forger(const ncclUniqueId& id, pid_t victim) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  FifoControl* ctrl = nullptr;
  if (const int code = test::untouchedFifoFromRank1(victim, &ctrl); code != 0) return code;
  const test::ForgedDescriptor d{4096, 0x10, static_cast<int32_t>(victim), 0};
  std::memcpy(reinterpret_cast<char*>(ctrl) + kFifoControlBytes, &d, sizeof d);
  ctrl->stepBytes[0] = sizeof d | kStepLast | (std::getenv("FORGE_PUT") ? kStepPut : kStepRendezvous);
  AtomicRef<uint64_t>(ctrl->tail).store(1, mo::release);
  char one = 0;
  (void)comm.runGroup({p2pTask(CollType::kRecv, &one, 1, 0)});  // until rank 0 is gone
  return 0;
}

}  // namespace

TEST_CASE("a local peer's forged single-copy descriptor fails the receive naming it", "[p2p][forks]") {
  struct Case {
    const char* cma;
    const char* why;
  };
  const Case c = GENERATE(Case{"0", "cross-memory attach was not agreed"}, Case{"1", "not that rank's process"});
  const bool put = GENERATE(false, true);  // a read's descriptor, a write's request
  setenv("PLAIT_P2P_CMA", c.cma, 1);
  if (put) setenv("FORGE_PUT", "1", 1);
  setenv("PLAIT_NCHANNELS", "1", 1);
  setenv("PLAIT_TIMEOUT", "10", 1);
  setenv("PLAIT_INIT_TIMEOUT", "20", 1);
  for (const auto& [name, value] : test::kForgedShapes) setenv(name, value, 1);
  for (const char* v : {"PLAIT_HOSTID", "NCCL_HOSTID"}) unsetenv(v);
  config::resetAll();
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const test::ForgedPair r = test::runForgedPair(id.value(), test::receiveFromRank1, forger);
  const std::string& text = r.text;
  const int st0 = r.status0, st1 = r.status1;
  unsetenv("PLAIT_P2P_CMA");
  unsetenv("FORGE_PUT");
  unsetenv("PLAIT_NCHANNELS");
  for (const auto& shape : test::kForgedShapes) unsetenv(shape.first);
  config::resetAll();
  INFO("PLAIT_P2P_CMA=" << c.cma << (put ? ", write request" : ", read descriptor") << ": rank 0 status " << st0 << ", rank 1 status " << st1 << ": " << text);
  REQUIRE(WIFEXITED(st0));  // b3b9f8d: killed by SIGSEGV
  CHECK(WIFEXITED(st1));
  CHECK(WEXITSTATUS(st1) == 0);  // 2 or 3: the forger could not find the FIFO
  CHECK_THAT(text, Catch::StartsWith("RemoteError") &&
                       Catch::Contains("rank 1 sent a single-copy descriptor that rank 0 refuses") &&
                       Catch::Contains(c.why));
}
