// perf/memcpy/cma_perf.cc — the single copy between processes, in the *_perf
// table format: the physical reference for the collectives that move data
// by cross-memory attach (Plait's direct path, Open MPI's default CMA).
//
//   cma_perf [-p processes] [-b min] [-e max] [-f factor] [-n iters] [-w warmup]
//
// -p processes (forked, like N ranks; not bound to cores, as memcpy_perf's
// threads are not) each copy S bytes at the same time out of the next
// process's buffer (process i reads process i+1 mod N) with
// process_vm_readv. The row reports S, the mean time of one copy (averaged
// over processes), algbw = S/time per process and busbw = algbw. The
// out-of-place column is that read; the in-place column is memcpy of the
// process's own buffer by every process at once (the same bytes without
// crossing processes). #wrong checks the last read byte for byte against the
// neighbour's pattern.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/peer_reference.h"
#include "perf_table.h"

namespace {

constexpr int kMaxProcesses = 64;
constexpr auto kBarrierTimeout = std::chrono::seconds(120);

struct Options {
  int processes = 2;
  size_t minBytes = 8, maxBytes = 32u << 20;
  double factor = 2;
  int iters = 20, warmup = 1;
};

bool parseArgs(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "p:b:e:f:n:w:")) != -1) {
    switch (c) {
      case 'p': o->processes = std::atoi(optarg); break;
      case 'b': o->minBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'e': o->maxBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'f': o->factor = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      default: return false;
    }
  }
  return o->factor > 1 && o->minBytes > 0 && o->minBytes <= o->maxBytes && o->processes >= 1 &&
         o->processes <= kMaxProcesses && o->iters >= 1 && o->warmup >= 0;
}

// Shared by every process (an anonymous shared mapping made before fork).
struct Shared {
  std::atomic<int> arrived;
  std::atomic<int> generation;
  std::atomic<int> failed;  // a process gave up: the others stop waiting
  pid_t pids[kMaxProcesses];
  double us[kMaxProcesses];
  long long wrong[kMaxProcesses];
  double busSum;  // process 0's rows, for the footer
  int rows;
};

// Waits for every process; yields while waiting (the processes may share
// cores). False when a process failed or the wait ran past its deadline.
bool barrier(Shared* s, int n) {
  const int gen = s->generation.load(std::memory_order_acquire);
  if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
    s->arrived.store(0, std::memory_order_relaxed);
    s->generation.store(gen + 1, std::memory_order_release);
    return s->failed.load() == 0;
  }
  const auto deadline = std::chrono::steady_clock::now() + kBarrierTimeout;
  while (s->generation.load(std::memory_order_acquire) == gen) {
    if (s->failed.load(std::memory_order_relaxed) != 0) return false;
    if (std::chrono::steady_clock::now() > deadline) {
      s->failed.store(1);
      return false;
    }
    std::this_thread::yield();
  }
  return s->failed.load() == 0;
}

// Process `me`: every size, the read from its neighbour and the local copy.
// Returns 0 or 1 (a failed read or barrier).
int runProcess(const Options& o, Shared* s, int me, char* src, char* dst) {
  const int n = o.processes;
  const int peer = (me + 1) % n;
  std::memset(src, static_cast<char>(me + 1), o.maxBytes);
  if (!barrier(s, n)) return 1;  // every pid is published
  const pid_t peerPid = s->pids[peer];
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * o.factor))) {
    auto read = [&]() {
      iovec local{dst, bytes}, remote{src, bytes};  // the peer's src lies at the same address (forked)
      return process_vm_readv(peerPid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(bytes);
    };
    for (int i = 0; i < o.warmup; ++i)
      if (!read()) s->failed.store(1);
    if (!barrier(s, n)) return 1;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i)
      if (!read()) s->failed.store(1);
    const double readUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    long long wrong = 0;
    for (size_t i = 0; i < bytes; ++i) wrong += dst[i] != static_cast<char>(peer + 1);
    if (!barrier(s, n)) return 1;
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) std::memcpy(dst, src, bytes);
    const double copyUs = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    s->us[me] = readUs / o.iters;
    s->wrong[me] += wrong;  // every size's, for the footer and the exit status
    if (!barrier(s, n)) return 1;
    if (me == 0) {
      double readSum = 0;
      long long bad = 0;
      for (int p = 0; p < n; ++p) {
        readSum += s->us[p];
        bad += s->wrong[p];
      }
      const double copy = copyUs / o.iters;  // process 0's; every process copies at once
      plait::perf::TableRow row{bytes, bytes, "uint8", "none", -1,
                                plait::perf::makeMeasurement(bytes, readSum / n, 1.0, bad),
                                plait::perf::makeMeasurement(bytes, copy, 1.0, 0)};
      std::printf("%s\n", plait::perf::formatRow(row).c_str());
      std::fflush(stdout);
      s->busSum += row.outOfPlace.busBw;
      ++s->rows;
    }
    if (!barrier(s, n)) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseArgs(argc, argv, &o)) {
    std::fprintf(stderr, "usage: %s [-p processes 1..%d] [-b min] [-e max] [-f factor>1] [-n iters>0] [-w warmup]\n",
                 argv[0], kMaxProcesses);
    return 1;
  }
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("cma_perf: mmap");
    return 1;
  }
  auto* shared = new (mem) Shared();
  // Allocated before fork: every process has its buffers at the same addresses.
  std::vector<char> src(o.maxBytes), dst(o.maxBytes);
  std::printf("# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
              "agg iters: 1 validation: 1 graph: 0\n", o.processes, o.minBytes, o.maxBytes, o.factor, o.warmup,
              o.iters);
  std::printf("# cma: %d process(es) each reading its neighbour's buffer at once (process_vm_readv); "
              "out-of-place = that read, in-place = memcpy within each process\n", o.processes);
  plait::perf::printTableHeader(stdout);
  std::fflush(stdout);
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
  shared->pids[0] = getpid();
  std::vector<pid_t> children;
  for (int p = 1; p < o.processes; ++p) {
    const pid_t child = fork();
    if (child < 0) {
      std::perror("cma_perf: fork");
      shared->failed.store(1);
      break;
    }
    if (child == 0) {
      prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);  // Yama's ptrace_scope 1: let the siblings read us
      shared->pids[p] = getpid();
      _exit(runProcess(o, shared, p, src.data(), dst.data()));
    }
    children.push_back(child);
  }
  int rc = shared->failed.load() ? 1 : runProcess(o, shared, 0, src.data(), dst.data());
  for (pid_t c : children) {
    int status = 0;
    if (waitpid(c, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  long long wrong = 0;
  for (int p = 0; p < o.processes; ++p) wrong += shared->wrong[p];
  if (rc != 0) std::fprintf(stderr, "cma_perf: a process failed (process_vm_readv refused, or a barrier timed out)\n");
  plait::perf::printFooter(stdout, wrong, shared->rows ? shared->busSum / shared->rows : 0);
  return rc == 0 && wrong == 0 ? 0 : 1;
}
