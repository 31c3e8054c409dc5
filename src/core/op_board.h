// op_board.h — which collective each local rank is running, so that ranks
// calling different collectives (or the same one with different counts,
// types, ops or roots) fail with an error naming both instead of waiting for
// each other until PLAIT_TIMEOUT.
//
// Each rank owns one cache line in a small shared segment that its local
// peers map: the sequence number of its current collective (counted the same
// way on every rank: NCCL requires all ranks to call collectives in the same
// order) and that collective's arguments. A rank publishes before moving any
// data (a few stores to its own line). Only a rank that is already blocked
// looks at its peers' lines: the wait's slow path calls check() about every
// 100 ms (base/wait.h, WaitCheck), so the check costs nothing while
// operations flow.
//
// Ranks on other hosts are not covered here (they would need a message over
// the network); a mismatch with them still ends at PLAIT_TIMEOUT.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/shm.h"
#include "core/task.h"
#include "plait/status.hpp"

namespace plait {

class Bootstrap;

class OpBoard {
 public:
  // Collective over all ranks of the bootstrap; `localRanks` are the ranks of
  // this host (this rank included). Null board when this rank has no local peer.
  static Result<std::unique_ptr<OpBoard>> create(Bootstrap& bootstrap, const std::vector<int>& localRanks,
                                                 Deadline deadline);

  // Announces collective number `seq` (1, 2, ...) with the task's arguments.
  // Called by the one thread that runs this rank's operations.
  void publish(uint64_t seq, const Task& task);
  // Announces that collectives up to `seq` run as one group batch: peers do
  // not compare arguments against it.
  void publishBatch(uint64_t seq);
  // kInvalidUsage naming both ranks when a local peer runs the same
  // collective number with other arguments or another collective; OK
  // otherwise (including peers at another number: they may just be slow).
  // Thread-safe; reads only.
  Status check() const;
  // Where this rank and its local peers are, grouped: "ranks 0, 2 wait in
  // AllGather #13 (count 4, float); rank 1 is at AllReduce #12 (count 4,
  // float, sum)" — for a timeout's error: who never arrived, who runs
  // something else. Thread-safe; reads only.
  std::string positions() const;
  // This rank aborted or destroyed its communicator: peers that later find
  // its process gone know it left on purpose rather than died.
  void markDeparted();
  bool peerDeparted(int rank) const;

  struct alignas(64) Line {
    std::atomic<uint64_t> version{0};  // odd while the owner writes
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<uint32_t> coll{0};
    std::atomic<uint32_t> type{0};
    std::atomic<uint32_t> opKind{0};
    std::atomic<int32_t> root{0};
    std::atomic<uint32_t> departed{0};
  };

 private:
  struct Snapshot {
    uint64_t seq = 0;
    uint64_t count = 0;
    uint32_t coll = 0, type = 0, opKind = 0;
    int32_t root = 0;
    bool operator==(const Snapshot&) const = default;
  };
  static bool read(const Line& line, Snapshot* out);
  static std::string describe(const Snapshot& s);

  int rank_ = 0;
  SharedSegment own_;
  std::vector<SharedSegment> peers_;
  std::vector<std::pair<int, const Line*>> peerLines_;  // (rank, its line)
};

}  // namespace plait
