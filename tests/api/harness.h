// harness.h — run N ranks of a test body as threads (one communicator each)
// or as forked processes, through the public C API only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <functional>
#include <future>
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
// code. Returns the exit statuses (index = rank; -signal if killed). The
// ranks are forked before ncclGetUniqueId starts the root's thread (a child
// forked from a threaded process can inherit a lock some thread held and
// hang); they get the id through a pipe.
inline std::vector<int> runProcesses(int nranks, const std::function<int(int, const ncclUniqueId&)>& body) {
  std::vector<pid_t> pids(nranks, 0);
  std::vector<int> writeEnds(nranks, -1);
  for (int r = 1; r < nranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return {254};
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      ncclUniqueId id;
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(fds[0], reinterpret_cast<char*>(&id) + got, sizeof id - got);
        if (n <= 0) _exit(253);  // the parent found no id
        got += size_t(n);
      }
      close(fds[0]);
      _exit(body(r, id));
    }
    close(fds[0]);
    pids[r] = pid;
    writeEnds[r] = fds[1];
  }
  ncclUniqueId id;
  const bool haveId = ncclGetUniqueId(&id) == ncclSuccess;
  for (int r = 1; r < nranks; ++r) {
    if (haveId && write(writeEnds[r], &id, sizeof id) != ssize_t(sizeof id)) std::perror("runProcesses: write");
    close(writeEnds[r]);
  }
  std::vector<int> codes(nranks, 0);
  codes[0] = haveId ? body(0, id) : 255;
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  return codes;
}

// Runs newN thread ranks on a communicator grown from one of oldN ranks:
// old rank 0 gets the id (ncclCommGetUniqueId) and hands it to the
// newcomers, every rank calls ncclCommGrow, then body(rank, grown) runs on
// each. The old communicators stay open until their thread's body returned
// (`old` is that rank's, null for newcomers).
inline std::vector<std::string> runGrownThreads(
    int oldN, int newN, const std::function<std::string(int, ncclComm_t grown, ncclComm_t old)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return {std::string("ncclGetUniqueId: ") + ncclGetLastError(nullptr)};
  std::promise<ncclUniqueId> growId;
  std::shared_future<ncclUniqueId> growIdReady = growId.get_future().share();
  std::vector<std::string> errors(newN);
  std::vector<std::thread> threads;
  for (int r = 0; r < newN; ++r) {
    threads.emplace_back([&, r] {
      ncclComm_t old = nullptr, grown = nullptr;
      if (r < oldN) {
        if (ncclCommInitRank(&old, oldN, id, r) != ncclSuccess) {
          errors[r] = std::string("init: ") + ncclGetLastError(nullptr);
          if (r == 0) growId.set_value(ncclUniqueId{});
          return;
        }
        ncclUniqueId gid{};
        if (r == 0) {
          if (ncclCommGetUniqueId(old, &gid) != ncclSuccess)
            errors[r] = std::string("ncclCommGetUniqueId: ") + ncclGetLastError(old);
          growId.set_value(gid);
        }
        if (errors[r].empty() &&
            ncclCommGrow(old, newN, r == 0 ? &gid : nullptr, -1, &grown, nullptr) != ncclSuccess)
          errors[r] = std::string("ncclCommGrow: ") + ncclGetLastError(old);
      } else {
        if (growIdReady.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
          errors[r] = "no grow id within 60 s";
          return;
        }
        const ncclUniqueId gid = growIdReady.get();
        if (ncclCommGrow(nullptr, newN, &gid, r, &grown, nullptr) != ncclSuccess)
          errors[r] = std::string("ncclCommGrow: ") + ncclGetLastError(nullptr);
      }
      if (errors[r].empty()) errors[r] = body(r, grown, old);
      if (grown != nullptr) ncclCommDestroy(grown);
      if (old != nullptr) ncclCommDestroy(old);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (int r = 0; r < newN; ++r)
    if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
  return failed;
}

}  // namespace plait_test
