// op_status.h — where the ranks on other hosts are, asked when a wait drags
// on (issue 15 item 1). The op board (op_board.h) shows a host's own ranks
// through shared memory; ranks on other hosts answer over TCP instead.
//
// Every rank of a communicator that spans hosts runs a small server thread
// on its bootstrap interface. A peer that connects and greets with the job's
// magic and nonce (read through a GreetingGate: strangers, garbage and idle
// connections cannot hold it) gets this rank's announced collective (an
// OpBoard::Line kept here), how long it has been at it, and whether it left.
//
// When one collective has waited PLAIT_STATUS_SURVEY_MS (default 5000, at
// most half of PLAIT_TIMEOUT), a survey thread asks the ranks on other hosts,
// once per collective. A rank found at the same collective number with other
// arguments makes the wait fail with kInvalidUsage naming both, as the board
// does on one host; a timeout's error lists every rank's answer (or why it
// gave none: "no answer (connection refused)" for a rank that is gone).
//
// Cost: nothing per collective beyond a few stores to the line; a survey
// asks at most 64 ranks (sequentially, 500 ms each at most).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/socket.h"
#include "core/op_board.h"
#include "core/task.h"
#include "plait/status.hpp"

namespace plait {

class Bootstrap;

class OpStatus {
 public:
  // Collective over all ranks of the bootstrap. `remoteRanks`: the ranks on
  // other hosts (the ones a survey asks). `announced` and `announcedNs`: the
  // communicator's current collective and when it began (they outlive this).
  static Result<std::unique_ptr<OpStatus>> create(Bootstrap& bootstrap, std::vector<int> remoteRanks,
                                                  const OpBoard::Line* announced,
                                                  const std::atomic<uint64_t>* announcedNs, Deadline deadline);
  ~OpStatus();
  OpStatus(const OpStatus&) = delete;
  OpStatus& operator=(const OpStatus&) = delete;

  // This rank is leaving (abort or destroy): answers say so until it is gone.
  void markDeparted();

  // From a wait's slow path (any thread): starts a survey once the current
  // collective has waited long enough; kInvalidUsage when a survey found a
  // rank at this collective's number with other arguments.
  Status check();
  // This rank's own position (its line).
  RankPosition self() const;
  // Asks every remote rank now (each within 500 ms, all by `deadline`).
  std::vector<RankPosition> surveyNow(Deadline deadline) const;

 private:
  OpStatus() = default;
  void serve();
  void surveyLoop();
  RankPosition ask(int peer, Deadline deadline, OpRecord* record) const;

  int rank_ = 0;
  uint64_t magic_ = 0, nonce_ = 0;
  std::vector<int> remote_;
  std::vector<net::SocketAddress> addresses_;  // [rank]: its status server
  int64_t surveyAfterMs_ = 5000;

  const OpBoard::Line* line_ = nullptr;
  const std::atomic<uint64_t>* publishedNs_ = nullptr;  // when the current collective was announced
  std::atomic<uint32_t> departed_{0};

  net::Socket listener_;
  std::atomic<uint32_t> stop_{0};
  std::thread server_;
  std::thread surveyor_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  uint64_t requestedSeq_ = 0;  // guarded by mu_
  uint64_t surveyedSeq_ = 0;   // guarded by mu_
  Status disagreement_;        // guarded by mu_: from the survey of surveyedSeq_
};

}  // namespace plait
