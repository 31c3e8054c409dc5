// Cross-memory attach (base/cma.h): its arguments may come from a peer, so
// reading this process itself, the null page or a wrapping range is refused
// without touching memory (issue 11, item 2: cmaRead of our own pid at a
// peer-chosen address was a memcpy that crashed at 0x10).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <thread>

#include "base/cma.h"

using namespace plait;

TEST_CASE("cmaRead refuses this process, bad pids, the null page and wrapping ranges", "[cma]") {
  uint64_t out = 0;
  const int self = static_cast<int>(getpid());
  CHECK(cmaRead(self, &out, 0x10, sizeof out) == EINVAL);  // was a memcpy from 0x10
  CHECK(cmaRead(self, &out, reinterpret_cast<uint64_t>(cmaProbeWord()), sizeof out) == EINVAL);
  CHECK(cmaRead(0, &out, reinterpret_cast<uint64_t>(cmaProbeWord()), sizeof out) == EINVAL);
  CHECK(cmaRead(-5, &out, reinterpret_cast<uint64_t>(cmaProbeWord()), sizeof out) == EINVAL);
  CHECK_THAT(cmaErrorText(self, EINVAL), Catch::Contains("this process itself"));
  CHECK(out == 0);

  // Another process (a forked child sharing our layout): reads work, the
  // first page and a range that wraps around are refused.
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(child > 0);
  const uint64_t addr = reinterpret_cast<uint64_t>(cmaProbeWord());
  const int ok = cmaRead(child, &out, addr, sizeof out);
  CHECK(cmaRead(child, &out, 0x10, sizeof out) == EFAULT);
  CHECK(cmaRead(child, &out, ~uint64_t(0) - 4, sizeof out) == EFAULT);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  if (ok == 0) CHECK(out == *cmaProbeWord());  // EPERM where ptrace is forbidden (Yama, containers)
  else CHECK(ok == EPERM);
}

// A peer reports its pid itself, and the kernel's cross-memory calls take a
// thread id as well: a peer naming a thread of this process would have had
// this process copy within its own memory at the peer's addresses, past the
// own-pid check (review of 2026-11-30). Communicators check each peer's pid
// once with cmaPeerPidError.
TEST_CASE("cmaPeerPidError accepts other processes only, never a thread of this one", "[cma]") {
  CHECK_THAT(cmaPeerPidError(static_cast<int>(getpid())), Catch::Contains("is this process"));
  CHECK_THAT(cmaPeerPidError(0), Catch::Contains("not a process id"));
  CHECK_THAT(cmaPeerPidError(-3), Catch::Contains("not a process id"));
  std::atomic<int> tid{0};
  std::atomic<bool> stop{false};
  std::thread t([&] {
    tid = static_cast<int>(gettid());
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (tid == 0) std::this_thread::yield();
  CHECK_THAT(cmaPeerPidError(tid), Catch::Contains("a thread of this process"));
  uint64_t out = 0;
  // What the check stops: the kernel takes the thread id as this process
  // (where the system allows cross-memory attach at all).
  if (cmaRead(tid, &out, reinterpret_cast<uint64_t>(cmaProbeWord()), sizeof out) == 0) CHECK(out == *cmaProbeWord());
  stop = true;
  t.join();
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(child > 0);
  CHECK(cmaPeerPidError(static_cast<int>(child)) == "");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}
