// tools/perf/harness.cc — runPerfTool: ranks, communicators, the sweep, the
// timing, the check and the report.
//
// Layout: every process runs -t threads; every thread drives -g ranks, issuing
// their calls inside ncclGroupStart/End when -g > 1. Global rank =
// (process * threads + thread) * g + index. Process 0's thread 0 (global
// rank 0) prints. Cross-rank statistics (time per -a, #wrong sums, device
// lines) travel through ncclAllReduce on float64/uint8.
//
// Failures: any call that fails prints one line naming the rank, the call,
// ncclGetErrorString and ncclGetLastError, aborts this process's
// communicators and exits 1. The -T watchdog does the same when one size step
// (or init) takes longer than -T seconds.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "launch_env.h"
#include "options.h"
#include "perf_table.h"
#include "plait/memory.hpp"
#include "run/core_binding.h"

namespace plait::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDeviceLineBytes = 128;
constexpr uint8_t kSentinelByte = 0xA5;  // never a pattern value in any type

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string hostName() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

// One rank driven by a thread.
struct RankState {
  int rank = 0;
  ncclComm_t comm = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  bool fromNccl[2] = {false, false};
  void* regHandles[2] = {nullptr, nullptr};  // -R 1
  ncclWindow_t windows[2] = {nullptr, nullptr};  // -R 2
  ncclRedOp_t op = ncclSum;
  bool opCreated = false;
  double scratch = 0;  // statistics travel through here
};

// State shared by every thread of this process.
struct Job {
  const CollSpec* spec = nullptr;
  Options opts;
  ProcessLayout layout;
  int nranks = 1;
  ncclUniqueId id{};
  std::vector<size_t> sizes;
  size_t sendCap = 0;  // bytes per rank
  size_t recvCap = 0;
  std::mutex mutex;    // guards comms, labels and output
  std::vector<ncclComm_t> comms;
  std::unique_ptr<std::atomic<int64_t>[]> deadlines;  // per thread; 0: none
  std::vector<std::string> labels;
  std::vector<int> threadCpus;  // CPU of each -t thread (--bind_threads); empty: unbound
  std::unique_ptr<std::atomic<int>[]> runningOn;  // where each bound thread ran once bound
  std::atomic<bool> failing{false};
  std::atomic<bool> done{false};
  std::atomic<int> exitCode{0};
  JsonReport report;
};

struct ThreadState {
  Job* job = nullptr;
  int index = 0;
  bool printer = false;
  std::vector<RankState> ranks;
  long long wrongTotal = 0;
  double busBwSum = 0;
  int busBwCount = 0;
};

// Prints `message`, aborts this process's communicators and exits 1. Only
// the first caller proceeds; a guard thread exits if an abort hangs.
[[noreturn]] void failJob(Job& job, const std::string& message) {
  if (job.failing.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    std::fprintf(stdout, "%s\n", message.c_str());
    std::fflush(stdout);
  }
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(1);
  }).detach();
  std::vector<ncclComm_t> comms;
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    comms = job.comms;
  }
  for (ncclComm_t comm : comms) (void)ncclCommAbort(comm);
  std::fflush(stdout);
  std::_Exit(1);
}

void checkCall(Job& job, const RankState* rank, const char* call, ncclResult_t result) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(rank ? rank->comm : nullptr);
  char buf[1024];
  std::snprintf(buf, sizeof buf, "# Rank %d (pid %d on %s): %s failed: %s (%d): %s", rank ? rank->rank : -1,
                static_cast<int>(getpid()), hostName().c_str(), call, ncclGetErrorString(result),
                static_cast<int>(result), last && *last ? last : "(no message)");
  failJob(job, buf);
}

void setDeadline(ThreadState& ts, const std::string& label) {
  Job& job = *ts.job;
  if (job.opts.timeoutSec <= 0) return;
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    job.labels[ts.index] = label;
  }
  job.deadlines[ts.index].store(nowNs() + int64_t{job.opts.timeoutSec} * 1000000000);
}

