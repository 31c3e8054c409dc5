// live_soak — the kill-anywhere soak for the live-ranks mode (issue 15 item
// 7; src/core/live_ranks.h). Each run forks N ranks with PLAIT_LIVE_RANKS=1
// that run the same fixed list of collectives (AllReduce out of place and in
// place, AllGather, ReduceScatter, Broadcast from rank 0, AlltoAll), every
// result checked; once all have created the communicator it SIGKILLs one
// rank at a random instant. It then requires of every survivor:
//   - every call returns ncclSuccess with the right result over the ranks
//     its report (plaitCommLastCall) says it holds: all of them before the
//     loss, the survivors after (a dead rank's slots left as they were, but
//     in the call that lost it, where they are undefined),
//     except a Broadcast from a dead root, which must fail with
//     ncclRemoteError and leave the communicator usable;
//   - it finishes the list within the timeout of the kill;
//   - all survivors end at the same epoch with the same live mask, which
//     excludes exactly the victim (or nothing, when the kill came after the
//     victim's last call);
// and of the run: nothing of any of its processes left in /dev/shm.
//
//   live_soak [--runs 50] [--ranks 4] [--seed S] [--timeout-s 10]
//             [--window-ms 300] [--calls 3000] [--kills 1] [--verbose]
// --kills K kills K ranks, each after the first within 150 ms of the one
// before, so that some land while the survivors agree or connect.
// Prints each failure and a summary with the recovery time (the duration of
// the call that ran again) percentiles. Exit 0 when every run passed.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plait/live_ranks.h"
#include "soak_process.h"
#include "soak_workload.h"

