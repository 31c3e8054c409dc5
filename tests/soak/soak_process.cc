// soak_process.cc — see soak_process.h.
#include "soak_process.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "soak_workload.h"

namespace soak {
namespace {

// Where a hung process is stuck: every thread's stack, when gdb is installed.
void dumpStacks(pid_t pid) {
  const std::string cmd = "command -v gdb >/dev/null && gdb -p " + std::to_string(pid) +
                          " -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)' | head -80";
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("(no stacks: gdb missing or failed)\n");
}

}  // namespace

// /dev/shm entries Plait made for one of `pids` (plait-<pid>-...).
std::vector<std::string> leftovers(const std::vector<pid_t>& pids) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (dirent* e = readdir(dir)) {
    for (pid_t p : pids) {
      const std::string prefix = "plait-" + std::to_string(p) + "-";
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(e->d_name);
    }
  }
  closedir(dir);
  return found;
}

// A process that hosts the bootstrap root (so the soak's parent stays
// single-threaded and can fork every run), writes the id and waits to be killed.
pid_t startIdServer(ncclUniqueId* id) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ncclUniqueId mine;
    if (ncclGetUniqueId(&mine) != ncclSuccess) _exit(1);
    if (write(fds[1], &mine, sizeof mine) != static_cast<ssize_t>(sizeof mine)) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  const bool ok = pid > 0 && read(fds[0], id, sizeof *id) == static_cast<ssize_t>(sizeof *id);
  close(fds[0]);
  return ok ? pid : -1;
}

void reapAll(std::vector<pid_t>& pids, uint64_t untilNs, std::vector<std::string>* failures) {
  for (pid_t& p : pids) {
    if (p <= 0) continue;
    int status = 0;
    while (waitpid(p, &status, WNOHANG) == 0) {
      if (monotonicNs() >= untilNs) {
        failures->push_back("process " + std::to_string(p) + " still running after its report deadline: killed");
        std::printf("stacks of hung process %d:\n", p);
        dumpStacks(p);
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        break;
      }
      usleep(2000);
    }
    p = -1;
  }
}

void endRun(const std::vector<pid_t>& ranks, pid_t idServer, std::vector<std::string>* failures) {
  std::vector<pid_t> all = ranks;
  kill(idServer, SIGKILL);
  all.push_back(idServer);
  std::vector<pid_t> waitFor = all;
  reapAll(waitFor, monotonicNs() + 10'000'000'000ull, failures);
  for (const std::string& f : leftovers(all)) {
    failures->push_back("left behind: /dev/shm/" + f);
    unlink(("/dev/shm/" + f).c_str());
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))];
}

}  // namespace soak
