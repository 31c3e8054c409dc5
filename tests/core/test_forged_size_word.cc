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

#include "base/clock.h"
#include "base/config.h"
#include "core/bootstrap.h"
#include "core/comm.h"

using namespace plait;

namespace {

Task p2pTask(CollType coll, void* buf, size_t bytes, int peer) {
  Task t;
  t.coll = coll;
  t.sendbuff = buf;
  t.recvbuff = buf;
  t.count = bytes;
  t.type = ncclInt8;
  t.peer = peer;
  return t;
}

// Rank 0: receives 4096 bytes from rank 1; writes its status text to `out`.
int receiver(const ncclUniqueId& id, int out) {
  setenv("PLAIT_HOSTID", "forge-host-a", 1);
  config::resetAll();
  Communicator comm(0, 2);
  Status s = comm.init(id, CommOptions{});
  if (s.isOk()) {
    std::vector<char> buf(4096, 0);
    s = comm.runGroup({p2pTask(CollType::kRecv, buf.data(), buf.size(), 1)});
  }
  const std::string text = s.toString();
  (void)!write(out, text.c_str(), text.size());
  return 0;
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
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t rank0 = fork();
  if (rank0 == 0) {
    close(fds[0]);
    _exit(receiver(id.value(), fds[1]));
  }
  close(fds[1]);
  const pid_t rank1 = fork();
  if (rank1 == 0) _exit(sender(id.value(), rank0));

  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int st0 = 0, st1 = 0;
  waitpid(rank0, &st0, 0);
  const Deadline until = Deadline::afterMs(20000);
  while (waitpid(rank1, &st1, WNOHANG) == 0) {
    if (until.expired()) {
      kill(rank1, SIGKILL);
      waitpid(rank1, &st1, 0);
      break;
    }
    usleep(10000);
  }
  INFO("rank 0 status " << st0 << ", rank 1 status " << st1 << ": " << text);
  REQUIRE(WIFEXITED(st0));  // b3b9f8d: killed by SIGSEGV
  CHECK_THAT(text, Catch::StartsWith("RemoteError") && Catch::Contains("rank 1: sent an invalid step size word") &&
                       Catch::Contains("point-to-point receive"));
  CHECK(WIFEXITED(st1));
}
