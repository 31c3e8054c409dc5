// perf/memcpy/memcpy_perf.cc — the machine's memcpy bandwidth in the *_perf
// table format: the physical reference for shared-memory collectives.
//
//   memcpy_perf [-t threads] [-b min] [-e max] [-f factor] [-n iters] [-w warmup]
//
// Each of -t threads copies its own S-byte buffer at the same time (as N
// ranks would); the row reports S, the mean time of one copy, algbw = S/time
// per thread and busbw = algbw. The out-of-place column is memcpy; the
// in-place column is memset of the destination (a store-only reference).
// #wrong checks the last copy byte for byte.
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../common/peer_reference.h"
#include "perf_table.h"

namespace {

struct Options {
  int threads = 1;
  size_t minBytes = 8, maxBytes = 32u << 20;
  double factor = 2;
  int iters = 20, warmup = 1;
};

bool parseArgs(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "t:b:e:f:n:w:")) != -1) {
    switch (c) {
      case 't': o->threads = std::max(1, std::atoi(optarg)); break;
      case 'b': o->minBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'e': o->maxBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'f': o->factor = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      default: return false;
    }
  }
  return o->factor > 1 && o->minBytes > 0;
}

// Times `iters` runs of op on every thread at once; returns the mean time of
// one run in µs (averaged over threads).
template <typename Op>
double timeAll(const Options& o, Op op) {
  std::vector<double> us(o.threads);
  std::barrier sync(o.threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < o.warmup; ++i) op(t);
      sync.arrive_and_wait();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i) op(t);
      us[t] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (auto& th : threads) th.join();
  double sum = 0;
  for (double u : us) sum += u;
  return o.iters ? sum / o.threads / o.iters : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseArgs(argc, argv, &o)) {
    std::fprintf(stderr, "usage: %s [-t threads] [-b min] [-e max] [-f factor>1] [-n iters] [-w warmup]\n", argv[0]);
    return 1;
  }
  std::vector<std::vector<char>> src(o.threads), dst(o.threads);
  for (int t = 0; t < o.threads; ++t) {
    src[t].assign(o.maxBytes, static_cast<char>(t + 1));
    dst[t].assign(o.maxBytes, 0);
  }
  std::printf("# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
              "agg iters: 1 validation: 1 graph: 0\n", o.threads, o.minBytes, o.maxBytes, o.factor, o.warmup, o.iters);
  std::printf("# memcpy: %d thread(s) copying at once; out-of-place = memcpy, in-place = memset\n", o.threads);
  plait::perf::printTableHeader(stdout);
  long long wrongTotal = 0;
  double busSum = 0;
  int count = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes = static_cast<size_t>(bytes * o.factor)) {
    double copyUs = timeAll(o, [&](int t) { std::memcpy(dst[t].data(), src[t].data(), bytes); });
    long long wrong = 0;
    for (int t = 0; t < o.threads; ++t) wrong += std::memcmp(dst[t].data(), src[t].data(), bytes) != 0;
    double setUs = timeAll(o, [&](int t) { std::memset(dst[t].data(), t, bytes); });
    plait::perf::TableRow row{bytes, bytes, "uint8", "none", -1,
                              plait::perf::makeMeasurement(bytes, copyUs, 1.0, wrong),
                              plait::perf::makeMeasurement(bytes, setUs, 1.0, 0)};
    std::printf("%s\n", plait::perf::formatRow(row).c_str());
    std::fflush(stdout);
    wrongTotal += wrong;
    busSum += row.outOfPlace.busBw;
    ++count;
  }
  plait::perf::printFooter(stdout, wrongTotal, count ? busSum / count : 0);
  return wrongTotal == 0 ? 0 : 1;
}
