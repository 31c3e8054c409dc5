// A network peer that forges the size word of a point-to-point step (issue
// 11, item 2), end to end: two ranks on two pretend hosts (PLAIT_HOSTID)
// over TCP on loopback; the sender's network plugin sets the single-copy
// flag on its 24-byte message, whose payload is a descriptor naming the
// receiver's own pid and address 0x10. On b3b9f8d the receiver acted on it
// (cmaRead of its own pid was a memcpy from 0x10) and died of SIGSEGV; now
// its receive fails with ncclRemoteError naming rank 1.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/config.h"
#include "forged_peer.h"

using namespace plait;

namespace {

using test::p2pTask;

// Rank 0, on its own pretend host.
int receiver(const ncclUniqueId& id, int out) {
  setenv("PLAIT_HOSTID", "forge-host-a", 1);
  config::resetAll();
  return test::receiveFromRank1(id, out);
}

// Rank 1: sends the forged descriptor, then waits on a receive rank 0 never
// sends, so the connection stays open until rank 0 has failed.
int sender(const ncclUniqueId& id, pid_t victim) {
  setenv("PLAIT_HOSTID", "forge-host-b", 1);
  setenv("NCCL_NET_PLUGIN", PLAIT_FORGE_PLUGIN, 1);
  config::resetAll();
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  struct {
    uint64_t bytes, addr;
    int32_t pid, reserved;
  } d{4096, 0x10, static_cast<int32_t>(victim), 0};
  static_assert(sizeof d == 24);
  if (!comm.runGroup({p2pTask(CollType::kSend, &d, sizeof d, 0)}).isOk()) return 1;
  char one = 0;
  (void)comm.runGroup({p2pTask(CollType::kRecv, &one, 1, 0)});
  return 0;
}

}  // namespace

TEST_CASE("a forged single-copy flag over TCP fails the receive naming the sender", "[p2p][forks]") {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("PLAIT_TIMEOUT", "10", 1);
  setenv("PLAIT_INIT_TIMEOUT", "20", 1);
  config::resetAll();
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const test::ForgedPair r = test::runForgedPair(id.value(), receiver, sender);
  const std::string& text = r.text;
  const int st0 = r.status0, st1 = r.status1;
  INFO("rank 0 status " << st0 << ", rank 1 status " << st1 << ": " << text);
  REQUIRE(WIFEXITED(st0));  // b3b9f8d: killed by SIGSEGV
  CHECK_THAT(text, Catch::StartsWith("RemoteError") && Catch::Contains("rank 1: sent an invalid step size word") &&
                       Catch::Contains("point-to-point receive"));
  CHECK(WIFEXITED(st1));
}
