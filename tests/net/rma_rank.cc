// One rank of the one-sided test across nodes (tests/net/netns.sh
// --program): every rank puts a 400 KB slot into every other rank's window
// with a signal (so each put is several messages over the network), waits
// for one signal from each peer, checks every slot, then acknowledges with a
// bare signal and waits for every peer's acknowledgement before the next
// round overwrites the slots. Signals from one peer count in order, so data
// and acknowledgement signals never mix up. Exit 0 and
//   rma_rank: rank R: N rounds ok
// when every slot held what its writer put; 1 otherwise, 2 when it could
// not start. Launched like tests/net/net_kill_rank (plait::detectLaunch).
#include <cstdio>
#include <vector>

#include "plait/launch.hpp"

namespace {

constexpr size_t kSlot = 100000;  // floats per writer
constexpr int kRounds = 4;

float valueOf(int writer, int round, size_t i) {
  return static_cast<float>(writer * 100000 + round * 1000 + static_cast<int>(i % 991));
}

int fail(int rank, const char* what, ncclComm_t comm) {
  fprintf(stderr, "rma_rank: rank %d: %s: %s\n", rank, what, ncclGetLastError(comm));
  return 1;
}

}  // namespace

int main() {
  auto launched = plait::initLaunchedComm(plait::Deadline::afterMs(60000));
  if (!launched.isOk()) {
    fprintf(stderr, "%s\n", launched.status().toString().c_str());
    return 2;
  }
  const int rank = launched->info.rank, n = launched->info.nranks;
  ncclComm_t comm = launched->comm;
  std::vector<float> window(kSlot * n, -1.0f), mine(kSlot);
  ncclWindow_t win = nullptr;
  if (ncclCommWindowRegister(comm, window.data(), window.size() * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC) !=
      ncclSuccess)
    return fail(rank, "ncclCommWindowRegister", comm);
  std::vector<ncclWaitSignalDesc_t> fromEach;
  for (int q = 0; q < n; ++q)
    if (q != rank) fromEach.push_back(ncclWaitSignalDesc_t{1, q, 0, 0});
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < kSlot; ++i) mine[i] = valueOf(rank, round, i);
    for (int q = 0; q < n; ++q)
      if (q != rank && ncclPutSignal(mine.data(), kSlot, ncclFloat32, q, win, rank * kSlot * sizeof(float), 0, 0, 0,
                                     comm, nullptr) != ncclSuccess)
        return fail(rank, "ncclPutSignal", comm);
    if (ncclWaitSignal(static_cast<int>(fromEach.size()), fromEach.data(), comm, nullptr) != ncclSuccess)
      return fail(rank, "ncclWaitSignal (data)", comm);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; q != rank && i < kSlot; ++i)
        if (window[q * kSlot + i] != valueOf(q, round, i)) {
          fprintf(stderr, "rma_rank: rank %d: round %d: element %zu of rank %d's slot is %g, expected %g\n", rank,
                  round, i, q, window[q * kSlot + i], valueOf(q, round, i));
          return 1;
        }
    for (int q = 0; q < n; ++q)
      if (q != rank && ncclSignal(q, 0, 0, 0, comm, nullptr) != ncclSuccess) return fail(rank, "ncclSignal", comm);
    if (ncclWaitSignal(static_cast<int>(fromEach.size()), fromEach.data(), comm, nullptr) != ncclSuccess)
      return fail(rank, "ncclWaitSignal (acknowledgements)", comm);
  }
  if (ncclCommWindowDeregister(comm, win) != ncclSuccess) return fail(rank, "ncclCommWindowDeregister", comm);
  if (ncclCommDestroy(comm) != ncclSuccess) return fail(rank, "ncclCommDestroy", comm);
  printf("rma_rank: rank %d: %d rounds ok\n", rank, kRounds);
  return 0;
}