void watchdogMain(Job* job) {
  while (!job->done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int t = 0; t < job->opts.nThreads; ++t) {
      int64_t deadline = job->deadlines[t].load();
      if (deadline == 0 || nowNs() < deadline) continue;
      std::string label;
      {
        std::lock_guard<std::mutex> lock(job->mutex);
        label = job->labels[t];
      }
      int first = (job->layout.procRank * job->opts.nThreads + t) * job->opts.nGpus;
      char buf[512];
      std::snprintf(buf, sizeof buf, "# Rank %d (pid %d on %s): timeout: %s did not complete within -T %d s",
                    first, static_cast<int>(getpid()), hostName().c_str(), label.c_str(), job->opts.timeoutSec);
      failJob(*job, buf);
    }
  }
}

void initComms(ThreadState& ts) {
  Job& job = *ts.job;
  const Options& o = job.opts;
  int base = (job.layout.procRank * o.nThreads + ts.index) * o.nGpus;
  ts.ranks.resize(o.nGpus);
  for (int g = 0; g < o.nGpus; ++g) ts.ranks[g].rank = base + g;
  setDeadline(ts, "communicator initialisation");
  if (job.layout.nProcs == 1 && o.nThreads == 1) {
    std::vector<ncclComm_t> comms(o.nGpus);
    checkCall(job, &ts.ranks[0], "ncclCommInitAll", ncclCommInitAll(comms.data(), o.nGpus, nullptr));
    for (int g = 0; g < o.nGpus; ++g) ts.ranks[g].comm = comms[g];
  } else {
    if (o.nGpus > 1) checkCall(job, &ts.ranks[0], "ncclGroupStart", ncclGroupStart());
    for (RankState& r : ts.ranks) {
      checkCall(job, &r, "ncclCommInitRank", ncclCommInitRank(&r.comm, job.nranks, job.id, r.rank));
    }
    if (o.nGpus > 1) checkCall(job, &ts.ranks[0], "ncclGroupEnd", ncclGroupEnd());
  }
  std::lock_guard<std::mutex> lock(job.mutex);
  for (RankState& r : ts.ranks) job.comms.push_back(r.comm);
}

void* allocBuffer(size_t bytes, bool heap, bool* fromNccl) {
  bytes = std::max<size_t>(bytes, 4096);
  void* p = nullptr;
  // Host memory peers can map (the harness times host collectives; plain
  // ncclMemAlloc would give device memory on a GPU machine), unless the
  // heap's was asked for (--host_alloc malloc: what MPI's and torch's
  // benchmarks time, whose pages may differ, e.g. in huge pages).
  *fromNccl = false;
  if (!heap) {
    plait::Result<void*> shared = plait::hostMemAlloc(bytes);
    *fromNccl = shared.isOk();
    if (*fromNccl) p = *shared;
  }
  if (p == nullptr) p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p != nullptr) std::memset(p, 0, bytes);  // first touch, outside the timing
  return p;
}

void freeBuffer(void* p, bool fromNccl) {
  if (p == nullptr) return;
  if (fromNccl) {
    (void)ncclMemFree(p);
  } else {
    std::free(p);
  }
}

// -R: registers (or, with register false, deregisters) this thread's
// buffers, as nccl-tests' local_register does, so collectives on them may
// use the direct path.
void registerBuffers(ThreadState& ts, bool reg) {
  Job& job = *ts.job;
  const int mode = job.opts.localRegister;
  if (mode == 0) return;
  for (RankState& r : ts.ranks) {
    void* bufs[2] = {r.send, r.recv};
    const size_t caps[2] = {std::max<size_t>(job.sendCap, 4096), std::max<size_t>(job.recvCap, 4096)};
    for (int b = 0; b < 2; ++b) {
      if (mode == 1 && reg) {
        checkCall(job, &r, "ncclCommRegister", ncclCommRegister(r.comm, bufs[b], caps[b], &r.regHandles[b]));
      } else if (mode == 1) {
        checkCall(job, &r, "ncclCommDeregister", ncclCommDeregister(r.comm, r.regHandles[b]));
      } else if (reg) {
        checkCall(job, &r, "ncclCommWindowRegister",
                  ncclCommWindowRegister(r.comm, bufs[b], caps[b], &r.windows[b], NCCL_WIN_COLL_SYMMETRIC));
      } else {
        checkCall(job, &r, "ncclCommWindowDeregister", ncclCommWindowDeregister(r.comm, r.windows[b]));
      }
    }
  }
}

