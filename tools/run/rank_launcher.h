// rank_launcher.h — starts N local ranks of a program and supervises them
// until they have all finished.
//
// Each rank is a child process in its own process group with
//   PLAIT_RANK, PLAIT_NRANKS, PLAIT_LOCAL_RANK, PLAIT_LOCAL_NRANKS, NCCL_COMM_ID
// and PLAIT_COMM_SECRET (the job's rendezvous secret: only processes that
// hold it can join; an inherited PLAIT_COMM_SECRET is kept) in its environment, and PR_SET_PDEATHSIG(SIGKILL) so it dies with the
// launcher even when the launcher is killed by SIGKILL. Stdin goes to rank 0
// when it is not a terminal; every other rank reads /dev/null.
//
// Supervision (one event loop on a signalfd and the output pipes):
//   - SIGINT, SIGTERM, SIGHUP sent to the launcher are forwarded to every
//     running rank's process group; a second one while ranks are being
//     terminated sends SIGKILL.
//   - The first rank that exits non-zero or by a signal is reported, the
//     others get SIGTERM, and SIGKILL after the grace period.
//   - When the timeout passes, all ranks get the same treatment.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace plait::run {

struct LaunchOptions {
  int nranks = 1;
  std::vector<std::string> command;  // program (looked up in PATH) and its arguments
  std::string commId;                // NCCL_COMM_ID given to every rank
  std::string commSecret;            // PLAIT_COMM_SECRET for every rank unless inherited
  std::optional<std::chrono::milliseconds> timeout;  // none: wait forever
  bool tagOutput = false;            // prefix each output line with "[rank] "
  std::chrono::milliseconds grace{2000};  // SIGTERM -> SIGKILL
  std::vector<int> rankCpus;         // the CPU each rank is bound to; empty: none (core_binding.h)
};

// Exit codes of the launcher besides a rank's own status (or 128 + signal).
constexpr int kExitLaunchFailed = 1;  // could not start the ranks
constexpr int kExitTimeout = 124;     // like timeout(1)

// Runs the ranks to completion. Returns the launcher's exit code: 0 when all
// ranks exited 0, else that of the first failure (a rank's exit status,
// 128 + signal number for a rank killed by a signal, kExitTimeout). Messages
// go to stderr prefixed "plait-run: ". Blocks; call once per process (it owns
// SIGCHLD, SIGINT, SIGTERM and SIGHUP for its duration).
int runRanks(const LaunchOptions& options);

}  // namespace plait::run
