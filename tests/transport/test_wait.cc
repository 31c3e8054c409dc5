// The waiting policy (base/wait.h): fast path, wake-ups through every phase,
// deadlines, the abort flag and a dead peer process.
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "base/config.h"
#include "base/cpu_mask.h"
#include "wait_test_util.h"
#include "base/wait.h"

namespace plait {
namespace {

// Two threads hand a counter back and forth `rounds` times through two words.
void pingPong(const WaitContext& ctx, int rounds) {
  std::atomic<uint32_t> ping{0}, pong{0}, pingSleepers{0}, pongSleepers{0};
  std::atomic<bool> failed{false};
  std::thread other([&] {
    for (uint32_t i = 1; i <= uint32_t(rounds); ++i) {
      Status s = waitUntil([&] { return ping.load(std::memory_order_acquire) == i; }, &ping, &pingSleepers, ctx);
      if (!s.isOk()) failed = true;
      pong.store(i, std::memory_order_release);
      wake(&pong, &pongSleepers);
    }
  });
  for (uint32_t i = 1; i <= uint32_t(rounds); ++i) {
    ping.store(i, std::memory_order_release);
    wake(&ping, &pingSleepers);
    Status s = waitUntil([&] { return pong.load(std::memory_order_acquire) == i; }, &pong, &pongSleepers, ctx);
    if (!s.isOk()) failed = true;
  }
  other.join();
  CHECK_FALSE(failed.load());
}

}  // namespace

TEST_CASE("a ready predicate returns at once", "[wait]") {
  std::atomic<uint32_t> word{1}, sleepers{0};
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(0);  // already expired: the fast path must not look at it
  int calls = 0;
  Status s = waitUntil([&] { ++calls; return true; }, &word, &sleepers, ctx);
  CHECK(s.isOk());
  CHECK(calls == 1);
}

TEST_CASE("ping-pong through spin, yield and futex phases", "[wait]") {
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(60000);
  SECTION("default policy") { pingPong(ctx, 20000); }
  SECTION("oversubscribed: no spinning") {
    ctx.oversubscribed = true;
    pingPong(ctx, 5000);
  }
  SECTION("dedicated cores: spin, then sleep, never yield") {
    ctx.dedicatedCore = true;
    pingPong(ctx, 20000);
  }
  SECTION("futex only: no lost wake-ups") {
    ScopedWaitTunables tunables("0", "0");
    auto start = Clock::now();
    pingPong(ctx, 5000);
    // A lost wake-up costs a 1 ms slice; 10000 hops that each lost one would take 10 s.
    CHECK(msSince(start) < 5000);
  }
}

TEST_CASE("a sleeping waiter is woken by wake()", "[wait]") {
  std::atomic<uint32_t> word{0}, sleepers{0};
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(10000);
  Status result;
  std::thread waiter([&] {
    result = waitUntil([&] { return word.load(std::memory_order_acquire) != 0; }, &word, &sleepers, ctx);
  });
  auto start = Clock::now();  // under load the yield phase can take a while: poll for the sleeper
  uint32_t seen = 0;          // the count as seen: the waiter leaves it between its 1 ms sleeps
  while ((seen = sleepers.load()) == 0 && msSince(start) < 5000)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(seen == 1);
  word.store(1, std::memory_order_release);
  wake(&word, &sleepers);
  waiter.join();
  CHECK(result.isOk());
  CHECK(sleepers.load() == 0);
}

TEST_CASE("a wait fails at its deadline naming what it waited for", "[wait]") {
  std::atomic<uint32_t> word{0}, sleepers{0};
  WaitContext ctx;
  ctx.what = "allreduce recv from rank 3";
  ctx.peerRank = 3;
  ctx.deadline = Deadline::afterMs(100);
  auto start = Clock::now();
  Status s = waitUntil([] { return false; }, &word, &sleepers, ctx);
  double ms = msSince(start);
  REQUIRE_FALSE(s.isOk());
  CHECK(s.code() == Code::kRemoteError);
  CHECK(s.message().find("timed out after") != std::string::npos);
  CHECK(s.message().find("allreduce recv from rank 3") != std::string::npos);
  CHECK(ms >= 99);
  CHECK(ms < 1000);
}

TEST_CASE("the abort flag unblocks a sleeping wait within 50 ms", "[wait]") {
  std::atomic<uint32_t> word{0}, sleepers{0}, abortFlag{0};
  WaitContext ctx;
  ctx.abortFlag = &abortFlag;
  ctx.what = "broadcast";
  Clock::time_point returned;
  Status result;
  std::thread waiter([&] {
    result = waitUntil([] { return false; }, &word, &sleepers, ctx);
    returned = Clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  auto set = Clock::now();
  abortFlag.store(1);
  waiter.join();
  REQUIRE_FALSE(result.isOk());
  CHECK(result.code() == Code::kRemoteError);
  CHECK(result.message() == "aborted during broadcast");
  CHECK(std::chrono::duration<double, std::milli>(returned - set).count() < 50);
}

TEST_CASE("a dead peer process fails the wait with kRemoteError naming it", "[wait]") {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    usleep(100 * 1000);
    _exit(0);
  }
  std::atomic<uint32_t> word{0}, sleepers{0};
  WaitContext ctx;
  ctx.peerPid = child;
  ctx.peerRank = 3;
  ctx.what = "allreduce recv from rank 3";
  ctx.deadline = Deadline::afterMs(10000);
  auto start = Clock::now();
  Status s = waitUntil([] { return false; }, &word, &sleepers, ctx);  // the child stays an unreaped zombie
  double ms = msSince(start);
  REQUIRE_FALSE(s.isOk());
  CHECK(s.code() == Code::kRemoteError);
  CHECK(s.message() ==
        "rank 3 (pid " + std::to_string(child) + ") died during allreduce recv from rank 3");
  CHECK(ms < 1000);
  waitpid(child, nullptr, 0);
}

TEST_CASE("processAlive and hostOversubscribed", "[wait]") {
  CHECK(processAlive(getpid()));
  CHECK(processAlive(-1));  // unknown: assume alive
  CHECK_FALSE(hostOversubscribed(1));
  CHECK(hostOversubscribed(1 << 20));
}

namespace {

// A dedicated-core wait under PLAIT_WAIT_SPIN_DEDICATED_US=`budgetUs`: how
// many ms passed before it went to sleep (it is then woken and must succeed),
// and whether it slept at all (within 5 s).
struct DedicatedWait {
  double sleptAfterMs = 0;
  bool slept = false;
  Status result;
};
DedicatedWait dedicatedWait(const char* budgetUs) {
  setenv("PLAIT_WAIT_SPIN_DEDICATED_US", budgetUs, 1);
  config::resetAll();
  std::atomic<uint32_t> word{0}, sleepers{0};
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(10000);
  ctx.dedicatedCore = true;
  DedicatedWait out;
  auto start = Clock::now();
  std::thread waiter([&] {
    out.result = waitUntil([&] { return word.load(std::memory_order_acquire) != 0; }, &word, &sleepers, ctx);
  });
  while (sleepers.load() == 0 && msSince(start) < 5000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  out.sleptAfterMs = msSince(start);
  out.slept = sleepers.load() == 1;
  word.store(1, std::memory_order_release);
  wake(&word, &sleepers);
  waiter.join();
  unsetenv("PLAIT_WAIT_SPIN_DEDICATED_US");
  config::resetAll();
  return out;
}

}  // namespace

TEST_CASE("a dedicated-core wait spins for its budget, then sleeps and is woken", "[wait]") {
  DedicatedWait w = dedicatedWait("20000");
  REQUIRE(w.slept);
  CHECK(w.sleptAfterMs >= 19);  // not before the spin budget: no yield phase in between
  CHECK(w.result.isOk());
}

TEST_CASE("a negative dedicated spin budget means no spinning, not forever", "[wait]") {
  DedicatedWait w = dedicatedWait("-5");
  CHECK(w.slept);  // it went to sleep instead of spinning to the deadline
  CHECK(w.result.isOk());
}

TEST_CASE("a spinning dedicated-core wait sees the abort flag", "[wait]") {
  setenv("PLAIT_WAIT_SPIN_DEDICATED_US", "10000000", 1);  // 10 s of spinning unless stopped
  config::resetAll();
  std::atomic<uint32_t> word{0}, sleepers{0}, abortFlag{0};
  WaitContext ctx;
  ctx.dedicatedCore = true;
  ctx.abortFlag = &abortFlag;
  ctx.what = "allgather";
  Status result;
  std::thread waiter([&] { result = waitUntil([] { return false; }, &word, &sleepers, ctx); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(sleepers.load() == 0);  // still spinning: it has not announced a sleep
  auto set = Clock::now();
  abortFlag.store(1);
  waiter.join();
  CHECK(msSince(set) < 1000);
  CHECK(result.message() == "aborted during allgather");
  unsetenv("PLAIT_WAIT_SPIN_DEDICATED_US");
  config::resetAll();
}

TEST_CASE("local CPU masks decide oversubscription and dedicated cores", "[wait]") {
  auto mask = [](std::initializer_list<int> cpus) {
    CpuMask m;
    for (int c : cpus) m.set(c);
    return m;
  };
  // Bound one per CPU (mpirun --bind-to core, plait-run): 2 CPUs for 2 ranks,
  // though each process sees only one.
  LocalCpus bound = assessLocalCpus({mask({0}), mask({1})});
  CHECK(bound.cpus == 2);
  CHECK_FALSE(bound.oversubscribed);
  CHECK(bound.dedicated);
  CHECK(bound.minCpusPerRank == 1);
  // Unbound on 2 CPUs: not oversubscribed, but they share.
  LocalCpus shared = assessLocalCpus({mask({0, 1}), mask({0, 1})});
  CHECK(shared.cpus == 2);
  CHECK_FALSE(shared.oversubscribed);
  CHECK_FALSE(shared.dedicated);
  // Three ranks on two CPUs; two ranks squeezed onto one by taskset.
  CHECK(assessLocalCpus({mask({0, 1}), mask({0, 1}), mask({0, 1})}).oversubscribed);
  LocalCpus squeezed = assessLocalCpus({mask({1}), mask({1})});
  CHECK(squeezed.oversubscribed);
  CHECK_FALSE(squeezed.dedicated);
  // High CPU numbers, and a rank that could not read its mask: unknown.
  LocalCpus high = assessLocalCpus({mask({700, 701}), mask({1023})});
  CHECK(high.cpus == 3);
  CHECK(high.dedicated);
  CHECK(high.minCpusPerRank == 1);
  LocalCpus unknown = assessLocalCpus({mask({0}), CpuMask{}});
  CHECK(unknown.cpus == 0);
  CHECK_FALSE(unknown.oversubscribed);
  CHECK_FALSE(unknown.dedicated);
  // This thread's own mask is what sched_getaffinity says.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  CHECK(currentCpuMask().count() == CPU_COUNT(&set));
}

}  // namespace plait
