// perf/oneccl/oneccl_coll_perf.cc — Intel oneCCL's CPU collectives measured
// the way the *_perf tools measure Plait's (same sizes, table and busbw
// formulas), for perf/compare.
//
//   plait-run -n N oneccl_coll_perf -c allreduce|allgather|reduce_scatter|
//                                      broadcast|reduce|alltoall
//                                   [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-k check] [-r root]
//
// Rank and size come from the launcher's environment (PLAIT_RANK/NRANKS,
// PMI_RANK/SIZE, OMPI_COMM_WORLD_RANK/SIZE). oneCCL's key-value store is
// rank 0's address, handed to the others through a file named after the
// launcher's process (the ranks' common parent). oneCCL's transport is its
// own choice of environment (perf/compare sets CCL_ATL_TRANSPORT and the
// rest). float32 sum; out-of-place only (Broadcast: its one buffer, reported
// as in-place); oneCCL has no Gather or Scatter. Time is the mean across
// ranks; #wrong is checked against small-integer inputs, exact in float.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <oneapi/ccl.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../common/peer_args.h"
#include "perf_table.h"

namespace {

using plait::perf::Measurement;
using plait::perf::TableRow;
using namespace plait::perf::peer;
using Clock = std::chrono::steady_clock;

using Options = PeerOptions;

int envInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = std::getenv(n)) return std::atoi(v);
  return fallback;
}

// Rank 0 publishes the store's address; the others read it (10 s at most).
std::shared_ptr<ccl::kvs> connectStore(int rank) {
  const std::string path = "/tmp/oneccl_coll_perf.kvs." + std::to_string(getppid());
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    ccl::kvs::address_type address = kvs->get_address();
    std::ofstream(path + ".tmp", std::ios::binary).write(address.data(), static_cast<std::streamsize>(address.size()));
    std::rename((path + ".tmp").c_str(), path.c_str());
    return kvs;
  }
  ccl::kvs::address_type address;
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(address.data(), static_cast<std::streamsize>(address.size()))) return ccl::create_kvs(address);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "oneccl_coll_perf: rank %d found no store address in %s\n", rank, path.c_str());
  std::exit(2);
}

void runOnce(const Options& o, float* send, float* recv, Counts k, ccl::communicator& comm) {
  switch (o.coll) {
    case Coll::kAllReduce: ccl::allreduce(send, recv, k.param, ccl::reduction::sum, comm).wait(); break;
    case Coll::kAllGather: ccl::allgather(send, recv, k.param, comm).wait(); break;
    case Coll::kReduceScatter: ccl::reduce_scatter(send, recv, k.param, ccl::reduction::sum, comm).wait(); break;
    case Coll::kAlltoAll: ccl::alltoall(send, recv, k.param, comm).wait(); break;
    case Coll::kBroadcast: ccl::broadcast(recv, k.param, o.root, comm).wait(); break;
    case Coll::kReduce: ccl::reduce(send, recv, k.param, ccl::reduction::sum, o.root, comm).wait(); break;
    default: break;
  }
}

void fillInputs(const Options& o, float* send, float* recv, Counts k, int rank) {
  std::fill(recv, recv + std::max(k.send, k.recv), -1.0f);
  float* in = o.coll == Coll::kBroadcast ? recv : send;  // broadcast: the root's one buffer
  for (size_t i = 0; i < k.send; ++i) in[i] = inputValue(rank, i);
}

template <typename T>
T sumOver(T v, ccl::communicator& comm) {
  T out{};
  ccl::allreduce(&v, &out, 1, ccl::reduction::sum, comm).wait();
  return out;
}

Measurement measure(const Options& o, float* send, float* recv, Counts k, int rank, int n, ccl::communicator& comm) {
  fillInputs(o, send, recv, k, rank);
  for (int i = 0; i < o.warmup; ++i) runOnce(o, send, recv, k, comm);
  ccl::barrier(comm);
  const auto start = Clock::now();
  for (int i = 0; i < o.iters; ++i) runOnce(o, send, recv, k, comm);
  const double us = o.iters ? std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.iters : 0;
  long long wrong = -1;
  if (o.check) {
    fillInputs(o, send, recv, k, rank);
    runOnce(o, send, recv, k, comm);
    wrong = static_cast<long long>(sumOver<int64_t>(countWrong(o.coll, o.root, rank, n, k, recv, k.recv), comm));
  }
  const size_t bytes = std::max(k.send, k.recv) * sizeof(float);
  return plait::perf::makeMeasurement(bytes, sumOver(us, comm) / n, plait::perf::busFactorFor(o.name, n), wrong);
}

// oneCCL has no Gather or Scatter.
constexpr unsigned kCollectives = ~((1u << static_cast<unsigned>(Coll::kGather)) |
                                    (1u << static_cast<unsigned>(Coll::kScatter)));

std::string libraryName() {
  const ccl::library_version v = ccl::get_library_version();
  const char* transport = std::getenv("CCL_ATL_TRANSPORT");
  return std::string("oneCCL ") + v.full + ", transport " + (transport ? transport : "default");
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = envInt({"PLAIT_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"}, -1);
  const int n = envInt({"PLAIT_NRANKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}, -1);
  Options o;
  if (rank < 0 || n < 1 || !parsePeerArgs(argc, argv, kCollectives, &o) || o.root >= n) {
    if (rank <= 0)
      std::fprintf(stderr, "usage (under plait-run or mpirun): %s -c <collective> [-b] [-e] [-f >1] [-n] [-w] [-k] [-r]\n",
                   argv[0]);
    return 1;
  }
  ccl::init();
  auto kvs = connectStore(rank);
  auto comm = ccl::create_communicator(n, rank, kvs);
  if (rank == 0) std::remove(("/tmp/oneccl_coll_perf.kvs." + std::to_string(getppid())).c_str());
  Counts big = countsFor(o.coll, o.maxBytes / sizeof(float), n);
  std::vector<float> send(std::max<size_t>(1, std::max(big.send, big.recv))), recv(send.size());
  if (rank == 0) printPeerHeader(o, n, libraryName());
  const long long wrongTotal = runPeerSweep(o, n, rank, [&](Counts k, TableRow* row) {
    // Broadcast has one buffer: its column is the in-place one.
    (o.coll == Coll::kBroadcast ? row->inPlace : row->outOfPlace) = measure(o, send.data(), recv.data(), k, rank, n, comm);
  });
  return wrongTotal == 0 ? 0 : 1;
}
