// rma_perf — one-sided puts (ncclPutSignal + ncclWaitSignal) against
// two-sided ncclSend/ncclRecv between ranks 0 and 1, in one run,
// interleaved per size. Launch with plait-run (or mpirun, torchrun):
//
//   plait-run -n 2 -- build-host/perf/rma/rma_perf [-b 8] [-e 16M] [-n 50]
//
// For each size: "latency" is half the round trip of a ping-pong (put with a
// signal there, the peer's put back); "bandwidth" is rank 0 streaming n
// messages to rank 1, which then signals (or sends) once back. "get" is
// rank 0 reading rank 1's window n times with plaitGet (one blocking read
// after another; rank 1 only waits): µs per read, and bytes over that time.
// Medians of 5 repetitions; a table on rank 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plait/launch.hpp"
#include "plait/rma.h"

namespace {

using Clock = std::chrono::steady_clock;

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

void check(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  std::fprintf(stderr, "rma_perf: %s: %s\n", what, ncclGetLastError(comm));
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Pair {
  ncclComm_t comm;
  int rank;
  ncclWindow_t win;
  std::vector<char>& src;
};

// Microseconds per one-way message, ping-pong with puts.
double putLatency(Pair& p, size_t bytes, int iters) {
  const int peer = 1 - p.rank;
  ncclWaitSignalDesc_t d{1, peer, 0, 0};
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (p.rank == 0) {
      check(ncclPutSignal(p.src.data(), bytes, ncclInt8, peer, p.win, 0, 0, 0, 0, p.comm, nullptr), p.comm, "put");
      check(ncclWaitSignal(1, &d, p.comm, nullptr), p.comm, "wait");
    } else {
      check(ncclWaitSignal(1, &d, p.comm, nullptr), p.comm, "wait");
      check(ncclPutSignal(p.src.data(), bytes, ncclInt8, peer, p.win, 0, 0, 0, 0, p.comm, nullptr), p.comm, "put");
    }
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / (2.0 * iters);
}

double sendLatency(Pair& p, std::vector<char>& dst, size_t bytes, int iters) {
  const int peer = 1 - p.rank;
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (p.rank == 0) {
      check(ncclSend(p.src.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "send");
      check(ncclRecv(dst.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "recv");
    } else {
      check(ncclRecv(dst.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "recv");
      check(ncclSend(p.src.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "send");
    }
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / (2.0 * iters);
}

// GB/s of rank 0 streaming `iters` messages to rank 1.
double putBandwidth(Pair& p, size_t bytes, int iters) {
  const int peer = 1 - p.rank;
  auto start = Clock::now();
  if (p.rank == 0) {
    for (int i = 0; i < iters; ++i)
      check(ncclPutSignal(p.src.data(), bytes, ncclInt8, peer, p.win, 0, 0, 0, 0, p.comm, nullptr), p.comm, "put");
    ncclWaitSignalDesc_t d{1, peer, 0, 0};
    check(ncclWaitSignal(1, &d, p.comm, nullptr), p.comm, "wait");
  } else {
    ncclWaitSignalDesc_t d{iters, peer, 0, 0};
    check(ncclWaitSignal(1, &d, p.comm, nullptr), p.comm, "wait");
    check(ncclSignal(peer, 0, 0, 0, p.comm, nullptr), p.comm, "signal");
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * iters / s / 1e9;
}

double sendBandwidth(Pair& p, std::vector<char>& dst, size_t bytes, int iters) {
  const int peer = 1 - p.rank;
  auto start = Clock::now();
  char one = 0;
  if (p.rank == 0) {
    for (int i = 0; i < iters; ++i)
      check(ncclSend(p.src.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "send");
    check(ncclRecv(&one, 1, ncclInt8, peer, p.comm, nullptr), p.comm, "recv");
  } else {
    for (int i = 0; i < iters; ++i)
      check(ncclRecv(dst.data(), bytes, ncclInt8, peer, p.comm, nullptr), p.comm, "recv");
    check(ncclSend(&one, 1, ncclInt8, peer, p.comm, nullptr), p.comm, "send");
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * iters / s / 1e9;
}

// Microseconds per blocking read of `bytes` of the peer's window.
double getTime(Pair& p, std::vector<char>& dst, size_t bytes, int iters) {
  const int peer = 1 - p.rank;
  auto start = Clock::now();
  if (p.rank == 0) {
    for (int i = 0; i < iters; ++i)
      check(plaitGet(dst.data(), bytes, ncclInt8, peer, p.win, 0, p.comm, nullptr), p.comm, "get");
    check(ncclSignal(peer, 0, 0, 0, p.comm, nullptr), p.comm, "signal");
  } else {
    ncclWaitSignalDesc_t d{1, peer, 0, 0};
    check(ncclWaitSignal(1, &d, p.comm, nullptr), p.comm, "wait");
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 8, maxBytes = 16 << 20;
  int iters = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-b") minBytes = parseSize(argv[i + 1]);
    else if (a == "-e") maxBytes = parseSize(argv[i + 1]);
    else if (a == "-n") iters = std::max(1, std::atoi(argv[i + 1]));
  }
  auto launched = plait::initLaunchedComm(plait::Deadline::afterMs(60000));
  if (!launched.isOk()) {
    std::fprintf(stderr, "%s\n", launched.status().toString().c_str());
    return 2;
  }
  const plait::LaunchInfo* info = &launched->info;
  ncclComm_t comm = launched->comm;
  if (info->nranks != 2) {
    std::fprintf(stderr, "rma_perf: run it with 2 ranks\n");
    return 2;
  }
  std::vector<char> window(maxBytes), src(maxBytes, 1), dst(maxBytes);
  ncclWindow_t win = nullptr;
  check(ncclCommWindowRegister(comm, window.data(), window.size(), &win, NCCL_WIN_COLL_SYMMETRIC), comm, "register");
  Pair p{comm, info->rank, win, src};
  putLatency(p, 8, 10);  // connects the one-sided agent, warms both paths
  sendLatency(p, dst, 8, 10);
  if (info->rank == 0)
    std::printf("# rma_perf: 2 ranks, medians of 5; latency = half a ping-pong, bandwidth = rank 0 -> rank 1\n"
                "#%11s %12s %12s %10s %12s %12s %10s %10s %10s\n", "bytes", "put us", "send us", "put/send", "put GB/s",
                "send GB/s", "put/send", "get us", "get GB/s");
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
    const int n = bytes >= (1 << 20) ? std::max(4, iters / 8) : iters;
    std::vector<double> pl, sl, pb, sb, gt;
    for (int rep = 0; rep < 5; ++rep) {  // interleaved
      pl.push_back(putLatency(p, bytes, n));
      sl.push_back(sendLatency(p, dst, bytes, n));
      pb.push_back(putBandwidth(p, bytes, n));
      sb.push_back(sendBandwidth(p, dst, bytes, n));
      gt.push_back(getTime(p, dst, bytes, n));
    }
    if (info->rank == 0)
      std::printf("%12zu %12.2f %12.2f %10.2f %12.3f %12.3f %10.2f %10.2f %10.3f\n", bytes, median(pl), median(sl),
                  median(pl) / median(sl), median(pb), median(sb), median(pb) / median(sb), median(gt),
                  static_cast<double>(bytes) / median(gt) / 1e3);
  }
  check(ncclCommWindowDeregister(comm, win), comm, "deregister");
  check(ncclCommDestroy(comm), nullptr, "destroy");
  return 0;
}
