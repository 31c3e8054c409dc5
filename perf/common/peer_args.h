// perf/common/peer_args.h — the command line and table preamble the peer
// benchmarks share (mpi_coll_perf, mpich_coll_perf, oneccl_coll_perf):
//   -c <collective> [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-k check] [-r root]
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../common/peer_reference.h"
#include "perf_table.h"

namespace plait::perf::peer {

struct PeerOptions {
  Coll coll = Coll::kAllReduce;
  std::string name = "AllReduce";
  size_t minBytes = 8, maxBytes = 32u << 20;
  double factor = 2;
  int iters = 20, warmup = 1, check = 1, root = 0;
};

// False on a bad flag, a collective not in `allowed` (a mask of 1 << Coll),
// or a factor not above 1.
inline bool parsePeerArgs(int argc, char** argv, unsigned allowed, PeerOptions* o) {
  const struct {
    const char* flag;
    Coll coll;
    const char* name;
  } colls[] = {{"allreduce", Coll::kAllReduce, "AllReduce"},       {"allgather", Coll::kAllGather, "AllGather"},
               {"reduce_scatter", Coll::kReduceScatter, "ReduceScatter"}, {"broadcast", Coll::kBroadcast, "Broadcast"},
               {"reduce", Coll::kReduce, "Reduce"},                {"alltoall", Coll::kAlltoAll, "AlltoAll"},
               {"gather", Coll::kGather, "Gather"},                {"scatter", Coll::kScatter, "Scatter"}};
  int c;
  while ((c = getopt(argc, argv, "c:b:e:f:n:w:k:r:")) != -1) {
    switch (c) {
      case 'c': {
        bool found = false;
        for (const auto& e : colls)
          if (std::strcmp(optarg, e.flag) == 0 && (allowed & (1u << static_cast<unsigned>(e.coll))) != 0) {
            o->coll = e.coll;
            o->name = e.name;
            found = true;
          }
        if (!found) return false;
        break;
      }
      case 'b': o->minBytes = parseBytes(optarg); break;
      case 'e': o->maxBytes = parseBytes(optarg); break;
      case 'f': o->factor = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      case 'k': o->check = std::atoi(optarg); break;
      case 'r': o->root = std::atoi(optarg); break;
      default: return false;
    }
  }
  return o->factor > 1;
}

// nccl-tests' preamble; `library` names what runs ("Open MPI v4.1.4").
inline void printPeerHeader(const PeerOptions& o, int n, const std::string& library) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
              "agg iters: 1 validation: %d graph: 0\n", o.minBytes, o.maxBytes, o.factor, o.warmup, o.iters, o.check);
  std::printf("# %s, %s: %d ranks, float32 sum, time = mean across ranks\n", library.c_str(), o.name.c_str(), n);
  std::printf("#\n# Using devices\n#  Rank  0 Group  0 Pid %6d on %10s device  0 [cpu] host memory\n",
              static_cast<int>(getpid()), host);
  printTableHeader(stdout);
}

// The size sweep: measure(k, &row) fills one size's row (out-of-place,
// in-place or both); rank 0 prints it, then the footer. Returns #wrong in all.
template <typename Measure>
long long runPeerSweep(const PeerOptions& o, int n, int rank, Measure&& measure) {
  long long wrongTotal = 0;
  double busSum = 0;
  int busCount = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes = static_cast<size_t>(bytes * o.factor)) {
    Counts k = countsFor(o.coll, bytes / sizeof(float), n);
    TableRow row{std::max(k.send, k.recv) * sizeof(float), std::max(k.send, k.recv), "float",
                 isReduction(o.coll) ? "sum" : "none", isRooted(o.coll) ? o.root : -1, {}, {}};
    measure(k, &row);
    for (const Measurement* m : {&row.outOfPlace, &row.inPlace}) {
      if (!m->present) continue;
      wrongTotal += std::max(0LL, m->wrong);
      busSum += m->busBw;
      ++busCount;
    }
    if (rank == 0) {
      std::printf("%s\n", formatRow(row).c_str());
      std::fflush(stdout);
    }
    if (bytes == 0) break;
  }
  if (rank == 0) printFooter(stdout, wrongTotal, busCount ? busSum / busCount : 0);
  return wrongTotal;
}

}  // namespace plait::perf::peer
