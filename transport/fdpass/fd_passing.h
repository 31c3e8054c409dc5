// fd_passing.h — file descriptors between the ranks of one host.
//
// CUDA VMM memory is shared between processes as a POSIX fd (the device API's
// windows: each rank imports its LSA peers' memory and maps it at NCCL's flat
// layout). An fd cannot be re-opened through /proc/<pid>/fd when the driver
// made it, and pidfd_getfd needs ptrace rights sibling ranks do not have, so
// it travels the classic way: SCM_RIGHTS over a Unix socket.
//
// Each rank listens on an abstract-namespace socket (nothing in the file
// system, nothing left behind by a crash) named from a token the
// communicator's ranks share and its rank. A sender connects and sends one
// message, {magic, its rank, a tag}, with the fd attached. The receiver takes
// an fd only when the connecting process's credentials (SO_PEERCRED) are this
// process's uid and the pid the claimed rank announced at init; anything else
// is refused, closed and counted (and named if the wait then fails). Fds that
// arrive before they are asked for wait in a mailbox keyed by (rank, tag).
//
// Every wait has the caller's deadline and watches an abort word; the socket
// calls block in poll() slices of at most 50 ms, never spin. Ranks that are
// threads of one process may use it too (their pids are equal). Thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "plait/clock.hpp"
#include "plait/status.hpp"

namespace plait::fdpass {

class FdMailbox {
 public:
  // Listens as `rank` of the ranks whose pids are `pids` (indexed by rank;
  // -1 for ranks on other hosts, which can neither send nor receive here).
  // `token` (non-empty, up to 64 characters) names the group; every rank of
  // it passes the same one.
  static Result<std::unique_ptr<FdMailbox>> open(const std::string& token, int rank, std::vector<int> pids);
  ~FdMailbox();
  FdMailbox(const FdMailbox&) = delete;
  FdMailbox& operator=(const FdMailbox&) = delete;

  // Sends (a duplicate of) `fd` to `peer` under `tag`; the caller keeps its
  // own. Waits for the peer to listen until `deadline`, or until *abort
  // (when given) is non-zero.
  Status send(int peer, uint64_t tag, int fd, const Deadline& deadline,
              const std::atomic<uint32_t>* abort = nullptr);

  // The fd `peer` sent under `tag` (the caller owns it; close-on-exec),
  // waiting until `deadline` or *abort. kRemoteError naming the peer, the
  // tag and any refused senders when it does not come.
  Result<int> receive(int peer, uint64_t tag, const Deadline& deadline,
                      const std::atomic<uint32_t>* abort = nullptr);

  int rank() const { return rank_; }

 private:
  FdMailbox(std::string token, int rank, std::vector<int> pids, int listener)
      : token_(std::move(token)), rank_(rank), pids_(std::move(pids)), listener_(listener) {}
  // Takes in one connection, waiting at most `waitMs`: false when none came.
  bool acceptOne(int waitMs);

  const std::string token_;
  const int rank_;
  const std::vector<int> pids_;
  const int listener_;
  std::mutex mu_;                                  // the listener and what follows
  std::map<std::pair<int, uint64_t>, int> ready_;  // (rank, tag) -> fd, arrived and not yet asked for
  std::vector<std::string> refused_;               // why connections were turned away (the last few)
};

}  // namespace plait::fdpass
