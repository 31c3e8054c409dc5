// Parameter-server training (training/parameter_server/) against independent
// references.
//
// Downpour SGD with one replica fetching and pushing every step is serial SGD
// with Adagrad: the same batches, the same float operations in the same
// order (the replica's accumulated gradient is 0 + g, the servers' updates
// are elementwise), so the parameters must be bit-identical, sharded over one
// server or two. With several replicas nothing is comparable bit for bit;
// checked instead: every push is applied exactly once (the servers' counts
// equal what each replica says it sent, and the staleness histogram counts
// every push), the loss falls, a slow replica does not hold the fast one.
//
// Sandblaster L-BFGS runs the same L-BFGS driver as the serial reference
// (lbfgs.h), so the two differ only in float summation order: the batch's
// gradient is a sum over portions in arrival order, dot products are sums
// of per-server partial sums. After 6 iterations that is ~1e-6 relative on
// the loss; the tolerance (1e-4 on losses, 1e-3 on parameters) is far above
// that and far below what a lost or doubly counted portion does (a portion is
// 1/8 or more of the batch: the gradient moves by 10 % or more).
//
// Killed replicas (processes): a Downpour server drops the dead replica and
// the other finishes, or (fail mode) the server fails naming it; Sandblaster
// re-issues a dead replica's portion and still equals serial L-BFGS.
#include <catch2/catch.hpp>

#include <cstdio>
#include <mutex>

#include "reference.h"
#include "training/parameter_server/parameter_server.h"

using namespace plait::training;
using namespace plait::training::ps;
using plait_test::maxRelDiff;

namespace {

TrainConfig mlpConfig(int batch) {
  TrainConfig c;
  c.model.kind = "mlp";
  c.model.hidden = 24;
  c.localBatch = batch;
  c.seed = 11;
  c.optimizer.kind = "adagrad";
  c.optimizer.lr = 0.05f;
  return c;
}

// Runs fn on every rank of an nranks thread job; the reports by rank.
struct PsRun {
  std::vector<PsReport> reports;
  std::vector<std::string> errors;
};

template <typename Fn>
PsRun runPs(int nranks, Fn&& fn) {
  PsRun run;
  run.reports.resize(nranks);
  run.errors = plait_test::runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    plait::Result<PsReport> r = fn(comm);
    if (!r.isOk()) return r.status().toString();
    run.reports[rank] = std::move(*r);
    return "";
  });
  return run;
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

}  // namespace

