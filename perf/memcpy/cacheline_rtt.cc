// perf/memcpy/cacheline_rtt.cc — how long one cache line takes to go from one
// CPU to another and back: the cost under every hand-off between two ranks
// through shared memory, and under every line of data a FIFO passes on.
//
//   cacheline_rtt [-a cpu] [-b cpu] [-n round trips] [-r repeats]
//
// Two threads, pinned to CPUs a and b (0 and 1), bounce one counter in one
// cache line n times (200000); prints the median over r repeats (5) of the
// time per round trip in ns. On this VM it reads about 60-80 ns, and 320-350
// in the slow windows (perf/results/host/windows.md): the vCPUs then sit
// where lines travel four times slower between them.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

alignas(64) std::atomic<long> ball{0};

alignas(64) std::atomic<bool> quit{false};  // a line of its own, only read while the game runs

// One repeat: ns per round trip, or a negative value when a CPU is refused
// (checked before bouncing: two threads sharing a CPU would hand the line
// over one reschedule at a time).
double bounce(int a, int b, long n) {
  ball.store(0);
  quit.store(false);
  std::atomic<int> otherPinned{0};  // 1 pinned, -1 refused
  const bool mine = pin(a);
  std::thread other([&] {
    otherPinned = pin(b) ? 1 : -1;
    for (long i = 0; i < n; ++i) {
      while (ball.load(std::memory_order_acquire) != 2 * i + 1)
        if (quit.load(std::memory_order_relaxed)) return;
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  while (otherPinned.load() == 0) std::this_thread::yield();
  if (!mine || otherPinned.load() < 0) {
    quit.store(true);
    other.join();
    return -1;
  }
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    ball.store(2 * i + 1, std::memory_order_release);
    while (ball.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto end = std::chrono::steady_clock::now();
  other.join();
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1, repeats = 5;
  long n = 200000;
  for (int opt; (opt = getopt(argc, argv, "a:b:n:r:")) != -1;) {
    switch (opt) {
      case 'a': a = std::atoi(optarg); break;
      case 'b': b = std::atoi(optarg); break;
      case 'n': n = std::atol(optarg); break;
      case 'r': repeats = std::atoi(optarg); break;
      default:
        std::fprintf(stderr, "usage: %s [-a cpu] [-b cpu] [-n round trips] [-r repeats]\n", argv[0]);
        return 2;
    }
  }
  if (a == b || a < 0 || b < 0 || n < 1 || repeats < 1) {
    std::fprintf(stderr, "cacheline_rtt: needs two different CPUs (-a %d -b %d), -n >= 1 and -r >= 1\n", a, b);
    return 2;
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const double t = bounce(a, b, n);
    if (t < 0) {
      std::fprintf(stderr, "cacheline_rtt: cannot run on CPU %d and CPU %d (sched_setaffinity)\n", a, b);
      return 1;
    }
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  std::printf("%.0f\n", times[times.size() / 2]);
  return 0;
}