namespace {

struct Options {
  int runs = 50;
  int ranks = 4;
  uint64_t seed = 0;
  int timeoutS = 10;
  int windowMs = 300;
  int calls = 3000;
  int kills = 1;  // ranks killed per run; the ones after the first within 150 ms of the one before
  bool verbose = false;
};

constexpr int kMaxRanks = 16;

// One survivor's account, written to the parent in one write().
struct Report {
  int32_t rank = -1;
  int32_t ok = 0;
  uint64_t epoch = 0;
  int32_t live[kMaxRanks] = {};
  int32_t calls = 0;      // calls that returned as expected
  int32_t reruns = 0;     // calls that lost a rank and ran again
  uint64_t recoverNs = 0; // the longest such call
  char message[1024] = {};
};

constexpr float kSentinel = -1.0f;

float value(int rank, int call, size_t j) {
  return static_cast<float>((rank + 1) * 1000 + static_cast<int>((static_cast<size_t>(call) * 7 + j) % 1000));
}

// The ranks a result holds: all before the loss, the live ones after.
std::vector<int> contributors(ncclComm_t comm, int nranks, const plaitLiveCallReport_t& rep) {
  std::vector<int> live(static_cast<size_t>(nranks), 1), out;
  if (rep.epoch > 0) {
    unsigned long long epoch = 0;
    plaitCommLiveRanks(comm, &epoch, live.data());
  }
  for (int r = 0; r < nranks; ++r)
    if (live[static_cast<size_t>(r)]) out.push_back(r);
  return out;
}

bool fail(Report* rep, const std::string& why) {
  std::snprintf(rep->message, sizeof rep->message, "%s", why.c_str());
  return false;
}

// Call `call` of the fixed list, checked. False (with the reason) when it
// went wrong.
bool oneCall(ncclComm_t comm, int rank, int n, int call, std::vector<float>& a, std::vector<float>& b, Report* rep) {
  const size_t count = 256 + static_cast<size_t>(call % 7) * 1024;
  const int kind = call % 6;
  const size_t total = kind == 2 || kind == 3 || kind == 5 ? count * static_cast<size_t>(n) : count;
  a.resize(total);
  b.assign(count * static_cast<size_t>(n), kSentinel);
  for (size_t j = 0; j < total; ++j) a[j] = value(rank, call, j);
  const uint64_t t0 = soak::monotonicNs();
  ncclResult_t rc = ncclSuccess;
  switch (kind) {
    case 0: rc = ncclAllReduce(a.data(), b.data(), count, ncclFloat32, ncclSum, comm, nullptr); break;
    case 1: rc = ncclAllReduce(a.data(), a.data(), count, ncclFloat32, ncclSum, comm, nullptr); break;
    case 2: rc = ncclAllGather(a.data(), b.data(), count, ncclFloat32, comm, nullptr); break;
    case 3: rc = ncclReduceScatter(a.data(), b.data(), count, ncclFloat32, ncclSum, comm, nullptr); break;
    case 4: rc = ncclBroadcast(a.data(), b.data(), count, ncclFloat32, 0, comm, nullptr); break;
    case 5: rc = ncclAlltoAll(a.data(), b.data(), count, ncclFloat32, comm, nullptr); break;
  }
  const uint64_t took = soak::monotonicNs() - t0;
  plaitLiveCallReport_t last{};
  plaitCommLastCall(comm, &last);
  unsigned long long epoch = 0;
  std::vector<int> live(static_cast<size_t>(n), 1);
  plaitCommLiveRanks(comm, &epoch, live.data());
  const std::string where = "call " + std::to_string(call) + " (kind " + std::to_string(kind) + ")";
  if (kind == 4 && !live[0]) {  // the root is lost: refused, and the communicator goes on
    if (rc != ncclRemoteError)
      return fail(rep, where + ": Broadcast from lost rank 0 returned " + ncclGetErrorString(rc));
    return true;
  }
  if (rc != ncclSuccess) return fail(rep, where + ": " + ncclGetErrorString(rc) + ": " + ncclGetLastError(comm));
  if (last.rerun) {
    ++rep->reruns;
    rep->recoverNs = std::max(rep->recoverNs, took);
  }
  const std::vector<int> from = contributors(comm, n, last);
  if (static_cast<int>(from.size()) != last.contributors)
    return fail(rep, where + ": the report says " + std::to_string(last.contributors) + " contributors, the mask " +
                         std::to_string(from.size()));
  std::vector<int> in(static_cast<size_t>(n), 0);
  for (int r : from) in[static_cast<size_t>(r)] = 1;
  auto sum = [&](size_t j) {
    float s = 0;
    for (int r : from) s += value(r, call, j);
    return s;
  };
  for (size_t j = 0; j < count; ++j) {
    float want = 0, got = 0;
    switch (kind) {
      case 0: want = sum(j), got = b[j]; break;
      case 1: want = sum(j), got = a[j]; break;
      case 3: want = sum(static_cast<size_t>(rank) * count + j), got = b[j]; break;
      case 4: want = value(0, call, j), got = b[j]; break;
      default:
        for (int r = 0; r < n; ++r) {
          const float slot = b[static_cast<size_t>(r) * count + j];
          // The call that lost the rank may have received part of its block
          // before it died: that slot is undefined (live_ranks.h).
          if (!in[static_cast<size_t>(r)] && last.rerun) continue;
          const float expect = !in[static_cast<size_t>(r)] ? kSentinel
                               : kind == 2                 ? value(r, call, j)
                                                           : value(r, call, static_cast<size_t>(rank) * count + j);
          if (slot != expect)
            return fail(rep, where + ": slot of rank " + std::to_string(r) + " element " + std::to_string(j) + " is " +
                                 std::to_string(slot) + ", expected " + std::to_string(expect));
        }
        continue;
    }
    if (got != want)
      return fail(rep, where + ": element " + std::to_string(j) + " is " + std::to_string(got) + ", expected " +
                           std::to_string(want) + " over " + std::to_string(from.size()) + " ranks");
  }
  return true;
}

int runRank(int rank, int n, const ncclUniqueId& id, int readyFd, int reportFd, int calls) {
  Report rep;
  rep.rank = rank;
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    fail(&rep, std::string("init: ") + ncclGetLastError(nullptr));
  } else {
    const char ready = 1;
    if (write(readyFd, &ready, 1) != 1) return 1;
    std::vector<float> a, b;
    bool ok = true;
    for (int c = 0; c < calls && ok; ++c) {
      ok = oneCall(comm, rank, n, c, a, b, &rep);
      if (ok) ++rep.calls;
    }
    rep.ok = ok ? 1 : 0;
    std::vector<int> live(static_cast<size_t>(n), 0);
    unsigned long long epoch = 0;
    plaitCommLiveRanks(comm, &epoch, live.data());
    rep.epoch = epoch;
    for (int r = 0; r < n; ++r) rep.live[r] = live[static_cast<size_t>(r)];
    if (ok && ncclCommFinalize(comm) == ncclSuccess) ncclCommDestroy(comm);
    else ncclCommAbort(comm);
  }
  return write(reportFd, &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep) ? 0 : 1;
}

