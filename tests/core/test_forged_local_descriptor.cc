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
#include <fstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "forged_peer.h"
#include "transport/fifo.h"
#include "transport/line_fifo.h"

using namespace plait;

namespace {

using test::p2pTask;

// Where this process mapped the shared segment created by `pid` (null if none).
char* mappingOf(pid_t pid) {
  std::ifstream maps("/proc/self/maps");
  const std::string name = "/dev/shm/plait-" + std::to_string(pid) + "-";
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return reinterpret_cast<char*>(std::stoull(line, nullptr, 16));
  return nullptr;
}

// Rank 0's point-to-point FIFO from rank 1, by ShmTransport's layout for two
// local ranks, one channel and the shapes the test case sets.
FifoControl* p2pFifoFromRank1(char* base) {
  auto align = [](size_t v) { return (v + 4095) / 4096 * 4096; };
  const size_t ring = align(FifoShape{8, 128 << 10}.totalBytes());
  const size_t mesh = align(FifoShape{4, 32 << 10}.totalBytes());
  const size_t line = align(sizeof(LineFifoMemory));
  const size_t p2p = align(FifoShape{8, 64 << 10}.totalBytes());
  return reinterpret_cast<FifoControl*>(base + 1 * ring + 2 * mesh + 4 * line + 1 * p2p);  // two line FIFOs per sender
}

int forger(const ncclUniqueId& id, pid_t victim) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  char* base = mappingOf(victim);
  if (base == nullptr) return 2;
  FifoControl* ctrl = p2pFifoFromRank1(base);
  const uint64_t tail = AtomicRef<uint64_t>(ctrl->tail).load(mo::acquire);
  if (tail != 0) return 3;  // nothing was sent yet: the layout guess is right only on an untouched FIFO
  struct {
    uint64_t bytes, addr;
    int32_t pid, reserved;
  } d{4096, 0x10, static_cast<int32_t>(victim), 0};
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
  // The shapes p2pFifoFromRank1 assumes (the defaults depend on the cores the ranks have).
  const std::pair<const char*, const char*> shapes[] = {
      {"PLAIT_SHM_STEPS", "8"},      {"PLAIT_SHM_STEP_BYTES", "128K"},    {"PLAIT_SHM_MESH_STEPS", "4"},
      {"PLAIT_SHM_MESH_STEP_BYTES", "32K"}, {"PLAIT_SHM_P2P_STEPS", "8"}, {"PLAIT_SHM_P2P_STEP_BYTES", "64K"}};
  for (const auto& [name, value] : shapes) setenv(name, value, 1);
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
  for (const auto& shape : shapes) unsetenv(shape.first);
  config::resetAll();
  INFO("PLAIT_P2P_CMA=" << c.cma << (put ? ", write request" : ", read descriptor") << ": rank 0 status " << st0 << ", rank 1 status " << st1 << ": " << text);
  REQUIRE(WIFEXITED(st0));  // b3b9f8d: killed by SIGSEGV
  CHECK(WIFEXITED(st1));
  CHECK(WEXITSTATUS(st1) == 0);  // 2 or 3: the forger could not find the FIFO
  CHECK_THAT(text, Catch::StartsWith("RemoteError") &&
                       Catch::Contains("rank 1 sent a single-copy descriptor that rank 0 refuses") &&
                       Catch::Contains(c.why));
}
