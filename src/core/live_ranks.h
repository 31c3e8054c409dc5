// live_ranks.h — collectives that go on past a dead rank (issue 15, item 7;
// design and semantics: docs/plans/live_ranks.md, README "When things go
// wrong").
//
// Opt-in with PLAIT_LIVE_RANKS=1 on every rank (agreed at init). The
// communicator keeps its size and numbering and gains a live mask and an
// epoch. When a collective fails because a rank is gone (its process died,
// its connection closed, or it stopped answering until the deadline), every
// survivor:
//   1. revokes the communicator the call ran on, so that the others' waits
//      end at once;
//   2. agrees on the new mask over the original communicator's bootstrap:
//      each sends the lowest rank it believes alive (the coordinator) its
//      suspects (local ranks whose process is gone) and the number of the
//      collective it failed in; the coordinator waits for every rank not
//      known dead (a rank that does not answer by the deadline is counted
//      dead), then sends every survivor the mask, the first collective to run
//      again and the id of the survivors' communicator;
//   3. creates that communicator (ranks in the original order);
//   4. runs the failed collective again over the survivors from a copy of
//      its input taken when it started. A survivor that had already finished
//      collectives the others failed in (a rank can run ahead: a Broadcast's
//      root, say, finishes once its sends are in the FIFOs) runs those again
//      too, for the others, into a scratch buffer: its own results stand.
// The call then returns ncclSuccess; plaitCommLastCall says it ran again and
// over how many ranks. Later collectives run over the survivors directly.
//
// Results over the survivors L: reductions over L's inputs (Avg divides by
// |L|); AllGather, AlltoAll and a Gather's output leave a dead rank's slot
// as it was (in the call that lost the rank, that slot may hold part of
// what the rank sent before it died: undefined); ReduceScatter's blocks of
// dead ranks are dropped; a Broadcast,
// Reduce, Gather or Scatter whose root is dead, and a Send or Recv whose
// peer is dead, fail with ncclRemoteError naming it (nothing to fall back
// to). Limits: host buffers, one operation at a time (a group of several
// operations is refused once a rank was lost); a Send or Recv that fails
// returns its error (the next collective recovers); split and the other
// calls that need every rank of the communicator time out after a loss
// (ncclCommShrink needs only the survivors); a coordinator that dies
// during the agreement is replaced by the next lowest rank (the survivors it
// told already fail to create the communicator it named, whose root it
// hosted, and agree again); a rank that dies between the agreement and the
// survivors' communicator is noticed by that communicator's init deadline
// (PLAIT_TIMEOUT); a rank
// more collectives ahead than its kept inputs reach (the last two always,
// up to kMaxHistory while they fit in PLAIT_LIVE_HISTORY_BYTES) fails the
// recovery, naming the call. Cost when nothing dies: a copy of each
// collective's input.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "core/task.h"
#include "nccl.h"
#include "plait/status.hpp"

namespace plait {

class Communicator;
struct CommOptions;

// PLAIT_LIVE_RANKS (0/1): whether this process asks for the live-ranks mode;
// InvalidArgument naming the setting for another value, or for a negative
// PLAIT_LIVE_AGREE_MS or PLAIT_LIVE_HISTORY_BYTES.
Result<bool> liveRanksRequested();

// What the last operation on a live-ranks communicator did (its report is
// overwritten by the next).
struct LiveCallReport {
  uint64_t epoch = 0;    // the live mask's version the call completed in (0: no rank lost yet)
  int contributors = 0;  // ranks whose inputs the result holds
  bool rerun = false;    // a rank was lost during the call, which ran again over the survivors
};

class LiveRanks {
 public:
  LiveRanks(Communicator* parent, const CommOptions& options);
  ~LiveRanks();
  LiveRanks(const LiveRanks&) = delete;
  LiveRanks& operator=(const LiveRanks&) = delete;

  // Runs one operation on the communicator of the current epoch, recovering
  // as above when a collective loses a rank. The caller's thread only.
  Status run(const Task& task);
  // Thread-safe: ends what the survivors' communicator waits for.
  void abort();
  // Thread-safe queries.
  bool lost() const { return epoch_.load(std::memory_order_acquire) > 0; }
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  std::vector<uint8_t> liveMask() const;  // per rank: 1 live
  LiveCallReport lastCall() const;

 private:
  // A collective as it started: the task, and a copy of this rank's input.
  struct Saved {
    bool valid = false;
    uint64_t seq = 0;
    Task task;
    std::vector<char> input;
  };
  struct Verdict {
    uint64_t epoch = 0;
    uint64_t restartSeq = 0;
    std::vector<uint8_t> live;
    ncclUniqueId id{};
  };

  Status execute(const Task& task);         // on this epoch's communicator, in the parent's numbering
  Status executeOnSurvivors(const Task& task);
  Status recover(uint64_t seq, Status failure);
  Result<Verdict> agree(uint64_t failedSeq);
  Result<Verdict> coordinate(uint64_t failedSeq, std::vector<uint8_t> dead, uint32_t tag, Deadline deadline);
  Status adopt(const Verdict& verdict);
  std::vector<uint8_t> deadNow() const;     // dead already, or a local rank whose process is gone
  void save(const Task& task, uint64_t seq);
  const Saved* saved(uint64_t seq) const;
  Task savedTask(const Saved& saved, bool intoScratch);
  size_t inputBytes(const Task& task) const;
  size_t outputBytes(const Task& task) const;
  void report(bool rerun);

  Communicator* parent_;
  int rank_ = 0;
  int nranks_ = 1;
  int cudaDev_ = -1;
  std::string name_;
  std::unique_ptr<Communicator> survivors_;  // null at epoch 0 (the parent runs)
  Communicator* initializing_ = nullptr;     // the survivors' communicator while its init runs (abort() ends it)
  std::vector<int> members_;                 // the survivors' parent ranks, in order
  std::vector<int> index_;                   // per parent rank: its rank among the survivors, -1 dead
  std::atomic<uint64_t> epoch_{0};
  uint64_t seq_ = 0;  // collectives started, counted alike on every rank
  std::deque<Saved> history_;  // the collectives started lately, oldest first (this one last)
  static constexpr size_t kMaxHistory = 16;
  std::vector<char> stageIn_, stageOut_, scratch_;
  mutable std::mutex mu_;  // the mask, the report and survivors_ against abort() and queries
  std::vector<uint8_t> live_;
  LiveCallReport last_;
  bool aborted_ = false;
};

}  // namespace plait
