// perf/gloo/gloo_perf.cc — Gloo's algorithms (Debian libgloo-dev, TCP
// transport on loopback) measured in the *_perf table format, so perf/compare
// can put them beside Plait and Open MPI.
//
//   gloo_perf -a <algorithm> -p N [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-k 0/1]
//   plait-run -n N -- gloo_perf -a <algorithm> -s <shared store dir> ...
//
// With -p N the program forks N ranks itself and meets through a FileStore in
// a fresh temporary directory; under plait-run (PLAIT_RANK / PLAIT_NRANKS) the
// store directory must be given with -s and be empty.
//
// Algorithms: allreduce_ring, allreduce_ring_chunked, allreduce_halving_doubling,
// reduce_scatter_halving_doubling, broadcast_one_to_all (in-place: reported in
// the in-place column); GLOO_SOCKET_IFNAME=<interface> binds there instead
// of loopback (perf/net runs it across network namespaces); allgather_ring, allgather, reduce, gather, scatter,
// alltoall (out-of-place: reported in the out-of-place column). float32 sum.
// Time is the mean across ranks.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include "../common/peer_reference.h"
#include "perf_table.h"

namespace {

using namespace plait::perf::peer;
using Context = std::shared_ptr<gloo::Context>;

struct Options {
  std::string algorithm = "allreduce_ring";
  size_t minBytes = 8, maxBytes = 32u << 20;
  double factor = 2;
  int iters = 20, warmup = 1, check = 1, procs = 0;
  std::string storeDir;
};

struct Algorithm {
  const char* name;
  Coll coll;
  const char* busName;  // for busFactorFor
  bool inPlace;
};

const Algorithm kAlgorithms[] = {
    {"allreduce_ring", Coll::kAllReduce, "AllReduce", true},
    {"allreduce_ring_chunked", Coll::kAllReduce, "AllReduce", true},
    {"allreduce_halving_doubling", Coll::kAllReduce, "AllReduce", true},
    {"reduce_scatter_halving_doubling", Coll::kReduceScatter, "ReduceScatter", true},
    {"broadcast_one_to_all", Coll::kBroadcast, "Broadcast", true},
    {"allgather_ring", Coll::kAllGather, "AllGather", false},
    {"allgather", Coll::kAllGather, "AllGather", false},
    {"reduce", Coll::kReduce, "Reduce", false},
    {"gather", Coll::kGather, "Gather", false},
    {"scatter", Coll::kScatter, "Scatter", false},
    {"alltoall", Coll::kAlltoAll, "AlltoAll", false},
};

void sumFloats(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

// Builds the call for one size; the returned function runs it once. In-place
// algorithms work on `recv` (input loaded there); the rest read `send`.
std::function<void()> makeCall(const Algorithm& a, const Context& ctx, float* send, float* recv, Counts k) {
  int p = static_cast<int>(k.param);
  std::string name = a.name;
  if (name == "allreduce_ring") {
    auto alg = std::make_shared<gloo::AllreduceRing<float>>(ctx, std::vector<float*>{recv}, p);
    return [alg] { alg->run(); };
  }
  if (name == "allreduce_ring_chunked") {
    auto alg = std::make_shared<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{recv}, p);
    return [alg] { alg->run(); };
  }
  if (name == "allreduce_halving_doubling") {
    auto alg = std::make_shared<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{recv}, p);
    return [alg] { alg->run(); };
  }
  if (name == "reduce_scatter_halving_doubling") {
    std::vector<int> elems(ctx->size, p);
    auto alg = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(ctx, std::vector<float*>{recv},
                                                                           p * ctx->size, elems);
    return [alg] { alg->run(); };
  }
  if (name == "broadcast_one_to_all") {
    auto alg = std::make_shared<gloo::BroadcastOneToAll<float>>(ctx, std::vector<float*>{recv}, k.param, 0);
    return [alg] { alg->run(); };
  }
  if (name == "allgather_ring") {
    auto alg = std::make_shared<gloo::AllgatherRing<float>>(ctx, std::vector<const float*>{send}, recv, p);
    return [alg] { alg->run(); };
  }
  return [=] {
    if (name == "allgather") {
      gloo::AllgatherOptions o(ctx);
      o.setInput(send, k.send);
      o.setOutput(recv, k.recv);
      gloo::allgather(o);
    } else if (name == "reduce") {
      gloo::ReduceOptions o(ctx);
      o.setInput(send, k.send);
      o.setOutput(recv, k.recv);
      o.setRoot(0);
      o.setReduceFunction(sumFloats);
      gloo::reduce(o);
    } else if (name == "gather") {
      gloo::GatherOptions o(ctx);
      o.setInput(send, k.send);
      if (ctx->rank == 0) o.setOutput(recv, k.recv);
      o.setRoot(0);
      gloo::gather(o);
    } else if (name == "scatter") {
      gloo::ScatterOptions o(ctx);
      std::vector<float*> blocks;
      for (int r = 0; r < ctx->size; ++r) blocks.push_back(send + r * k.param);
      if (ctx->rank == 0) o.setInputs(blocks, k.param);
      o.setOutput(recv, k.recv);
      o.setRoot(0);
      gloo::scatter(o);
    } else {
      gloo::AlltoallOptions o(ctx);
      o.setInput(send, k.send);
      o.setOutput(recv, k.recv);
      gloo::alltoall(o);
    }
  };
}

