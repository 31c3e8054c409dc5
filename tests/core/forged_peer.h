// forged_peer.h — what the forged-step tests share: rank 0 receives from
// rank 1 in one forked process while a hostile rank 1 runs in another, and
// the test reads rank 0's status text and both exit statuses.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "transport/fifo.h"
#include "transport/line_fifo.h"

namespace plait::test {

inline Task p2pTask(CollType coll, void* buf, size_t bytes, int peer) {
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
inline int receiveFromRank1(const ncclUniqueId& id, int out) {
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

// Where this process mapped the shared segment created by `pid` (null if none).
inline char* mappingOf(pid_t pid) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = "/dev/shm/plait-" + std::to_string(pid) + "-";
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return reinterpret_cast<char*>(std::stoull(line, nullptr, 16));
  return nullptr;
}

// Rank 0's point-to-point FIFO from rank 1, by ShmTransport's layout for two
// local ranks, one channel and the shapes kForgedShapes sets.
inline FifoControl* p2pFifoFromRank1(char* base) {
  auto align = [](size_t v) { return (v + 4095) / 4096 * 4096; };
  const size_t ring = align(FifoShape{8, 128 << 10}.totalBytes());
  const size_t mesh = align(FifoShape{4, 32 << 10}.totalBytes());
  const size_t line = align(sizeof(LineFifoMemory));
  const size_t p2p = align(FifoShape{8, 64 << 10}.totalBytes());
  return reinterpret_cast<FifoControl*>(base + 1 * ring + 2 * mesh + 4 * line + 1 * p2p);  // two line FIFOs per sender
}

// For rank 1 (once initialised): rank 0's point-to-point FIFO from it, in
// *ctrl, while nothing was sent through it yet (the layout guess is right
// only on an untouched FIFO). Returns 0, or an exit code: 2 no mapping of
// rank 0's segment, 3 the FIFO was used.
inline int untouchedFifoFromRank1(pid_t rank0, FifoControl** ctrl) {
  char* base = mappingOf(rank0);
  if (base == nullptr) return 2;
  *ctrl = p2pFifoFromRank1(base);
  return AtomicRef<uint64_t>((*ctrl)->tail).load(mo::acquire) == 0 ? 0 : 3;
}

// A single-copy descriptor as core/p2p_batch.cc lays it out.
struct ForgedDescriptor {
  uint64_t bytes, addr;
  int32_t pid, reserved;
};

// The FIFO shapes p2pFifoFromRank1 assumes (the defaults depend on the cores the ranks have).
inline constexpr std::pair<const char*, const char*> kForgedShapes[] = {
    {"PLAIT_SHM_STEPS", "8"},          {"PLAIT_SHM_STEP_BYTES", "128K"},     {"PLAIT_SHM_MESH_STEPS", "4"},
    {"PLAIT_SHM_MESH_STEP_BYTES", "32K"}, {"PLAIT_SHM_P2P_STEPS", "8"},      {"PLAIT_SHM_P2P_STEP_BYTES", "64K"}};

struct ForgedPair {
  std::string text;  // rank 0's status
  int status0 = 0;   // waitpid statuses
  int status1 = 0;
};

// Forks rank 0 (receiver(id, fd) writes its status text to fd) and rank 1
// (attacker(id, rank 0's pid)), waits for rank 0, then up to 20 s for rank 1
// (killed after that).
inline ForgedPair runForgedPair(const ncclUniqueId& id, const std::function<int(const ncclUniqueId&, int)>& receiver,
                                const std::function<int(const ncclUniqueId&, pid_t)>& attacker) {
  ForgedPair r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const pid_t rank0 = fork();
  if (rank0 == 0) {
    close(fds[0]);
    _exit(receiver(id, fds[1]));
  }
  close(fds[1]);
  const pid_t rank1 = fork();
  if (rank1 == 0) _exit(attacker(id, rank0));
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) r.text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(rank0, &r.status0, 0);
  const Deadline until = Deadline::afterMs(20000);
  while (waitpid(rank1, &r.status1, WNOHANG) == 0) {
    if (until.expired()) {
      kill(rank1, SIGKILL);
      waitpid(rank1, &r.status1, 0);
      break;
    }
    usleep(10000);
  }
  return r;
}

}  // namespace plait::test