struct RunResult {
  std::vector<std::string> failures;
  std::vector<double> recoverMs;
  bool lost = false;
};

RunResult oneRun(const Options& o, std::mt19937_64& rng, std::string* when) {
  RunResult out;
  ncclUniqueId id;
  const pid_t server = soak::startIdServer(&id);
  if (server < 0) {
    out.failures.push_back("could not start the id server");
    return out;
  }
  int readyPipe[2], reportPipe[2];
  if (pipe(readyPipe) != 0 || pipe(reportPipe) != 0) {
    out.failures.push_back("pipe failed");
    return out;
  }
  std::vector<pid_t> ranks(static_cast<size_t>(o.ranks), -1);
  for (int r = 0; r < o.ranks; ++r) {
    ranks[static_cast<size_t>(r)] = fork();
    if (ranks[static_cast<size_t>(r)] == 0) {
      close(readyPipe[0]);
      close(reportPipe[0]);
      _exit(runRank(r, o.ranks, id, readyPipe[1], reportPipe[1], o.calls));
    }
  }
  close(readyPipe[1]);
  close(reportPipe[1]);
  const uint64_t untilReady = soak::monotonicNs() + static_cast<uint64_t>(o.timeoutS) * 1'000'000'000ull;
  for (int got = 0; got < o.ranks && soak::monotonicNs() < untilReady;) {
    pollfd p{readyPipe[0], POLLIN, 0};
    char c = 0;
    if (poll(&p, 1, 100) > 0 && read(readyPipe[0], &c, 1) == 1) ++got;
  }
  close(readyPipe[0]);
  std::vector<int> order(static_cast<size_t>(o.ranks));
  for (int r = 0; r < o.ranks; ++r) order[static_cast<size_t>(r)] = r;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> victim(static_cast<size_t>(o.ranks), false);
  for (int k = 0; k < o.kills; ++k) {
    const int who = order[static_cast<size_t>(k)];
    const uint64_t windowUs = k == 0 ? static_cast<uint64_t>(o.windowMs) * 1000 : 150'000;
    const int delayUs = static_cast<int>(rng() % (windowUs + 1));
    usleep(static_cast<useconds_t>(delayUs));
    kill(ranks[static_cast<size_t>(who)], SIGKILL);
    victim[static_cast<size_t>(who)] = true;
    *when += (k ? ", then " : "") + std::to_string(delayUs / 1000) + " ms, rank " + std::to_string(who);
  }
  const uint64_t until = soak::monotonicNs() + static_cast<uint64_t>(o.timeoutS) * 1'000'000'000ull + 5'000'000'000ull;
  std::vector<Report> reps;
  while (static_cast<int>(reps.size()) < o.ranks && soak::monotonicNs() < until) {
    pollfd p{reportPipe[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    Report rep;
    if (read(reportPipe[0], &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) break;
    reps.push_back(rep);
  }
  close(reportPipe[0]);
  const Report* first = nullptr;
  std::vector<bool> reported(static_cast<size_t>(o.ranks), false);
  for (const Report& rep : reps) {
    if (rep.rank < 0 || rep.rank >= o.ranks) continue;
    reported[static_cast<size_t>(rep.rank)] = true;
    if (victim[static_cast<size_t>(rep.rank)]) continue;  // it finished before the kill: fine either way
    const std::string who = "rank " + std::to_string(rep.rank) + ": ";
    if (!rep.ok) out.failures.push_back(who + rep.message);
    if (rep.recoverNs > 0) out.recoverMs.push_back(static_cast<double>(rep.recoverNs) / 1e6);
    if (rep.epoch > 0) out.lost = true;
    // Survivors are live; a victim may still show live when the others had
    // finished before it was killed, but then alike on every survivor.
    for (int r = 0; r < o.ranks; ++r)
      if (!victim[static_cast<size_t>(r)] && rep.live[r] != 1 && rep.epoch > 0)
        out.failures.push_back(who + "its mask says rank " + std::to_string(r) + " (never killed) is lost");
    if (first == nullptr) {
      first = &rep;
    } else if (rep.epoch != first->epoch || !std::equal(rep.live, rep.live + o.ranks, first->live)) {
      out.failures.push_back(who + "epoch " + std::to_string(rep.epoch) + " or its mask differ from rank " +
                             std::to_string(first->rank) + "'s (epoch " + std::to_string(first->epoch) + ")");
    }
  }
  for (int r = 0; r < o.ranks; ++r)
    if (!victim[static_cast<size_t>(r)] && !reported[static_cast<size_t>(r)])
      out.failures.push_back("rank " + std::to_string(r) + " did not finish (hang or crash)");
  soak::endRun(ranks, server, &out.failures);
  return out;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--verbose") {
      o->verbose = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) return false;
    if (a == "--runs") o->runs = static_cast<int>(v);
    else if (a == "--ranks") o->ranks = static_cast<int>(v);
    else if (a == "--seed") o->seed = static_cast<uint64_t>(v);
    else if (a == "--timeout-s") o->timeoutS = static_cast<int>(v);
    else if (a == "--window-ms") o->windowMs = static_cast<int>(v);
    else if (a == "--calls") o->calls = static_cast<int>(v);
    else if (a == "--kills") o->kills = static_cast<int>(v);
    else return false;
  }
  return o->ranks >= 2 && o->ranks <= kMaxRanks && o->timeoutS >= 1 && o->kills >= 1 && o->kills < o->ranks;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr, "usage: live_soak [--runs N] [--ranks 2..16] [--seed S] [--timeout-s T] [--window-ms W] "
                         "[--calls C] [--kills K] [--verbose]\n");
    return 2;
  }
  if (o.seed == 0) o.seed = soak::monotonicNs();
  setenv("PLAIT_TIMEOUT", std::to_string(o.timeoutS).c_str(), 1);
  setenv("PLAIT_LIVE_RANKS", "1", 1);
  signal(SIGPIPE, SIG_IGN);
  std::mt19937_64 rng(o.seed);
  std::printf("live_soak: %d runs of %d ranks, %d kill(s), %d calls each, seed %llu, timeout %d s, kill within %d ms\n",
              o.runs, o.ranks, o.kills, o.calls, static_cast<unsigned long long>(o.seed), o.timeoutS, o.windowMs);
  std::vector<double> recover;
  int failed = 0, lost = 0;
  const uint64_t t0 = soak::monotonicNs();
  for (int run = 0; run < o.runs; ++run) {
    std::string when;
    RunResult r = oneRun(o, rng, &when);
    recover.insert(recover.end(), r.recoverMs.begin(), r.recoverMs.end());
    if (r.lost) ++lost;
    if (!r.failures.empty()) ++failed;
    for (const std::string& f : r.failures) std::printf("run %d (kill at %s): FAIL %s\n", run, when.c_str(), f.c_str());
    if (o.verbose && r.failures.empty())
      std::printf("run %d (kill at %s): ok%s\n", run, when.c_str(), r.lost ? ", went on over the survivors" : "");
    std::fflush(stdout);
  }
  std::printf("live_soak: %d of %d runs passed in %.1f s; %d lost a rank mid-list and went on over the survivors\n",
              o.runs - failed, o.runs, static_cast<double>(soak::monotonicNs() - t0) / 1e9, lost);
  std::printf("live_soak: the call that ran again took (ms) p50 %.1f p90 %.1f max %.1f over %zu survivors' calls\n",
              soak::percentile(recover, 50), soak::percentile(recover, 90), soak::percentile(recover, 100),
              recover.size());
  return failed == 0 && (o.runs < 5 || lost > 0) ? 0 : 1;
}
