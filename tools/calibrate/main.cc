// plait-calibrate — measures the host cost model's five numbers on this
// machine (core/host_costs.h) and writes them as a calibration file that
// PLAIT_HOST_COSTS (the library's tuner) and plait-sim --host-costs read.
//
//   plait-run -n 2 plait-calibrate -o host_costs.txt
//   PLAIT_HOST_COSTS=host_costs.txt plait-run -n 2 all_reduce_perf -b 8 -e 64M
//
// Every rank runs the same calls through NCCL's API with a per-call
// configuration (ncclCollConfig_t) that forces the algorithm and one channel:
// ring AllReduce from 8 B to --max-bytes, one-shot AllReduce up to 32 KiB,
// ring AllGather at small sizes. Each point is the median of --repeats timed
// loops (each the slowest rank's mean time per call; --point-ms in all),
// taken in rounds over all points; the fit is fitHostCosts's. Rank 0 prints each point beside what the built-in and the
// fitted costs predict, then writes the file (or prints it without -o).
// Exit status: 0; 1 when a call or the fit fails; 2 on bad flags or a run
// with fewer than 2 ranks.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/cost_model.h"
#include "core/host_costs.h"
#include "core/tuner.h"
#include "plait/launch.hpp"

namespace {

using plait::CostSample;

struct Options {
  std::string output;
  uint64_t maxBytes = 16 << 20;
  double pointMs = 60;
  int repeats = 5;
  int maxIters = 20000;
  bool quick = false;  // a few points, for tests
};

struct Point {
  CostSample::Kind kind;
  size_t bytes;
};

const char* kindName(CostSample::Kind k) {
  switch (k) {
    case CostSample::kRingAllReduce: return "ring AllReduce";
    case CostSample::kOneShotAllReduce: return "one-shot AllReduce";
    case CostSample::kRingAllGather: return "ring AllGather";
  }
  return "?";
}

std::vector<Point> pointsFor(const Options& o, int nranks) {
  std::vector<Point> points;
  const uint64_t top = o.quick ? std::min<uint64_t>(o.maxBytes, 1 << 20) : o.maxBytes;
  for (uint64_t b = 8; b <= top; b *= o.quick ? 32 : 4) points.push_back({CostSample::kRingAllReduce, b});
  // The one-shot path takes AllReduces up to the mesh's step (32 KiB by default).
  for (size_t b = 8; b <= (32 << 10); b *= o.quick ? 32 : 4) points.push_back({CostSample::kOneShotAllReduce, b});
  // AllGather: the whole gathered buffer, a float per rank and up.
  for (size_t per : {4, 64, 1024}) points.push_back({CostSample::kRingAllGather, per * nranks});
  return points;
}

ncclResult_t runOnce(const Point& p, void* send, void* recv, int nranks, ncclComm_t comm) {
  ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
  config.maxCTAs = 1;
  config.algSelection = p.kind == CostSample::kOneShotAllReduce ? "oneshot" : "ring";
  if (p.kind == CostSample::kRingAllGather)
    return ncclAllGatherConfig(send, recv, p.bytes / 4 / nranks, ncclFloat, comm, nullptr, &config);
  return ncclAllReduceConfig(send, recv, p.bytes / 4, ncclFloat, ncclSum, comm, nullptr, &config);
}

// The slowest rank's value of `v` (every rank gets it).
ncclResult_t maxOverRanks(double* v, ncclComm_t comm) { return ncclAllReduce(v, v, 1, ncclDouble, ncclMax, comm, nullptr); }

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Calls per timed loop of one point: enough for o.pointMs / o.repeats after
// a warm-up, the same on every rank (the slowest rank's warm-up decides).
ncclResult_t loopLength(const Options& o, const Point& p, std::vector<float>& send, std::vector<float>& recv,
                        int nranks, ncclComm_t comm, int* iters) {
  constexpr int kWarmup = 10;
  const double t0 = nowUs();
  for (int i = 0; i < kWarmup; ++i)
    if (ncclResult_t r = runOnce(p, send.data(), recv.data(), nranks, comm); r != ncclSuccess) return r;
  double warm = (nowUs() - t0) / kWarmup;
  if (ncclResult_t r = maxOverRanks(&warm, comm); r != ncclSuccess) return r;
  *iters = std::clamp(static_cast<int>(o.pointMs * 1e3 / o.repeats / std::max(warm, 0.01)), 3, o.maxIters);
  return ncclSuccess;
}

// One timed loop: the slowest rank's mean time per call.
ncclResult_t timedLoop(const Point& p, int iters, std::vector<float>& send, std::vector<float>& recv, int nranks,
                       ncclComm_t comm, double* usPerCall) {
  const double t0 = nowUs();
  for (int i = 0; i < iters; ++i)
    if (ncclResult_t r = runOnce(p, send.data(), recv.data(), nranks, comm); r != ncclSuccess) return r;
  *usPerCall = (nowUs() - t0) / iters;
  return maxOverRanks(usPerCall, comm);
}

// What a Tuner with `costs` predicts for the point, forced as the calls were.
double predictUs(const plait::HostCosts& costs, const Point& p, int nranks) {
  plait::TunerInputs ti;
  ti.nranks = ti.nLocalRanks = nranks;
  ti.nChannels = 1;
  ti.ringStepBytes = plait::kHostShmDefaults.ringStepBytes;
  ti.ringSteps = plait::kHostShmDefaults.ringSteps;
  ti.meshStepBytes = plait::kHostShmDefaults.meshStepBytes;
  ti.lineMaxBytes = ti.meshStepBytes;
  ti.fullMesh = true;
  ti.costs = costs;
  const plait::Tuner tuner(ti);
  plait::Task task;
  task.coll = p.kind == CostSample::kRingAllGather ? plait::CollType::kAllGather : plait::CollType::kAllReduce;
  task.algos = p.kind == CostSample::kOneShotAllReduce ? plait::kAlgoOneShot : plait::kAlgoRing;
  return tuner.plan(task, p.bytes).predictedUs;
}

std::string describe(const plait::HostCosts& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "call %.3f us, hop %.3f us, ring %.0f B/us per channel, one-shot %.3f us + %.0f B/us",
                c.callUs, c.hopUs, c.ringBytesPerUs, c.oneShotUs, c.oneShotBytesPerUs);
  return buf;
}