TEST_CASE("Downpour with one replica, n_fetch = n_push = 1, is serial Adagrad bit for bit", "[ps][downpour]") {
  for (std::string kind : {"mlp", "transformer"}) {
    for (int servers : {1, 2}) {
      INFO(kind << " with " << servers << " servers");
      TrainConfig c = mlpConfig(8);
      c.model.kind = kind;
      PsConfig ps;
      ps.servers = servers;
      ps.steps = 6;
      auto run = runPs(servers + 1, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
      REQUIRE(run.errors.empty());
      auto serial = plait_test::runSerial(c, 1, ps.steps);
      const PsReport& replica = run.reports[servers];
      REQUIRE(replica.points.size() == size_t(ps.steps));
      for (int k = 0; k < ps.steps; ++k) CHECK(replica.points[k].loss == serial.losses[k]);
      CHECK(run.reports[0].params == serial.params[0]);
      CHECK(run.reports[0].pushesApplied == std::vector<int64_t>{int64_t(ps.steps) * servers});
      CHECK(run.reports[0].stalenessHistogram[0] == int64_t(ps.steps) * servers);  // alone: never stale
    }
  }
}

TEST_CASE("Downpour with several replicas applies every push exactly once and learns", "[ps][downpour]") {
  TrainConfig c = mlpConfig(8);
  PsConfig ps;
  ps.servers = 2;
  ps.steps = 12;
  ps.nFetch = 2;
  ps.nPush = 5;  // pushes after steps 5, 10 and the last: 3 per replica
  const int replicas = 3;
  auto run = runPs(ps.servers + replicas, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(run.errors.empty());
  const PsReport& r = run.reports[0];
  REQUIRE(r.pushesApplied.size() == size_t(replicas));
  for (int i = 0; i < replicas; ++i) {
    CHECK(r.pushesApplied[i] == 3 * ps.servers);
    CHECK(r.pushesSent[i] == 3 * ps.servers);
  }
  CHECK(total(r.stalenessHistogram) == 3 * replicas * ps.servers);
  CHECK(r.droppedReplicas.empty());
  // A longer run learns: the replicas' last losses are well below their first.
  ps.steps = 40;
  auto longRun = runPs(ps.servers + replicas, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(longRun.errors.empty());
  double firstLoss = 0, lastLoss = 0;
  for (int i = 0; i < replicas; ++i) {
    const PsReport& rep = longRun.reports[ps.servers + i];
    firstLoss += rep.points.front().loss / replicas;
    double tail = 0;
    for (int k = 30; k < 40; ++k) tail += rep.points[k].loss / 10;
    lastLoss += tail / replicas;
  }
  CHECK(lastLoss < 0.8 * firstLoss);
}

TEST_CASE("Downpour: a slow replica does not hold the others", "[ps][downpour]") {
  TrainConfig c = mlpConfig(4);
  PsConfig ps;
  ps.servers = 1;
  ps.steps = 8;
  ps.slowReplica = 1;
  ps.slowMs = 150;  // its second step ends after 300 ms; the fast one needs a few ms for all eight
  auto run = runPs(3, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(run.errors.empty());
  const PsReport& fast = run.reports[1];
  const PsReport& slow = run.reports[2];
  REQUIRE(fast.points.size() == 8);
  REQUIRE(slow.points.size() == 8);
  CHECK(fast.points.back().seconds < slow.points[1].seconds);
  CHECK(total(run.reports[0].stalenessHistogram) == 16);
  CHECK(run.reports[0].pushesApplied == std::vector<int64_t>{8, 8});
}

TEST_CASE("Downpour: staleness counts the versions applied since a replica's fetch", "[ps][downpour]") {
  // Whether two replicas overlap depends on the scheduler; one replica that
  // fetches every 4th step and pushes every step does not: its pushes find
  // the server 0, 1, 2, 3 versions past its fetch, twice, on every server.
  TrainConfig c = mlpConfig(4);
  PsConfig ps;
  ps.servers = 2;
  ps.steps = 8;
  ps.nFetch = 4;
  ps.nPush = 1;
  auto run = runPs(3, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(run.errors.empty());
  const std::vector<int64_t>& h = run.reports[0].stalenessHistogram;
  REQUIRE(h.size() == size_t(kStalenessBins));
  for (int b = 0; b < kStalenessBins; ++b) CHECK(h[b] == (b < 4 ? 2 * ps.servers : 0));
  CHECK(stalenessPercentile(h, 1.0) == 3);
}

TEST_CASE("Sandblaster L-BFGS equals serial L-BFGS whatever the portions' distribution", "[ps][sandblaster]") {
  struct Case {
    int servers, replicas, portions, slow;
  };
  for (Case k : {Case{1, 1, 4, -1}, Case{2, 3, 0, -1}, Case{2, 2, 16, 1}}) {
    INFO(k.servers << " servers, " << k.replicas << " replicas, " << k.portions << " portions, slow " << k.slow);
    TrainConfig c = mlpConfig(48);
    PsConfig ps;
    ps.servers = k.servers;
    ps.steps = 6;
    ps.portions = k.portions;
    ps.slowReplica = k.slow;
    ps.slowMs = 20;
    auto serial = runSerialLbfgs(c, ps);
    REQUIRE(serial.isOk());
    REQUIRE(serial->points.size() == size_t(ps.steps));
    auto run = runPs(1 + k.servers + k.replicas, [&](ncclComm_t comm) { return runSandblaster(c, ps, comm); });
    REQUIRE(run.errors.empty());
    const PsReport& coord = run.reports[0];
    REQUIRE(coord.points.size() == serial->points.size());
    for (size_t i = 0; i < coord.points.size(); ++i) {
      CHECK(std::abs(coord.points[i].loss - serial->points[i].loss) < 1e-4 * std::max(1.0, serial->points[i].loss));
      CHECK(coord.points[i].samples == serial->points[i].samples);  // the same line search decisions
    }
    CHECK(maxRelDiff(coord.params, serial->params) < 1e-3);
    CHECK(serial->points.back().loss < 0.8 * serial->points.front().loss);  // it learns
    const int portions = k.portions > 0 ? k.portions : 8 * k.replicas;
    CHECK(total(coord.portionsDone) == int64_t(portions) * coord.evaluations);
    if (k.slow >= 0) CHECK(coord.portionsDone[k.slow] < coord.portionsDone[1 - k.slow]);
  }
}

TEST_CASE("parameter-server configurations are checked", "[ps]") {
  TrainConfig c = mlpConfig(8);
  PsConfig ps;
  ps.servers = 2;
  auto run = runPs(2, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(run.errors.size() == 2);
  CHECK(run.errors[0].find("at least one server and one replica: 2 ranks for 2 servers") != std::string::npos);
  ps.servers = 1;
  ps.nPush = 0;
  run = runPs(2, [&](ncclComm_t comm) { return runDownpour(c, ps, comm); });
  REQUIRE(run.errors.size() == 2);
  CHECK(run.errors[0].find("n_fetch and n_push must be at least 1") != std::string::npos);
  ps.nPush = 1;
  c.model.kind = "moe";
  auto serial = runSerialLbfgs(c, ps);
  REQUIRE(!serial.isOk());
  CHECK(serial.status().message().find("MoE") != std::string::npos);
  c.model.kind = "mlp";
  ps.portions = 9;
  c.localBatch = 8;
  run = runPs(3, [&](ncclComm_t comm) { return runSandblaster(c, ps, comm); });
  REQUIRE(run.errors.size() == 3);
  CHECK(run.errors[0].find("9 portions of a batch of 8 samples") != std::string::npos);
}

// ---- Killed replicas: processes ------------------------------------------------

namespace {

// Rank 0 of a process job checks its own report; the exit code says what failed.
int processRank(int rank, int nranks, const ncclUniqueId& id, const std::function<int(ncclComm_t)>& body) {
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
  const int rc = body(comm);
  ncclCommAbort(comm);  // a job that lost a rank cannot end collectively
  return rc;
}

// One server, two replicas, six steps; replica 1 dies before its third.
PsConfig killedReplica(bool drop) {
  PsConfig ps;
  ps.servers = 1;
  ps.steps = 6;
  ps.killReplica = 1;
  ps.killStep = 2;
  ps.dropDeadReplicas = drop;
  return ps;
}

}  // namespace

TEST_CASE("Downpour: a killed replica is dropped and the others finish", "[ps][process]") {
  TrainConfig c = mlpConfig(4);
  PsConfig ps = killedReplica(true);
  auto codes = plait_test::runProcesses(3, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, 3, id, [&](ncclComm_t comm) {
      auto r = runDownpour(c, ps, comm);
      if (!r.isOk()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, r.status().toString().c_str());
        return 20;
      }
      if (rank != 0) return 0;
      if (r->droppedReplicas != std::vector<int>{1}) return 21;
      if (r->pushesApplied[0] != 6 || r->pushesSent[0] != 6) return 22;
      if (r->pushesApplied[1] != 2) return 23;  // steps 0 and 1 pushed before it died
      return 0;
    });
  });
  CHECK(codes == std::vector<int>{0, 0, -9});
}

TEST_CASE("Downpour: a killed replica fails the servers when told to, naming it", "[ps][process]") {
  TrainConfig c = mlpConfig(4);
  PsConfig ps = killedReplica(false);
  auto codes = plait_test::runProcesses(3, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, 3, id, [&](ncclComm_t comm) {
      auto r = runDownpour(c, ps, comm);
      if (rank != 0) return r.isOk() ? 0 : 20;
      if (r.isOk()) return 21;
      std::fprintf(stderr, "server: %s\n", r.status().toString().c_str());
      if (r.status().code() != plait::Code::kRemoteError) return 22;
      if (r.status().message().find("rank 2") == std::string::npos) return 23;
      return 0;
    });
  });
  CHECK(codes == std::vector<int>{0, 0, -9});
}

TEST_CASE("Sandblaster: a killed replica's portions are redone and the result is unchanged", "[ps][process]") {
  TrainConfig c = mlpConfig(32);
  PsConfig ps;
  ps.servers = 1;
  ps.steps = 4;
  ps.portions = 8;
  ps.killReplica = 1;
  ps.killStep = 1;  // it dies holding its second portion
  auto codes = plait_test::runProcesses(4, [&](int rank, const ncclUniqueId& id) {
    return processRank(rank, 4, id, [&](ncclComm_t comm) {
      auto r = runSandblaster(c, ps, comm);
      if (!r.isOk()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, r.status().toString().c_str());
        return 20;
      }
      if (rank != 0) return 0;
      auto serial = runSerialLbfgs(c, ps);
      if (!serial.isOk()) return 21;
      if (r->droppedReplicas != std::vector<int>{1}) return 22;
      if (std::abs(r->finalLoss - serial->finalLoss) > 1e-4 * std::max(1.0, serial->finalLoss)) return 23;
      if (maxRelDiff(r->params, serial->params) > 1e-3) return 24;
      return 0;
    });
  });
  CHECK(codes == std::vector<int>{0, 0, 0, -9});
}
