// plait-train --parallel downpour | sandblaster. Output on standard output:
//   Downpour, from each replica as it goes:
//     replica R step K loss L samples S seconds T
//   and from rank 0 (server 0) at the end:
//     pushes replica R applied A sent S     (every server's count, summed)
//     staleness mean M p50 P p99 Q          (updates between fetch and push)
//     dropped replicas R...                 (only when some died)
//     final-loss L                          (the servers' parameters, 256 samples)
//     seconds T samples/s X
//   Sandblaster, from rank 0 (the coordinator), and --parallel lbfgs (the
//   serial reference: the same L-BFGS on one rank, no portions):
//     iteration K loss L evaluations E samples S seconds T
//     portions replica R N                  (portions whose result counted)
//     dropped replicas R...
//     final-loss L
//     seconds T samples/s X
//   and from every rank, last:  rank N ROLE I done   (ROLE: server, replica, coordinator)
#include "tools/train/parameter_server.h"

#include <cstdio>
#include <string>

#include "training/data.h"
#include "training/parameter_server/flat_model.h"

namespace plait_train {

using namespace plait::training;
using namespace plait::training::ps;

bool isParameterServer(const std::string& parallel) {
  return parallel == "downpour" || parallel == "sandblaster" || parallel == "lbfgs";
}

void addParameterServerOptions(CLI::App& app, PsConfig& ps) {
  app.add_option("--servers", ps.servers, "downpour/sandblaster: parameter-server ranks");
  app.add_option("--n-fetch", ps.nFetch, "downpour: a replica fetches the parameters every N steps");
  app.add_option("--n-push", ps.nPush, "downpour: a replica pushes its accumulated gradients every N steps");
  app.add_option("--portions", ps.portions, "sandblaster: pieces of the batch per gradient (0: 8 x replicas)");
  app.add_option("--history", ps.history, "sandblaster: L-BFGS correction pairs kept");
  app.add_option("--slow-replica", ps.slowReplica, "downpour/sandblaster: replica index made slow (test, benchmark)");
  app.add_option("--slow-ms", ps.slowMs, "milliseconds the slow replica sleeps per step or portion");
  app.add_option("--kill-replica", ps.killReplica, "replica index that kills itself (processes only; test)");
  app.add_option("--kill-step", ps.killStep, "step (downpour) or portion (sandblaster) before which it dies");
  app.add_flag("!--fail-on-dead-replica", ps.dropDeadReplicas, "a dead replica fails the run instead of being dropped");
}

double evalLoss(const TrainConfig& c, const std::vector<float>& params) {
  FlatModel model(c.model, c.seed);
  model.weights() = params;
  SyntheticDataset data(c.model, c.seed);
  return model.evaluate(globalBatch(data, 0, 256, 1, c.seed + 1));
}

namespace {

void printDownpourSummary(const TrainConfig& c, const PsReport& r, double seconds, int64_t samples) {
  for (size_t i = 0; i < r.pushesApplied.size(); ++i)
    printf("pushes replica %zu applied %lld sent %lld\n", i, (long long)r.pushesApplied[i],
           (long long)r.pushesSent[i]);
  printf("staleness mean %.3f p50 %d p99 %d\n", stalenessMean(r.stalenessHistogram),
         stalenessPercentile(r.stalenessHistogram, 0.5), stalenessPercentile(r.stalenessHistogram, 0.99));
  if (!r.droppedReplicas.empty()) {
    printf("dropped replicas");
    for (int d : r.droppedReplicas) printf(" %d", d);
    printf("\n");
  }
  printf("final-loss %.9g\n", evalLoss(c, r.params));
  printf("seconds %.3f samples/s %.1f\n", seconds, double(samples) / seconds);
}

void printSandblasterSummary(const TrainConfig& c, const PsReport& r, double seconds) {
  for (const PsPoint& p : r.points)
    printf("iteration %d loss %.9g evaluations %lld samples %lld seconds %.3f\n", p.step, p.loss,
           (long long)(p.samples / c.localBatch), (long long)p.samples, p.seconds);
  for (size_t i = 0; i < r.portionsDone.size(); ++i)
    printf("portions replica %zu %lld\n", i, (long long)r.portionsDone[i]);
  if (!r.droppedReplicas.empty()) {
    printf("dropped replicas");
    for (int d : r.droppedReplicas) printf(" %d", d);
    printf("\n");
  }
  printf("final-loss %.9g\n", evalLoss(c, r.params));
  const int64_t samples = r.points.empty() ? 0 : r.points.back().samples;
  printf("seconds %.3f samples/s %.1f\n", seconds, double(samples) / seconds);
}

}  // namespace

int runParameterServerRank(const TrainConfig& train, PsConfig ps, int globalBatch, int steps, int rank, int nranks,
                           ncclComm_t comm) {
  TrainConfig c = train;
  ps.steps = steps;
  if (c.parallel == "lbfgs") {
    if (nranks != 1) {
      if (rank == 0) fprintf(stderr, "plait-train: --parallel lbfgs is the serial reference: one rank (got %d)\n", nranks);
      return 2;
    }
    c.localBatch = globalBatch;
    auto serial = runSerialLbfgs(c, ps);
    if (!serial.isOk()) {
      fprintf(stderr, "plait-train: %s\n", serial.status().toString().c_str());
      return 1;
    }
    printSandblasterSummary(c, *serial, serial->points.empty() ? 0 : serial->points.back().seconds);
    fflush(stdout);
    return 0;
  }
  const bool downpour = c.parallel == "downpour";
  const int replicas = nranks - ps.servers - (downpour ? 0 : 1);
  if (!comm || replicas < 1) {
    if (rank == 0)
      fprintf(stderr, "plait-train: --parallel %s with %d servers needs at least %d ranks (got %d)\n",
              c.parallel.c_str(), ps.servers, ps.servers + (downpour ? 1 : 2), nranks);
    return 2;
  }
  if (downpour && globalBatch % replicas != 0) {
    if (rank == 0) fprintf(stderr, "plait-train: --batch %d must divide by %d replicas\n", globalBatch, replicas);
    return 2;
  }
  c.localBatch = downpour ? globalBatch / replicas : globalBatch;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = downpour ? runDownpour(c, ps, comm) : runSandblaster(c, ps, comm);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!report.isOk()) {
    fprintf(stderr, "plait-train rank %d: %s\n", rank, report.status().toString().c_str());
    return 1;
  }
  if (downpour && report->role == "replica") {
    std::string lines;
    char line[160];
    for (const PsPoint& p : report->points) {
      snprintf(line, sizeof line, "replica %d step %d loss %.9g samples %lld seconds %.4f\n", report->index, p.step,
               p.loss, (long long)p.samples, p.seconds);
      lines += line;
    }
    fputs(lines.c_str(), stdout);  // at the end: lines of several replicas do not interleave
  }
  if (rank == 0) {
    if (downpour)
      printDownpourSummary(c, *report, seconds, int64_t(globalBatch) * steps);
    else
      printSandblasterSummary(c, *report, seconds);
  }
  printf("rank %d %s %d done\n", rank, report->role.c_str(), report->index);
  fflush(stdout);
  return 0;
}

}  // namespace plait_train
