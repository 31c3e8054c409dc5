// perf/mpi/mpi_coll_perf.cc — an MPI library's collectives (Open MPI as
// mpi_coll_perf, MPICH as mpich_coll_perf) measured the way the *_perf tools
// measure Plait's: same sizes, same table, same busbw formulas, so
// perf/compare can put them side by side.
//
//   mpirun -np N mpi_coll_perf -c allreduce|allgather|reduce_scatter|broadcast|
//                                 reduce|alltoall|gather|scatter
//                              [-b min] [-e max] [-f factor] [-n iters] [-w warmup]
//                              [-c-check 0/1 via -k] [-r root]
//
// float32 sum only (the peer's common ground). In-place uses MPI_IN_PLACE;
// MPI_Bcast has one buffer, so broadcast reports only the in-place column.
// Time is the mean across ranks (nccl-tests' -a 1). #wrong is checked against
// small-integer inputs, exact in float.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../common/peer_args.h"
#include "perf_table.h"

namespace {

using plait::perf::Measurement;
using plait::perf::TableRow;

using namespace plait::perf::peer;

using Options = PeerOptions;

// One call; in-place uses MPI_IN_PLACE with the input already in `recv`.
void runOnce(const Options& o, float* send, float* recv, Counts k, bool inPlace, int rank) {
  const void* s = inPlace ? MPI_IN_PLACE : send;
  int p = static_cast<int>(k.param);
  bool root = rank == o.root;
  switch (o.coll) {
    case Coll::kAllReduce: MPI_Allreduce(s, recv, p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case Coll::kAllGather: MPI_Allgather(s, p, MPI_FLOAT, recv, p, MPI_FLOAT, MPI_COMM_WORLD); break;
    case Coll::kReduceScatter: MPI_Reduce_scatter_block(s, recv, p, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case Coll::kAlltoAll: MPI_Alltoall(s, p, MPI_FLOAT, recv, p, MPI_FLOAT, MPI_COMM_WORLD); break;
    case Coll::kBroadcast: MPI_Bcast(recv, p, MPI_FLOAT, o.root, MPI_COMM_WORLD); break;
    case Coll::kReduce:
      MPI_Reduce(inPlace && root ? MPI_IN_PLACE : (inPlace ? recv : send), recv, p, MPI_FLOAT, MPI_SUM, o.root,
                 MPI_COMM_WORLD);
      break;
    case Coll::kGather:
      MPI_Gather(inPlace && root ? MPI_IN_PLACE : (inPlace ? recv + rank * k.param : send), p, MPI_FLOAT, recv, p,
                 MPI_FLOAT, o.root, MPI_COMM_WORLD);
      break;
    case Coll::kScatter:
      if (inPlace) {
        MPI_Scatter(recv, p, MPI_FLOAT, root ? MPI_IN_PLACE : recv, p, MPI_FLOAT, o.root, MPI_COMM_WORLD);
      } else {
        MPI_Scatter(send, p, MPI_FLOAT, recv, p, MPI_FLOAT, o.root, MPI_COMM_WORLD);
      }
      break;
  }
}

// Fills inputs (in-place: inside recv where the MPI call expects them).
void fillInputs(const Options& o, float* send, float* recv, Counts k, bool inPlace, int rank) {
  size_t total = std::max(k.send, k.recv);
  std::fill(recv, recv + total, -1.0f);
  float* in = send;
  if (inPlace) {
    bool slot = o.coll == Coll::kAllGather || o.coll == Coll::kGather;
    in = recv + (slot ? rank * k.param : 0);
  }
  for (size_t i = 0; i < k.send; ++i) in[i] = inputValue(rank, i);
}

// In-place MPI_Reduce_scatter_block leaves the result at the start of recv;
// in-place MPI_Scatter leaves the root's block where it was.
long long wrongElements(const Options& o, const float* recv, Counts k, bool inPlace, int rank, int n) {
  if (inPlace && o.coll == Coll::kScatter && rank == o.root) recv += rank * k.recv;
  return countWrong(o.coll, o.root, rank, n, k, recv, k.recv);
}

Measurement measure(const Options& o, float* send, float* recv, Counts k, bool inPlace, int rank, int n) {
  fillInputs(o, send, recv, k, inPlace, rank);
  for (int i = 0; i < o.warmup; ++i) runOnce(o, send, recv, k, inPlace, rank);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < o.iters; ++i) runOnce(o, send, recv, k, inPlace, rank);
  double us = o.iters ? (MPI_Wtime() - start) * 1e6 / o.iters : 0;
  long long wrong = -1;
  if (o.check) {
    fillInputs(o, send, recv, k, inPlace, rank);
    runOnce(o, send, recv, k, inPlace, rank);
    long long mine = wrongElements(o, recv, k, inPlace, rank, n);
    MPI_Allreduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  }
  double sum = 0;
  MPI_Allreduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  size_t bytes = std::max(k.send, k.recv) * sizeof(float);
  return plait::perf::makeMeasurement(bytes, sum / n, plait::perf::busFactorFor(o.name, n), wrong);
}

std::string libraryName() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  std::string first(library, static_cast<size_t>(std::max(0, length)));
  return first.substr(0, first.find_first_of("\n,"));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Options o;
  if (!parsePeerArgs(argc, argv, ~0u, &o) || o.root >= n) {
    if (rank == 0) std::fprintf(stderr, "usage: %s -c <collective> [-b] [-e] [-f >1] [-n] [-w] [-k check] [-r root]\n", argv[0]);
    MPI_Finalize();
    return 1;
  }
  Counts big = countsFor(o.coll, o.maxBytes / sizeof(float), n);
  std::vector<float> send(std::max<size_t>(1, std::max(big.send, big.recv)));
  std::vector<float> recv(send.size());
  if (rank == 0) printPeerHeader(o, n, libraryName());
  const long long wrongTotal = runPeerSweep(o, n, rank, [&](Counts k, TableRow* row) {
    if (o.coll != Coll::kBroadcast) row->outOfPlace = measure(o, send.data(), recv.data(), k, false, rank, n);
    row->inPlace = measure(o, send.data(), recv.data(), k, true, rank, n);
  });
  MPI_Finalize();
  return wrongTotal == 0 ? 0 : 1;
}