// Runs `calls` (one per local rank) `agg` times, grouped when more than one.
void runCalls(ThreadState& ts, const std::vector<CollCall>& calls, int agg) {
  Job& job = *ts.job;
  bool group = calls.size() > 1 || agg > 1;
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupStart", ncclGroupStart());
  for (int a = 0; a < agg; ++a) {
    for (size_t i = 0; i < calls.size(); ++i) {
      checkCall(job, &ts.ranks[i], job.spec->ncclCall, job.spec->call(calls[i]));
    }
  }
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupEnd", ncclGroupEnd());
}

// All-reduces one double per local rank (in RankState::scratch); every rank
// ends with the same value, which is returned.
double reduceScratch(ThreadState& ts, ncclRedOp_t op) {
  Job& job = *ts.job;
  bool group = ts.ranks.size() > 1;
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupStart", ncclGroupStart());
  for (RankState& r : ts.ranks) {
    checkCall(job, &r, "ncclAllReduce (cross-rank statistics)",
              ncclAllReduce(&r.scratch, &r.scratch, 1, ncclFloat64, op, r.comm, nullptr));
  }
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupEnd", ncclGroupEnd());
  return ts.ranks[0].scratch;
}

// Every rank starts its clock at once, as nccl-tests does (its Barrier after
// the sync call) and so do perf/'s MPI, Gloo and oneCCL programs. Without
// it a rank that reached this size early times the others' arrival: in a
// rooted collective the non-roots wait for nobody and run ahead until the
// root's FIFO is full, then wait out the root's lag inside the timed loop.
void barrier(ThreadState& ts) {
  for (RankState& r : ts.ranks) r.scratch = 0;
  reduceScratch(ts, ncclSum);
}

// The -t threads' CPUs, once every thread has bound itself (they all took
// part in the collective before this): each bound thread reported where it
// ran right after binding.
void printBinding(const Job& job) {
  if (job.threadCpus.empty()) return;
  std::string cpus, astray;
  for (size_t t = 0; t < job.threadCpus.size(); ++t) {
    cpus += " " + std::to_string(job.threadCpus[t]);
    const int on = job.runningOn[t].load();
    if (on != job.threadCpus[t])
      astray += " thread " + std::to_string(t) + " ran on CPU " + std::to_string(on) + ";";
  }
  std::printf("# Threads bound to CPUs%s, %s (--bind_threads 0: unbound)\n", cpus.c_str(),
              astray.empty() ? "each running there" : ("but" + astray + " not running where bound").c_str());
}

void printDevices(ThreadState& ts) {
  Job& job = *ts.job;
  size_t total = static_cast<size_t>(job.nranks) * kDeviceLineBytes;
  std::vector<std::vector<char>> lines(ts.ranks.size(), std::vector<char>(total, 0));
  for (size_t g = 0; g < ts.ranks.size(); ++g) {
    const RankState& r = ts.ranks[g];
    std::snprintf(lines[g].data() + static_cast<size_t>(r.rank) * kDeviceLineBytes, kDeviceLineBytes,
                  "#  Rank %2d Group  0 Pid %6d on %10s device %2d [cpu] host memory", r.rank,
                  static_cast<int>(getpid()), hostName().c_str(), static_cast<int>(g));
  }
  bool group = ts.ranks.size() > 1;
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupStart", ncclGroupStart());
  for (size_t g = 0; g < ts.ranks.size(); ++g) {
    checkCall(job, &ts.ranks[g], "ncclAllReduce (device lines)",
              ncclAllReduce(lines[g].data(), lines[g].data(), total, ncclUint8, ncclSum, ts.ranks[g].comm, nullptr));
  }
  if (group) checkCall(job, &ts.ranks[0], "ncclGroupEnd", ncclGroupEnd());
  if (!ts.printer) return;
  std::lock_guard<std::mutex> lock(job.mutex);
  printBinding(job);
  std::printf("#\n# Using devices\n");
  for (int r = 0; r < job.nranks; ++r) {
    std::string line(lines[0].data() + static_cast<size_t>(r) * kDeviceLineBytes);
    std::printf("%s\n", line.c_str());
    job.report.devices.push_back(line);
  }
  std::fflush(stdout);
}

