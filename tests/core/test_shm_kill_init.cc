// A rank killed during init leaves nothing in /dev/shm (issue 11, item 6).
// Three ranks are forked; the moment the first shared-memory segment of the
// job appears (inotify on /dev/shm), its creator is killed with SIGKILL —
// before the connect barrier, so before anyone could unlink it. The
// survivors' init fails; afterwards no segment of any rank may remain. On
// b3b9f8d the killed rank's segment stayed linked (3 of 3 runs).
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "core/bootstrap.h"
#include "core/comm.h"

using namespace plait;

namespace {

constexpr int kRanks = 3;

// The /dev/shm names of segments created by `pid`.
std::vector<std::string> segmentsOf(pid_t pid) {
  std::vector<std::string> names;
  const std::string prefix = "plait-" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) names.push_back(e->d_name);
    closedir(d);
  }
  return names;
}

// The pid whose segment an inotify event names, if it is one of `pids`.
pid_t creatorIn(const char* name, const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    const std::string prefix = "plait-" + std::to_string(p) + "-";
    if (std::strncmp(name, prefix.c_str(), prefix.size()) == 0) return p;
  }
  return 0;
}

// Waits for the first segment of one of `pids` to appear; returns its creator (0: none in 20 s).
pid_t waitFirstSegment(int inotifyFd, const std::vector<pid_t>& pids) {
  const Deadline until = Deadline::afterMs(20000);
  alignas(inotify_event) char buf[4096];
  while (!until.expired()) {
    pollfd p{inotifyFd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(inotifyFd, buf, sizeof buf);
    for (ssize_t off = 0; off < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + off);
      if (ev->len > 0)
        if (pid_t who = creatorIn(ev->name, pids)) return who;
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("a rank killed while its shared segment is linked leaves nothing in /dev/shm", "[shm][forks]") {
  setenv("PLAIT_TIMEOUT", "10", 1);
  setenv("PLAIT_INIT_TIMEOUT", "20", 1);
  config::resetAll();
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const int watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  REQUIRE(watch >= 0);
  REQUIRE(inotify_add_watch(watch, "/dev/shm", IN_CREATE) >= 0);

  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      {
        Communicator comm(r, kRanks);
        rc = comm.init(id.value(), CommOptions{}).isOk() ? 0 : 1;
      }
      _exit(rc);
    }
    REQUIRE(pid > 0);
    pids.push_back(pid);
  }
  const pid_t victim = waitFirstSegment(watch, pids);
  if (victim > 0) kill(victim, SIGKILL);
  close(watch);

  // Every rank ends: the victim killed, the survivors after their failed init.
  std::vector<int> status(kRanks, -1);
  const Deadline until = Deadline::afterMs(30000);
  for (int done = 0; done < kRanks && !until.expired();) {
    for (int r = 0; r < kRanks; ++r) {
      int st = 0;
      if (status[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        ++done;
      }
    }
    usleep(2000);
  }
  for (int r = 0; r < kRanks; ++r)
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status[r], 0);
    }
  REQUIRE(victim > 0);
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << " (pid " << pids[r] << (pids[r] == victim ? ", killed" : "") << ") status " << status[r]);
    if (pids[r] == victim) {
      CHECK(WIFSIGNALED(status[r]));
      continue;
    }
    // Ended by itself: no hang, no crash. Mostly its init failed (1); on a
    // loaded machine the SIGKILL can land after every rank had finished init
    // (seen once in a CI rehearsal beside another build), and then 0 is right.
    CHECK(WIFEXITED(status[r]));
    CHECK((WEXITSTATUS(status[r]) == 1 || WEXITSTATUS(status[r]) == 0));
  }
  for (pid_t p : pids) {
    const std::vector<std::string> left = segmentsOf(p);
    INFO("left behind by pid " << p << ": " << (left.empty() ? "" : left.front()));
    CHECK(left.empty());
  }
}
