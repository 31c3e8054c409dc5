// bench_fifo — the connector FIFO between two threads pinned to different
// cores, with same-run references (DESIGN.md §9, §10: absolute numbers swing
// 2-5x with core placement on shared machines, so compare ratios).
//
//   BM_CacheLinePingPong       reference: one cache line handed back and forth (round trip)
//   BM_FifoRoundTrip/<bytes>/<noSpin>
//                              a step there and its echo back through a second FIFO;
//                              noSpin=1 waits as when oversubscribed (yield, then futex)
//   BM_Memcpy/<bytes>          reference: single-thread memcpy of one step, in cache
//   BM_FifoStream/<stepBytes>/<nSteps>/<ahead>
//                              the sender copies each step in, the receiver copies it out;
//                              the sender posts at most `ahead` steps the receiver has not
//                              released. 8 KiB steps in 8 against 32 buffers shows what a
//                              buffer reused soon after the receiver read it costs; 32
//                              buffers with 8 ahead, that the reuse costs, not the run-ahead
//                              (perf/results/host/fifo_steps.md)
//
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// and quote medians. The round-trip benchmarks also time every iteration and
// report min_ns / p10_ns / p50_ns counters (including ~2 clock reads): on a
// loaded machine the mean mostly measures the scheduler, the low percentiles
// the hand-off itself.
#include <benchmark/benchmark.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/shm.h"
#include "transport/fifo.h"

namespace plait {
namespace {

// The first two CPUs this process may run on (the same one twice on a 1-CPU box).
std::pair<int, int> twoCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  int cpus[2] = {-1, -1};
  int found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &set)) cpus[found++] = c;
  if (found == 1) cpus[1] = cpus[0];
  return {cpus[0], cpus[1]};
}

void pinThisThread(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);  // 0: the calling thread
}

// Pins the calling thread for a scope and restores its affinity after.
class ScopedPin {
 public:
  explicit ScopedPin(int cpu) {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    pinThisThread(cpu);
  }
  ~ScopedPin() { sched_setaffinity(0, sizeof(saved_), &saved_); }

 private:
  cpu_set_t saved_;
};

// One FIFO in its own shared segment with a wait context for both ends.
struct Fifo {
  explicit Fifo(FifoShape s, bool noSpin = false)
      : shape(s), segment(std::move(SharedSegment::create(s.totalBytes()).value())) {
    ctx.deadline = Deadline::afterMs(600000);
    ctx.what = "bench";
    ctx.oversubscribed = noSpin;
  }
  FifoShape shape;
  SharedSegment segment;
  WaitContext ctx;
  FifoSender sender() { return FifoSender(segment.data(), shape, &ctx); }
  FifoReceiver receiver() { return FifoReceiver(segment.data(), shape, &ctx); }
};

constexpr size_t kStop = 0;  // a step of 0 bytes tells the helper thread to stop

// Per-iteration times of a latency benchmark, reported as percentile counters.
class LatencySamples {
 public:
  LatencySamples() { samples_.reserve(1 << 20); }
  void add(Clock::time_point start, Clock::time_point end) {
    if (samples_.size() < samples_.capacity())
      samples_.push_back(static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()));
  }
  void report(benchmark::State& state) {
    if (samples_.empty()) return;
    std::sort(samples_.begin(), samples_.end());
    auto at = [&](double q) { return samples_[static_cast<size_t>(q * double(samples_.size() - 1))]; };
    state.counters["min_ns"] = samples_.front();
    state.counters["p10_ns"] = at(0.10);
    state.counters["p50_ns"] = at(0.50);
  }

 private:
  std::vector<double> samples_;
};

void BM_CacheLinePingPong(benchmark::State& state) {
  auto [cpuA, cpuB] = twoCpus();
  ScopedPin pin(cpuA);
  alignas(64) static std::atomic<uint64_t> line{0};
  line.store(0);
  std::thread echo([&, cpu = cpuB] {
    pinThisThread(cpu);
    for (uint64_t expect = 1;; expect += 2) {
      uint64_t v;
      while ((v = line.load(std::memory_order_acquire)) != expect && v != ~uint64_t(0)) cpuPause();
      if (v == ~uint64_t(0)) return;
      line.store(expect + 1, std::memory_order_release);
    }
  });
  uint64_t next = 1;
  LatencySamples samples;
  for (auto _ : state) {
    auto start = Clock::now();
    line.store(next, std::memory_order_release);
    while (line.load(std::memory_order_acquire) != next + 1) cpuPause();
    samples.add(start, Clock::now());
    next += 2;
  }
  samples.report(state);
  line.store(~uint64_t(0), std::memory_order_release);
  echo.join();
}
BENCHMARK(BM_CacheLinePingPong)->UseRealTime();