// What one (type, op) sweep needs besides the thread.
struct SweepContext {
  ncclDataType_t type;
  TestOp op;
  std::vector<PatternTable> inputs;
  PatternTable reduced;
};

std::vector<CollCall> makeCalls(ThreadState& ts, const SweepContext& sc, size_t count, bool inPlace) {
  Job& job = *ts.job;
  size_t elt = typeSize(sc.type);
  std::vector<CollCall> calls;
  for (RankState& r : ts.ranks) {
    CollSizes s = job.spec->sizes(count, job.nranks, r.rank);
    CollCall c;
    auto* recv = static_cast<char*>(r.recv);
    c.sendbuff = inPlace ? recv + s.sendInplaceOffset * elt : r.send;
    c.recvbuff = inPlace ? recv + s.recvInplaceOffset * elt : recv;
    c.count = s.paramCount;
    c.type = sc.type;
    c.op = r.op;
    c.root = job.opts.root;
    c.rank = r.rank;
    c.nranks = job.nranks;
    c.comm = r.comm;
    calls.push_back(c);
  }
  return calls;
}

// Fills this thread's ranks' inputs with the pattern and their outputs with
// sentinels.
void fillInputs(ThreadState& ts, const SweepContext& sc, size_t count, bool inPlace) {
  Job& job = *ts.job;
  size_t elt = typeSize(sc.type);
  for (RankState& r : ts.ranks) {
    CollSizes s = job.spec->sizes(count, job.nranks, r.rank);
    auto* recv = static_cast<char*>(r.recv);
    std::memset(recv, kSentinelByte, std::max(s.sendCount, s.recvCount) * elt);
    void* input = inPlace ? recv + s.sendInplaceOffset * elt : r.send;
    fillPattern(input, s.sendCount, sc.inputs[r.rank], 0);
  }
}

// Fills inputs and sentinels, runs the collective once and counts wrong
// elements on this thread's ranks.
long long checkOnce(ThreadState& ts, const SweepContext& sc, size_t count, bool inPlace) {
  Job& job = *ts.job;
  size_t elt = typeSize(sc.type);
  fillInputs(ts, sc, count, inPlace);
  runCalls(ts, makeCalls(ts, sc, count, inPlace), 1);
  long long wrong = 0;
  for (RankState& r : ts.ranks) {
    ExpectContext ctx;
    ctx.rank = r.rank;
    ctx.nranks = job.nranks;
    ctx.root = job.opts.root;
    ctx.sizes = job.spec->sizes(count, job.nranks, r.rank);
    ctx.inputs = &sc.inputs;
    ctx.reduced = &sc.reduced;
    std::vector<ExpectedSegment> segments;
    job.spec->expect(ctx, segments);
    const char* out = static_cast<const char*>(r.recv) + (inPlace ? ctx.sizes.recvInplaceOffset * elt : 0);
    for (const ExpectedSegment& seg : segments) {
      wrong += static_cast<long long>(countWrong(out + seg.offset * elt, seg.count, *seg.table, seg.phase));
    }
  }
  return wrong;
}

