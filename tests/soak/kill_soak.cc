// kill_soak — the kill-anywhere soak (issue 15 item 6). Each run forks N
// ranks that loop over a checked mix of collectives, point-to-point groups
// and splits (soak_workload.h), SIGKILLs one of them at a random instant
// (during init, a collective, a split...), and then requires of every
// survivor:
//   - its failing call returns an error within the timeout (+ slack) of the
//     kill: nothing hangs;
//   - the error names the dead rank (its rank in the failing communicator,
//     or its pid): not just "a remote error";
//   - ncclCommAbort afterwards returns promptly;
//   - no call returned a wrong result before failing;
// and of the run: no shared-memory segment of any of its processes is left
// in /dev/shm once they are gone.
//
//   kill_soak [--runs 100] [--ranks 4] [--seed S] [--timeout-s 10]
//             [--window-ms 400] [--verbose]
// Prints each failure and a summary: runs, where the kills landed, the
// detection time (kill -> survivor's error) percentiles. Exit 0 when every
// run passed. PLAIT_TIMEOUT is set to --timeout-s for the ranks.
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "soak_process.h"
#include "soak_workload.h"

namespace {

struct Options {
  int runs = 100;
  int ranks = 4;
  uint64_t seed = 0;
  int timeoutS = 10;
  int windowMs = 400;
  bool verbose = false;
};

struct RunResult {
  std::vector<std::string> failures;
  std::vector<double> detectMs;  // kill -> each survivor's error
  std::map<std::string, int> phases;  // where the survivors were when they failed
  double maxAbortMs = 0;
};

bool usage(const char* why) {
  std::fprintf(stderr, "kill_soak: %s\nusage: kill_soak [--runs N] [--ranks N] [--seed S] [--timeout-s T] "
               "[--window-ms W] [--verbose]\n", why);
  return false;
}

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--verbose") { o->verbose = true; continue; }
    if (i + 1 >= argc) return usage(("missing value after " + a).c_str());
    char* end = nullptr;
    const long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) return usage(("bad value for " + a + ": " + argv[i]).c_str());
    if (a == "--runs") o->runs = static_cast<int>(v);
    else if (a == "--ranks") o->ranks = static_cast<int>(v);
    else if (a == "--seed") o->seed = static_cast<uint64_t>(v);
    else if (a == "--timeout-s") o->timeoutS = static_cast<int>(v);
    else if (a == "--window-ms") o->windowMs = static_cast<int>(v);
    else return usage(("unknown option " + a).c_str());
  }
  if (o->ranks < 2 || o->ranks > 64) return usage("--ranks must be 2..64");
  if (o->timeoutS < 1) return usage("--timeout-s must be at least 1");
  return true;
}

// "rank 12" followed by something other than a digit.
bool namesRank(const std::string& text, int rank) {
  const std::string needle = "rank " + std::to_string(rank);
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    const size_t end = at + needle.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return true;
  }
  return false;
}

bool namesPid(const std::string& text, int pid) {
  const std::string needle = "pid " + std::to_string(pid);
  const size_t at = text.find(needle);
  return at != std::string::npos &&
         (at + needle.size() == text.size() || !std::isdigit(static_cast<unsigned char>(text[at + needle.size()])));
}

// Reads reports until every rank but `victim` reported, or `untilNs`.
std::vector<soak::Report> collect(int fd, int nranks, int victim, uint64_t untilNs) {
  std::vector<soak::Report> got;
  int survivors = 0;
  while (survivors < nranks - 1) {
    const uint64_t now = soak::monotonicNs();
    if (now >= untilNs) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>((untilNs - now) / 1'000'000 + 1)) <= 0) continue;
    soak::Report rep;
    if (read(fd, &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) break;
    got.push_back(rep);
    if (rep.rank != victim) ++survivors;
  }
  return got;
}