double meanAcrossRanks(const Context& ctx, double value) {
  std::vector<double> v{value};
  gloo::AllreduceRing<double>(ctx, std::vector<double*>{v.data()}, 1).run();
  return v[0] / ctx->size;
}

plait::perf::Measurement measure(const Algorithm& a, const Options& o, const Context& ctx, std::vector<float>& send,
                                 std::vector<float>& recv, Counts k) {
  auto load = [&] {
    float* in = a.inPlace ? recv.data() : send.data();
    for (size_t i = 0; i < k.send; ++i) in[i] = inputValue(ctx->rank, i);
  };
  load();
  std::function<void()> call = makeCall(a, ctx, send.data(), recv.data(), k);
  for (int i = 0; i < o.warmup; ++i) call();
  gloo::BarrierAllToAll(ctx).run();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) call();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  us = o.iters ? us / o.iters : 0;
  long long wrong = -1;
  if (o.check) {
    load();
    call();
    // Gloo's halving-doubling reduce-scatter leaves rank r's block inside the
    // buffer at a place of its own choosing (bit-reversed order and, for
    // non-powers of two, uneven): accept the block wherever it is.
    long long best = countWrong(a.coll, 0, ctx->rank, ctx->size, k, recv.data(), k.recv);
    for (int b = 0; a.coll == Coll::kReduceScatter && b < ctx->size && best > 0; ++b) {
      best = std::min(best, countWrong(a.coll, 0, ctx->rank, ctx->size, k, recv.data() + b * k.recv, k.recv));
    }
    double mine = static_cast<double>(best);
    wrong = static_cast<long long>(meanAcrossRanks(ctx, mine) * ctx->size + 0.5);
  }
  size_t bytes = std::max(k.send, k.recv) * sizeof(float);
  return plait::perf::makeMeasurement(bytes, meanAcrossRanks(ctx, us),
                                      plait::perf::busFactorFor(a.busName, ctx->size), wrong);
}