Measurement measure(ThreadState& ts, const SweepContext& sc, size_t count, bool inPlace) {
  Job& job = *ts.job;
  const Options& o = job.opts;
  std::vector<CollCall> calls = makeCalls(ts, sc, count, inPlace);
  // Timed on the pattern, as MPI's and torch's benchmarks time real values,
  // not on the zeros the buffers start with.
  fillInputs(ts, sc, count, inPlace);
  for (int i = 0; i < o.warmupIters; ++i) runCalls(ts, calls, o.aggIters);
  barrier(ts);
  auto start = Clock::now();
  for (int i = 0; i < o.iters; ++i) runCalls(ts, calls, o.aggIters);
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  double timeUs = o.iters > 0 ? us / (static_cast<double>(o.iters) * o.aggIters) : 0;
  long long wrong = o.check ? checkOnce(ts, sc, count, inPlace) : 0;

  const ncclRedOp_t timeOps[] = {ncclSum, ncclSum, ncclMin, ncclMax};
  for (RankState& r : ts.ranks) r.scratch = (o.average == 0 && r.rank != 0) ? 0 : timeUs;
  timeUs = reduceScratch(ts, timeOps[o.average]);
  if (o.average == 1) timeUs /= job.nranks;
  if (o.check) {
    for (size_t g = 0; g < ts.ranks.size(); ++g) ts.ranks[g].scratch = g == 0 ? static_cast<double>(wrong) : 0;
    wrong = static_cast<long long>(reduceScratch(ts, ncclSum));
    // Sum over threads: each thread's first rank contributed its thread's count.
  }
  CollSizes s = job.spec->sizes(count, job.nranks, 0);
  size_t bytes = std::max(s.sendCount, s.recvCount) * typeSize(sc.type);
  return makeMeasurement(bytes, timeUs, job.spec->busFactor(job.nranks), o.check ? wrong : -1);
}

void createOps(ThreadState& ts, ncclDataType_t type, TestOp op) {
  for (RankState& r : ts.ranks) {
    r.opCreated = false;
    switch (op) {
      case TestOp::kProd: r.op = ncclProd; break;
      case TestOp::kMax: r.op = ncclMax; break;
      case TestOp::kMin: r.op = ncclMin; break;
      case TestOp::kAvg: r.op = ncclAvg; break;
      default: r.op = ncclSum; break;
    }
    if (op != TestOp::kMulSum) continue;
    alignas(8) unsigned char scalar[8] = {0};
    encodeValue(type, 2.0, scalar);
    checkCall(*ts.job, &r, "ncclRedOpCreatePreMulSum",
              ncclRedOpCreatePreMulSum(&r.op, scalar, type, ncclScalarHostImmediate, r.comm));
    r.opCreated = true;
  }
}

void runSweep(ThreadState& ts, ncclDataType_t type, TestOp op) {
  Job& job = *ts.job;
  SweepContext sc{type, op, {}, reducedPattern(type, op, job.nranks)};
  for (int r = 0; r < job.nranks; ++r) sc.inputs.push_back(rankPattern(type, op, r, job.nranks));
  createOps(ts, type, op);
  for (size_t bytes : job.sizes) {
    size_t count = bytes / typeSize(type);
    setDeadline(ts, std::string(job.spec->ncclCall) + " of " + std::to_string(bytes) + " bytes (" +
                        typeName(type) + ", " + opName(op) + ")");
    TableRow row;
    row.outOfPlace = measure(ts, sc, count, false);
    row.inPlace = measure(ts, sc, count, true);
    CollSizes s = job.spec->sizes(count, job.nranks, 0);
    row.count = std::max(s.sendCount, s.recvCount);
    row.bytes = row.count * typeSize(type);
    row.type = typeName(type);
    row.redop = opName(op);
    row.root = job.spec->hasRoot ? job.opts.root : -1;
    ts.wrongTotal += std::max(0LL, row.outOfPlace.wrong) + std::max(0LL, row.inPlace.wrong);
    ts.busBwSum += row.outOfPlace.busBw + row.inPlace.busBw;
    ts.busBwCount += 2;
    if (ts.printer) {
      std::lock_guard<std::mutex> lock(job.mutex);
      std::printf("%s\n", formatRow(row).c_str());
      std::fflush(stdout);
      job.report.rows.push_back(row);
    }
  }
  job.deadlines[ts.index].store(0);
  for (RankState& r : ts.ranks) {
    if (r.opCreated) checkCall(job, &r, "ncclRedOpDestroy", ncclRedOpDestroy(r.op, r.comm));
  }
}

