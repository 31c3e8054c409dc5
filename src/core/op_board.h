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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/shm.h"
#include "core/task.h"
#include "plait/status.hpp"

namespace plait {

class Bootstrap;

// A collective as announced: its number and arguments.
struct OpRecord {
  uint64_t seq = 0;  // 0: before the first collective
  uint64_t count = 0;
  uint32_t coll = 0, type = 0, opKind = 0;
  int32_t root = 0;
  bool operator==(const OpRecord&) const = default;
  // A group's point-to-point batch: its collectives are not compared.
  bool isBatch() const;
  // "AllReduce #12 (count 4, float, sum)".
  std::string describe() const;
};

// Where one rank is, for a report: its collective number and what to say.
struct RankPosition {
  int rank = -1;
  uint64_t seq = 0;
  std::string text;  // "AllReduce #12 (...)", "gone (...)", "no answer (...)"
};
// Groups ranks that say the same, furthest first: "rank 1 (host b, pid 7)
// is at AllReduce #12 (...); ranks 0 (this one), 2 are at AllGather #13
// (...)". `who(rank)` is appended to the ranks of groups without `self`
// (the odd ones out), up to 8 per group.
std::string formatPositions(std::vector<RankPosition> positions, int self,
                            const std::function<std::string(int)>& who);

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
  // Where this rank and its local peers are (for a timeout's error: who
  // never arrived, who runs something else). Thread-safe; reads only.
  std::vector<RankPosition> positions() const;
  // Registered buffers (core/direct.h): this rank registered its first
  // buffer while `seq` collectives had started (its collective number
  // then). Later registrations change nothing. Called by the thread that
  // runs this rank's operations (never concurrently with publish()).
  void noteRegistration(uint64_t seq);
  // The first local peer that has not yet announced collective `seq` (or a
  // later one), or -1 when none (reads only; never blocks).
  int firstBehind(uint64_t seq) const;
  // The number a local peer announced last (0 for this rank or a non-peer).
  uint64_t seqOf(int rank) const;
  // Whether this rank or a local peer registered its first buffer at
  // collective number `seq` or earlier. Once firstBehind(seq + 1) is -1, the
  // answer is the same on every rank: a peer's registration at number
  // <= seq came before it announced seq + 1.
  bool anyRegisteredBy(uint64_t seq) const;

  // This rank aborted or destroyed its communicator: peers that later find
  // its process gone know it left on purpose rather than died.
  void markDeparted();
  bool peerDeparted(int rank) const;

  // One rank's announcement, written by its owner only (a seqlock).
  struct alignas(64) Line {
    std::atomic<uint64_t> version{0};  // odd while the owner writes
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<uint32_t> coll{0};
    std::atomic<uint32_t> type{0};
    std::atomic<uint32_t> opKind{0};
    std::atomic<int32_t> root{0};
    std::atomic<uint32_t> departed{0};
    // noteRegistration()'s number; kNever until then. Read by peers after
    // they saw a later seq (ordered by write()'s release fence).
    std::atomic<uint64_t> firstRegistration{kNever};
  };
  static constexpr uint64_t kNever = UINT64_MAX;
  static void write(Line& line, uint64_t seq, const Task& task);
  static void writeBatch(Line& line, uint64_t seq);
  // False while the owner is writing (try again later).
  static bool read(const Line& line, OpRecord* out);
  // The text of one line for positions().
  static std::string positionText(const Line& line);

 private:
  int rank_ = 0;
  SharedSegment own_;
  std::vector<SharedSegment> peers_;
  std::vector<std::pair<int, const Line*>> peerLines_;  // (rank, its line)
};

}  // namespace plait