// Rank 0: the table, the fit and the file.
int report(const Options& o, const std::vector<Point>& points, const std::vector<double>& us, int nranks) {
  std::vector<CostSample> samples;
  for (size_t i = 0; i < points.size(); ++i)
    samples.push_back({points[i].kind, static_cast<double>(points[i].bytes), us[i]});
  std::vector<std::string> notes;
  auto fitted = plait::fitHostCosts(samples, nranks, &notes);
  if (!fitted.isOk()) {
    std::fprintf(stderr, "plait-calibrate: %s\n", fitted.status().toString().c_str());
    return 1;
  }
  std::printf("# plait-calibrate: %d ranks, one channel; time per call, us (the slowest rank's mean)\n", nranks);
  std::printf("# %-20s %12s %12s %12s %12s\n", "algorithm", "bytes", "measured", "built-in", "fitted");
  for (size_t i = 0; i < points.size(); ++i)
    std::printf("  %-20s %12zu %12.3f %12.3f %12.3f\n", kindName(points[i].kind), points[i].bytes, us[i],
                predictUs(plait::kHostCosts, points[i], nranks), predictUs(*fitted, points[i], nranks));
  for (const std::string& n : notes) std::printf("# note: %s\n", n.c_str());
  std::printf("# built-in: %s\n# fitted:   %s\n", describe(plait::kHostCosts).c_str(), describe(*fitted).c_str());
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const std::string text = plait::formatHostCosts(
      *fitted, {"plait host costs, measured by plait-calibrate on " + std::string(host) + ", " + date + ", " +
                    std::to_string(nranks) + " ranks",
                "PLAIT_HOST_COSTS=<this file> makes the tuner plan with them (plait-sim --host-costs too)"});
  if (o.output.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  std::ofstream out(o.output);
  out << text;
  if (!out.flush()) {
    std::fprintf(stderr, "plait-calibrate: cannot write %s\n", o.output.c_str());
    return 1;
  }
  std::printf("# wrote %s\n", o.output.c_str());
  return 0;
}

int run(const Options& o) {
  auto info = plait::detectLaunch();
  if (!info.isOk()) {
    std::fprintf(stderr, "plait-calibrate: %s\n", info.status().toString().c_str());
    return 2;
  }
  if (info->nranks < 2) {
    std::fprintf(stderr, "plait-calibrate: run it with 2 ranks or more on this host: plait-run -n 2 plait-calibrate\n");
    return 2;
  }
  auto id = plait::launchUniqueId(*info, plait::Deadline::afterMs(60000));
  if (!id.isOk()) {
    std::fprintf(stderr, "plait-calibrate rank %d: %s\n", info->rank, id.status().toString().c_str());
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, info->nranks, *id, info->rank) != ncclSuccess) {
    std::fprintf(stderr, "plait-calibrate rank %d: ncclCommInitRank: %s\n", info->rank, ncclGetLastError(nullptr));
    return 1;
  }
  const std::vector<Point> points = pointsFor(o, info->nranks);
  size_t most = 0;
  for (const Point& p : points) most = std::max(most, p.bytes);
  std::vector<float> send(most / 4, 1.0f), recv(most / 4, 0.0f);
  // Rounds over all points, each point one timed loop per round: a point's
  // loops are spread over the whole run, and its median loop counts (a
  // scheduler hiccup or a slow spell falls outside it).
  std::vector<int> iters(points.size());
  std::vector<std::vector<double>> loops(points.size());
  int code = 0;
  auto failed = [&](const Point& p) {
    std::fprintf(stderr, "plait-calibrate rank %d: %s of %zu bytes: %s\n", info->rank, kindName(p.kind), p.bytes,
                 ncclGetLastError(comm));
    code = 1;
  };
  for (size_t i = 0; i < points.size() && code == 0; ++i)
    if (loopLength(o, points[i], send, recv, info->nranks, comm, &iters[i]) != ncclSuccess) failed(points[i]);
  for (int round = 0; round < o.repeats && code == 0; ++round)
    for (size_t i = 0; i < points.size() && code == 0; ++i) {
      double loop = 0;
      if (timedLoop(points[i], iters[i], send, recv, info->nranks, comm, &loop) != ncclSuccess) failed(points[i]);
      loops[i].push_back(loop);
    }
  std::vector<double> us(points.size());
  for (size_t i = 0; i < points.size() && code == 0; ++i) {
    std::sort(loops[i].begin(), loops[i].end());
    us[i] = loops[i][loops[i].size() / 2];
  }
  if (code == 0 && info->rank == 0) code = report(o, points, us, info->nranks);
  if (code == 0) ncclCommDestroy(comm);
  else ncclCommAbort(comm);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"plait-calibrate: the host cost model measured on this machine (a PLAIT_HOST_COSTS file)"};
  app.add_option("-o,--output", o.output, "the calibration file to write (default: print it)");
  app.add_option("--max-bytes", o.maxBytes, "largest ring AllReduce measured")->check(CLI::Range(uint64_t(64), uint64_t(1) << 32));
  app.add_option("--point-ms", o.pointMs, "time spent per measured point")->check(CLI::Range(0.1, 60000.0));
  app.add_option("--repeats", o.repeats, "rounds over all points, a timed loop of each per round (medians count)")->check(CLI::Range(1, 101));
  app.add_option("--max-iters", o.maxIters, "most calls per timed loop")->check(CLI::Range(3, 1000000));
  app.add_flag("--quick", o.quick, "a few points only (tests)");
  CLI11_PARSE(app, argc, argv);
  return run(o);
}