void finishThread(ThreadState& ts) {
  Job& job = *ts.job;
  double avgBusBw = ts.busBwCount ? ts.busBwSum / ts.busBwCount : 0;
  if (ts.printer) {
    std::lock_guard<std::mutex> lock(job.mutex);
    printFooter(stdout, ts.wrongTotal, avgBusBw);
    job.report.wrongTotal = ts.wrongTotal;
    job.report.avgBusBw = avgBusBw;
  }
  if (ts.wrongTotal != 0) job.exitCode.store(1);
  registerBuffers(ts, false);
  for (RankState& r : ts.ranks) {
    checkCall(job, &r, "ncclCommDestroy", ncclCommDestroy(r.comm));
    {
      std::lock_guard<std::mutex> lock(job.mutex);
      job.comms.erase(std::remove(job.comms.begin(), job.comms.end(), r.comm), job.comms.end());
    }
    freeBuffer(r.send, r.fromNccl[0]);
    freeBuffer(r.recv, r.fromNccl[1]);
  }
}

// The CPUs the -t threads are bound to, one each, in plait-run's order (a
// thread of every core before second threads): none (unbound) for one
// thread, without --bind_threads, where the process has fewer CPUs than
// threads, where the job has other processes (binding them is the
// launcher's; processes sharing one mask would all pick the same CPUs), or
// with -g > 1 (the library's group worker would inherit its thread's one
// CPU). Unbound threads that talk through futex wake-ups can start on one
// CPU and stay there for milliseconds, each hand-off then a context switch:
// the first size of half of the 3000-call runs of a 2-thread 8-byte
// AllReduce read 1.3-15 us instead of 0.24 (perf/results/host/launch_modes.md).
std::vector<int> threadCpus(const Options& o, const ProcessLayout& layout) {
  if (!o.bindThreads || o.nThreads < 2 || o.nGpus > 1 || layout.nProcs > 1) return {};
  std::string why;
  return plait::run::planCoreBinding(o.nThreads, &why);
}

void threadMain(Job* job, int index) {
  if (!job->threadCpus.empty()) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(job->threadCpus[index], &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0)
      std::fprintf(stderr, "# thread %d: cannot bind to CPU %d; running unbound\n", index, job->threadCpus[index]);
    job->runningOn[index].store(sched_getcpu());  // binding moved the thread at once
  }
  ThreadState ts;
  ts.job = job;
  ts.index = index;
  ts.printer = job->layout.procRank == 0 && index == 0;
  initComms(ts);
  for (RankState& r : ts.ranks) {
    r.send = allocBuffer(job->sendCap, job->opts.hostMalloc, &r.fromNccl[0]);
    r.recv = allocBuffer(job->recvCap, job->opts.hostMalloc, &r.fromNccl[1]);
    if (r.send == nullptr || r.recv == nullptr) failJob(*job, "# Rank " + std::to_string(r.rank) + ": out of memory");
  }
  registerBuffers(ts, true);
  printDevices(ts);
  if (ts.printer) printTableHeader(stdout);
  for (ncclDataType_t type : job->opts.types) {
    std::vector<TestOp> ops = job->spec->hasOp ? job->opts.ops : std::vector<TestOp>{TestOp::kNone};
    for (TestOp op : ops) runSweep(ts, type, op);
  }
  finishThread(ts);
}

// Buffer capacities: the largest send and receive sizes of the sweep.
void sizeBuffers(Job& job) {
  for (ncclDataType_t type : job.opts.types) {
    size_t elt = typeSize(type);
    for (size_t bytes : job.sizes) {
      for (int r = 0; r < job.nranks; ++r) {
        CollSizes s = job.spec->sizes(bytes / elt, job.nranks, r);
        job.sendCap = std::max(job.sendCap, s.sendCount * elt);
        job.recvCap = std::max(job.recvCap, std::max(s.sendCount, s.recvCount) * elt);
      }
    }
  }
}