// Round trip: this thread posts `bytes` to the echo thread, which copies them
// into a step of the return FIFO; this thread reads the echo.
void BM_FifoRoundTrip(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto [cpuA, cpuB] = twoCpus();
  ScopedPin pin(cpuA);
  FifoShape shape{8, std::max<size_t>(bytes, 64)};
  const bool noSpin = state.range(1) != 0;
  Fifo there(shape, noSpin), back(shape, noSpin);
  std::thread echo([&, cpu = cpuB] {
    pinThisThread(cpu);
    FifoReceiver in = there.receiver();
    FifoSender out = back.sender();
    for (;;) {
      size_t n = 0;
      const char* src = in.acquire(&n).value();
      char* dst = out.acquire().value();
      std::memcpy(dst, src, n);
      in.release();
      out.post(n);
      if (n == kStop) return;
    }
  });
  FifoSender out = there.sender();
  FifoReceiver in = back.receiver();
  std::vector<char> payload(bytes, 'x');
  std::vector<char> sink(bytes);
  LatencySamples samples;
  for (auto _ : state) {
    auto start = Clock::now();
    std::memcpy(out.acquire().value(), payload.data(), bytes);
    out.post(bytes);
    size_t n = 0;
    const char* echoed = in.acquire(&n).value();
    std::memcpy(sink.data(), echoed, n);
    in.release();
    samples.add(start, Clock::now());
  }
  samples.report(state);
  benchmark::DoNotOptimize(sink.data());
  out.acquire().value();
  out.post(kStop);
  size_t n = 0;
  (void)in.acquire(&n).value();
  in.release();
  echo.join();
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes) * 2);
}
BENCHMARK(BM_FifoRoundTrip)
    ->Args({8, 0})
    ->Args({1024, 0})
    ->Args({4096, 0})
    ->Args({8, 1})
    ->UseRealTime();

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 'x'), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(512 << 10)->UseRealTime();

// Streaming: this thread copies a source buffer into successive steps; the
// receiver thread copies each step out to a destination buffer of 8 steps
// (cycling, like a chunked collective writing its output).
void BM_FifoStream(benchmark::State& state) {
  const size_t stepBytes = static_cast<size_t>(state.range(0));
  const int nSteps = static_cast<int>(state.range(1));
  const uint64_t ahead = static_cast<uint64_t>(state.range(2));
  auto [cpuA, cpuB] = twoCpus();
  ScopedPin pin(cpuA);
  Fifo fifo({nSteps, stepBytes});
  std::thread receiver([&, cpu = cpuB] {
    pinThisThread(cpu);
    FifoReceiver in = fifo.receiver();
    std::vector<char> dst(stepBytes * nSteps);
    for (uint64_t i = 0;; ++i) {
      size_t n = 0;
      const char* src = in.acquire(&n).value();
      if (n == kStop) {
        in.release();
        return;
      }
      std::memcpy(dst.data() + (i % nSteps) * stepBytes, src, n);
      in.release();
    }
  });
  FifoSender out = fifo.sender();
  std::vector<char> src(stepBytes * nSteps, 'x');
  uint64_t i = 0;
  for (auto _ : state) {
    while (out.pending() >= ahead) {
    }
    std::memcpy(out.acquire().value(), src.data() + (i++ % nSteps) * stepBytes, stepBytes);
    out.post(stepBytes);
  }
  out.acquire().value();
  out.post(kStop);
  receiver.join();
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(stepBytes));
}
BENCHMARK(BM_FifoStream)
    ->Args({64 << 10, 8, 8})
    ->Args({512 << 10, 8, 8})
    ->Args({8 << 10, 8, 8})
    ->Args({8 << 10, 32, 32})
    ->Args({8 << 10, 32, 8})
    ->Args({16 << 10, 8, 8})
    ->Args({16 << 10, 32, 32})
    ->UseRealTime();

}  // namespace
}  // namespace plait

BENCHMARK_MAIN();
