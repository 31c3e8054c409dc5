// harness.h — run N ranks of a test body as threads (one communicator each)
// or as forked processes, through the public C API only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace plait_test {

// Creates nranks communicators, one per thread, and runs body(rank, comm) on
// each; returns the failure messages (empty: all passed). Communicators are
// destroyed afterwards.
inline std::vector<std::string> runThreads(int nranks, const std::function<std::string(int, ncclComm_t)>& body) {
  ncclUniqueId id;
  std::vector<std::string> errors(nranks);
  if (ncclGetUniqueId(&id) != ncclSuccess) return {std::string("ncclGetUniqueId: ") + ncclGetLastError(nullptr)};
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, nranks, id, r) != ncclSuccess) {
        errors[r] = std::string("init: ") + ncclGetLastError(nullptr);
        return;
      }
      errors[r] = body(r, comm);
      ncclCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (int r = 0; r < nranks; ++r)
    if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
  return failed;
}

// Forks ranks 1..nranks-1 and runs rank 0 here; body returns a process exit
// code. Returns the exit statuses (index = rank; -signal if killed).
inline std::vector<int> runProcesses(int nranks, const std::function<int(int, const ncclUniqueId&)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return {255};
  std::vector<pid_t> pids(nranks, 0);
  for (int r = 1; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = body(r, id);
      _exit(rc);
    }
    pids[r] = pid;
  }
  std::vector<int> codes(nranks, 0);
  codes[0] = body(0, id);
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  return codes;
}

}  // namespace plait_test