void printSettings(const Job& job) {
  const Options& o = job.opts;
  char step[64];
  if (o.stepFactor > 1) {
    std::snprintf(step, sizeof step, "%g(factor)", o.stepFactor);
  } else {
    std::snprintf(step, sizeof step, "%zu(bytes)", o.stepBytes);
  }
  std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: %d "
              "validation: %d graph: 0\n",
              o.nThreads, o.nGpus, o.minBytes, o.maxBytes, step, o.warmupIters, o.iters, o.aggIters, o.check);
  std::printf("# Plait %s: %d ranks in %d process(es), launcher %s\n", job.spec->name, job.nranks,
              job.layout.nProcs, job.layout.launcher.c_str());
  std::fflush(stdout);
}

void fillReportSettings(Job& job, const char* program) {
  const Options& o = job.opts;
  JsonReport& rep = job.report;
  rep.program = program;
  rep.collective = job.spec->name;
  rep.nranks = job.nranks;
  rep.settings = {{"nThread", std::to_string(o.nThreads)}, {"nGpus", std::to_string(o.nGpus)},
                  {"minBytes", std::to_string(o.minBytes)}, {"maxBytes", std::to_string(o.maxBytes)},
                  {"stepFactor", std::to_string(o.stepFactor)}, {"stepBytes", std::to_string(o.stepBytes)},
                  {"iters", std::to_string(o.iters)}, {"warmupIters", std::to_string(o.warmupIters)},
                  {"aggIters", std::to_string(o.aggIters)}, {"check", std::to_string(o.check)},
                  {"average", std::to_string(o.average)}, {"root", std::to_string(o.root)},
                  {"launcher", job.layout.launcher}, {"nProcs", std::to_string(job.layout.nProcs)},
                  {"localRegister", std::to_string(o.localRegister)},
                  {"hostAlloc", o.hostMalloc ? "malloc" : "shared"}};
}

}  // namespace

int runPerfTool(const CollSpec& spec, int argc, char** argv) {
  Job job;
  job.spec = &spec;
  int exitCode = 0;
  if (!parseOptions(argc, argv, &job.opts, &exitCode)) return exitCode;
  std::string error;
  if (!detectProcessLayout(&job.layout, &error)) {
    std::fprintf(stderr, "%s: %s\n", argv[0], error.c_str());
    return 1;
  }
  const Options& o = job.opts;
  job.nranks = job.layout.nProcs * o.nThreads * o.nGpus;
  if (spec.hasRoot && o.root >= job.nranks) {
    std::fprintf(stderr, "%s: -r %d is not a rank (there are %d)\n", argv[0], o.root, job.nranks);
    return 1;
  }
  if (job.layout.procRank == 0) printSettings(job);
  ncclResult_t r = sharedUniqueId(&job.layout, o.timeoutSec, &job.id, &error);
  if (r != ncclSuccess) {
    std::printf("# Process %d: cannot obtain the unique id: %s: %s\n", job.layout.procRank, ncclGetErrorString(r),
                error.empty() ? ncclGetLastError(nullptr) : error.c_str());
    return 1;
  }
  job.sizes = sizeSteps(o);
  sizeBuffers(job);
  fillReportSettings(job, argv[0]);
  job.deadlines = std::make_unique<std::atomic<int64_t>[]>(o.nThreads);
  for (int t = 0; t < o.nThreads; ++t) job.deadlines[t].store(0);
  job.labels.resize(o.nThreads);
  job.threadCpus = threadCpus(o, job.layout);
  job.runningOn = std::make_unique<std::atomic<int>[]>(o.nThreads);
  for (int t = 0; t < o.nThreads; ++t) job.runningOn[t].store(-1);
  std::thread watchdog;
  if (o.timeoutSec > 0) watchdog = std::thread(watchdogMain, &job);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.nThreads; ++t) threads.emplace_back(threadMain, &job, t);
  for (std::thread& t : threads) t.join();
  job.done.store(true);
  if (watchdog.joinable()) watchdog.join();
  removeRendezvousFile(job.layout);
  if (job.layout.procRank == 0 && !o.jsonPath.empty() && !writeJsonReport(o.jsonPath, job.report)) return 1;
  return job.exitCode.load();
}

}  // namespace plait::perf