// Judges one survivor's report against the kill.
void judge(const soak::Report& rep, int victim, pid_t victimPid, uint64_t killNs, const Options& o, RunResult* out) {
  char where[64];
  std::snprintf(where, sizeof where, "rank %d (%s): ", rep.rank, soak::phaseName(rep.phase));
  const std::string msg = rep.message;
  out->phases[soak::phaseName(rep.phase)]++;
  out->maxAbortMs = std::max(out->maxAbortMs, static_cast<double>(rep.abortNs) / 1e6);
  if (rep.phase == soak::Phase::kWrong) {
    out->failures.push_back(std::string(where) + "a call succeeded with a wrong result: " + msg);
    return;
  }
  if (rep.failedAtNs < killNs) {
    out->failures.push_back(std::string(where) + "failed before the kill: " + msg);
    return;
  }
  const double ms = static_cast<double>(rep.failedAtNs - killNs) / 1e6;
  out->detectMs.push_back(ms);
  if (ms > o.timeoutS * 1000.0 + 2000.0)
    out->failures.push_back(std::string(where) + "error " + std::to_string(ms) + " ms after the kill: " + msg);
  // In the even/odd split child the victim (same parity) is rank victim / 2.
  const bool named = namesRank(msg, victim) || namesPid(msg, victimPid) ||
                     (rep.phase == soak::Phase::kChild && victim % 2 == rep.rank % 2 && namesRank(msg, victim / 2));
  if (!named)
    out->failures.push_back(std::string(where) + "the error does not name rank " + std::to_string(victim) +
                            " (pid " + std::to_string(victimPid) + "): " + msg);
  if (rep.abortNs > 5'000'000'000ull)
    out->failures.push_back(std::string(where) + "ncclCommAbort took " + std::to_string(rep.abortNs / 1'000'000) +
                            " ms");
}

// One run: fork, kill, judge.
RunResult oneRun(const Options& o, std::mt19937_64& rng, std::string* killedWhen) {
  RunResult out;
  ncclUniqueId id;
  const pid_t server = soak::startIdServer(&id);  // before the pipe: it must not hold the pipe's write end
  if (server < 0) { out.failures.push_back("could not start the id server"); return out; }
  int reportPipe[2];
  if (pipe(reportPipe) != 0) { out.failures.push_back("pipe failed"); return out; }
  const uint64_t seed = rng();
  std::vector<pid_t> ranks(static_cast<size_t>(o.ranks), -1);
  for (int r = 0; r < o.ranks; ++r) {
    ranks[static_cast<size_t>(r)] = fork();
    if (ranks[static_cast<size_t>(r)] == 0) {
      close(reportPipe[0]);
      soak::RankArgs args{r, o.ranks, id, reportPipe[1], seed};
      _exit(soak::runRank(args));
    }
  }
  close(reportPipe[1]);
  const int victim = static_cast<int>(rng() % static_cast<uint64_t>(o.ranks));
  const int delayUs = static_cast<int>(rng() % (static_cast<uint64_t>(o.windowMs) * 1000 + 1));
  usleep(static_cast<useconds_t>(delayUs));
  const pid_t victimPid = ranks[static_cast<size_t>(victim)];
  const uint64_t killNs = soak::monotonicNs();
  kill(victimPid, SIGKILL);
  *killedWhen = std::to_string(delayUs / 1000) + " ms, rank " + std::to_string(victim);
  const uint64_t untilNs = killNs + static_cast<uint64_t>(o.timeoutS) * 1'000'000'000ull + 5'000'000'000ull;
  std::vector<soak::Report> reps = collect(reportPipe[0], o.ranks, victim, untilNs);
  close(reportPipe[0]);
  for (const soak::Report& rep : reps) {
    if (rep.rank == victim) continue;  // reported before it was killed: judged like any other
    judge(rep, victim, victimPid, killNs, o, &out);
  }
  std::vector<bool> reported(static_cast<size_t>(o.ranks), false);
  for (const soak::Report& rep : reps)
    if (rep.rank >= 0 && rep.rank < o.ranks) reported[static_cast<size_t>(rep.rank)] = true;
  for (int r = 0; r < o.ranks; ++r)
    if (r != victim && !reported[static_cast<size_t>(r)])
      out.failures.push_back("rank " + std::to_string(r) + " never returned from its call (hang)");
  soak::endRun(ranks, server, &out.failures);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseOptions(argc, argv, &o)) return 2;
  if (o.seed == 0) o.seed = static_cast<uint64_t>(soak::monotonicNs());
  setenv("PLAIT_TIMEOUT", std::to_string(o.timeoutS).c_str(), 1);
  signal(SIGPIPE, SIG_IGN);
  std::mt19937_64 rng(o.seed);
  std::printf("kill_soak: %d runs of %d ranks, seed %llu, timeout %d s, kill within %d ms\n", o.runs, o.ranks,
              static_cast<unsigned long long>(o.seed), o.timeoutS, o.windowMs);
  std::vector<double> detect;
  std::map<std::string, int> phases;
  int failedRuns = 0;
  double maxAbortMs = 0;
  const uint64_t t0 = soak::monotonicNs();
  for (int run = 0; run < o.runs; ++run) {
    std::string when;
    RunResult r = oneRun(o, rng, &when);
    detect.insert(detect.end(), r.detectMs.begin(), r.detectMs.end());
    for (const auto& [k, v] : r.phases) phases[k] += v;
    maxAbortMs = std::max(maxAbortMs, r.maxAbortMs);
    if (!r.failures.empty()) ++failedRuns;
    for (const std::string& f : r.failures) std::printf("run %d (kill at %s): FAIL %s\n", run, when.c_str(), f.c_str());
    if (o.verbose && r.failures.empty())
      std::printf("run %d (kill at %s): ok, detection max %.1f ms\n", run, when.c_str(),
                  r.detectMs.empty() ? 0.0 : *std::max_element(r.detectMs.begin(), r.detectMs.end()));
    std::fflush(stdout);
  }
  std::printf("kill_soak: %d of %d runs passed in %.1f s; %zu survivor errors:", o.runs - failedRuns, o.runs,
              static_cast<double>(soak::monotonicNs() - t0) / 1e9, detect.size());
  for (const auto& [k, v] : phases) std::printf(" %s %d", k.c_str(), v);
  std::printf("\nkill_soak: detection (kill -> error) ms: p50 %.1f p90 %.1f p99 %.1f max %.1f; abort max %.1f ms\n",
              soak::percentile(detect, 50), soak::percentile(detect, 90), soak::percentile(detect, 99), soak::percentile(detect, 100),
              maxAbortMs);
  return failedRuns == 0 ? 0 : 1;
}