int runRank(const Algorithm& a, const Options& o, int rank, int size) {
  gloo::transport::tcp::attr attr;
  // GLOO_SOCKET_IFNAME (PyTorch's name) picks an interface, e.g. across
  // network namespaces (perf/net); otherwise loopback.
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME")) attr.iface = iface;
  else attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(o.storeDir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, device);
  Counts big = countsFor(a.coll, o.maxBytes / sizeof(float), size);
  std::vector<float> send(std::max<size_t>(1, std::max(big.send, big.recv)));
  std::vector<float> recv(send.size());
  if (rank == 0) {
    std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
                "agg iters: 1 validation: %d graph: 0\n", o.minBytes, o.maxBytes, o.factor, o.warmup, o.iters, o.check);
    std::printf("# Gloo %s: %d ranks, TCP on loopback, float32 sum, time = mean across ranks\n", a.name, size);
    plait::perf::printTableHeader(stdout);
  }
  long long wrongTotal = 0;
  double busSum = 0;
  int rows = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes = static_cast<size_t>(bytes * o.factor)) {
    Counts k = countsFor(a.coll, bytes / sizeof(float), size);
    if (k.param == 0) continue;  // Gloo rejects empty buffers
    plait::perf::TableRow row{std::max(k.send, k.recv) * sizeof(float), std::max(k.send, k.recv), "float",
                              isReduction(a.coll) ? "sum" : "none", isRooted(a.coll) ? 0 : -1, {}, {}};
    (a.inPlace ? row.inPlace : row.outOfPlace) = measure(a, o, ctx, send, recv, k);
    const plait::perf::Measurement& m = a.inPlace ? row.inPlace : row.outOfPlace;
    wrongTotal += std::max(0LL, m.wrong);
    busSum += m.busBw;
    ++rows;
    if (rank == 0) {
      std::printf("%s\n", plait::perf::formatRow(row).c_str());
      std::fflush(stdout);
    }
  }
  if (rank == 0) plait::perf::printFooter(stdout, wrongTotal, rows ? busSum / rows : 0);
  return wrongTotal == 0 ? 0 : 1;
}

bool parseArgs(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "a:b:e:f:n:w:k:p:s:")) != -1) {
    switch (c) {
      case 'a': o->algorithm = optarg; break;
      case 'b': o->minBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'e': o->maxBytes = plait::perf::peer::parseBytes(optarg); break;
      case 'f': o->factor = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      case 'k': o->check = std::atoi(optarg); break;
      case 'p': o->procs = std::atoi(optarg); break;
      case 's': o->storeDir = optarg; break;
      default: return false;
    }
  }
  return o->factor > 1 && o->minBytes > 0;
}

// Forks `procs` ranks meeting in a fresh store directory; returns the worst
// exit status.
int forkRanks(const Algorithm& a, Options o) {
  char dir[] = "/tmp/plait-gloo-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  o.storeDir = dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < o.procs; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = runRank(a, o, r, o.procs);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "# Rank %d: gloo error: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    worst = std::max(worst, rc);
  }
  std::filesystem::remove_all(dir);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const Algorithm* algorithm = nullptr;
  bool ok = parseArgs(argc, argv, &o);
  for (const Algorithm& a : kAlgorithms) {
    if (o.algorithm == a.name) algorithm = &a;
  }
  const char* rankVar = std::getenv("PLAIT_RANK");
  const char* sizeVar = std::getenv("PLAIT_NRANKS");
  bool launched = rankVar && sizeVar;
  if (!ok || !algorithm || (o.procs < 1 && !(launched && !o.storeDir.empty()))) {
    std::fprintf(stderr, "usage: %s -a <algorithm> (-p N | under plait-run with -s <store dir>) [-b] [-e] [-f >1] "
                 "[-n] [-w] [-k]\nalgorithms:", argv[0]);
    for (const Algorithm& a : kAlgorithms) std::fprintf(stderr, " %s", a.name);
    std::fprintf(stderr, "\n");
    return 1;
  }
  if (o.procs >= 1) return forkRanks(*algorithm, o);
  try {
    return runRank(*algorithm, o, std::atoi(rankVar), std::atoi(sizeVar));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "# Rank %s: gloo error: %s\n", rankVar, e.what());
    return 1;
  }
}
