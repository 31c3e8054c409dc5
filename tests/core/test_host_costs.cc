// The host cost calibration (core/host_costs.h): the file's syntax and
// errors, the fit against times made from known costs, and that the tuner's
// choices follow the costs it is given.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/log.h"
#include "core/host_costs.h"
#include "core/tuner.h"
#include "scoped_env.h"

namespace plait {
namespace {

std::string errorOf(std::string_view text) {
  auto r = parseHostCosts(text, "costs.txt");
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Times the model's own formulas give for `c`, written out here rather than
// taken from the tuner: one-shot fixed cost + n B / rate; ring AllReduce
// call + 2(n-1) hop + 2(n-1)/n B / rate; ring AllGather call + (n-1) hop +
// (n-1)/n B / rate.
std::vector<CostSample> samplesOf(const HostCosts& c, int n, double noise = 0) {
  std::vector<CostSample> out;
  int i = 0;
  auto jitter = [&] { return 1 + noise * ((i++ % 3) - 1); };  // -noise, 0, +noise in turn
  for (double b = 8; b <= (16 << 20); b *= 4)
    out.push_back({CostSample::kRingAllReduce, b,
                   (c.callUs + 2 * (n - 1) * c.hopUs + 2.0 * (n - 1) / n * b / c.ringBytesPerUs) * jitter()});
  for (double b = 8; b <= (32 << 10); b *= 4)
    out.push_back({CostSample::kOneShotAllReduce, b, (c.oneShotUs + n * b / c.oneShotBytesPerUs) * jitter()});
  for (double b : {8.0, 128.0, 2048.0})
    out.push_back({CostSample::kRingAllGather, b, (c.callUs + (n - 1) * c.hopUs + (n - 1.0) / n * b / c.ringBytesPerUs) *
                                                      jitter()});
  return out;
}

TEST_CASE("a calibration file sets the keys it names and keeps the others", "[host_costs]") {
  auto r = parseHostCosts("# measured here\n\nhop_us 0.5   # a comment\nring_bytes_per_us 4.5e3\n", "costs.txt");
  REQUIRE(r.isOk());
  CHECK(r->hopUs == 0.5);
  CHECK(r->ringBytesPerUs == 4500);
  CHECK(r->callUs == kHostCosts.callUs);
  CHECK(r->oneShotBytesPerUs == kHostCosts.oneShotBytesPerUs);
  CHECK(r->oneShotUs == kHostCosts.oneShotUs);
  CHECK(parseHostCosts("", "empty")->hopUs == kHostCosts.hopUs);
  CHECK(parseHostCosts("call_us 0\n", "zero call")->callUs == 0);  // a call may be free; a hop may not
}

TEST_CASE("formatHostCosts reads back to the same values", "[host_costs]") {
  const HostCosts c{0.123456789012345678, 1.0 / 3, 4736.2596709571226, 1e9, 0};
  const std::string text = formatHostCosts(c, {"first line", "second"});
  CHECK(text.rfind("# first line\n# second\n", 0) == 0);
  auto back = parseHostCosts(text, "round trip");
  REQUIRE(back.isOk());
  CHECK(back->callUs == c.callUs);
  CHECK(back->hopUs == c.hopUs);
  CHECK(back->ringBytesPerUs == c.ringBytesPerUs);
  CHECK(back->oneShotBytesPerUs == c.oneShotBytesPerUs);
  CHECK(back->oneShotUs == c.oneShotUs);
}

TEST_CASE("a bad calibration names the line and what is wrong", "[host_costs]") {
  CHECK(contains(errorOf("hop_us 0.3\nhop_sus 1\n"), "costs.txt line 2: unknown key \"hop_sus\""));
  CHECK(contains(errorOf("one_shot_us -0.1\n"), "one_shot_us -0.1 is outside [0, 1e+06]"));
  CHECK(contains(errorOf("hop_us 0.3\n\nhop_us 0.4\n"), "line 3: hop_us given again (first on line 1)"));
  CHECK(contains(errorOf("call_us\n"), "line 1: call_us has no value"));
  CHECK(contains(errorOf("call_us 1 2\n"), "unexpected \"2\" after call_us's value"));
  CHECK(contains(errorOf("ring_bytes_per_us 12k\n"), "ring_bytes_per_us \"12k\" is not a finite number"));
  CHECK(contains(errorOf("ring_bytes_per_us nan\n"), "is not a finite number"));
  CHECK(contains(errorOf("ring_bytes_per_us inf\n"), "is not a finite number"));
  CHECK(contains(errorOf("one_shot_bytes_per_us 1e999\n"), "is not a finite number"));
  CHECK(contains(errorOf("hop_us 0\n"), "hop_us 0 is outside (0, 1e+06]"));
  CHECK(contains(errorOf("call_us -1\n"), "call_us -1 is outside [0, 1e+06]"));
  CHECK(contains(errorOf("ring_bytes_per_us 2e9\n"), "outside (0, 1e+09]"));
}

TEST_CASE("checkHostCosts refuses what a file could not hold (rank 0's costs come over the wire)", "[host_costs]") {
  CHECK(checkHostCosts(kHostCosts, "built-in").isOk());
  HostCosts c = kHostCosts;
  c.ringBytesPerUs = std::nan("");
  auto s = checkHostCosts(c, "rank 0's host costs");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(contains(s.message(), "rank 0's host costs: ring_bytes_per_us nan is outside (0, 1e+09]"));
  c = kHostCosts;
  c.hopUs = 0;
  CHECK(contains(checkHostCosts(c, "x").message(), "hop_us 0 is outside"));
}

TEST_CASE("loading a calibration: missing, oversized and good files, and the variable", "[host_costs]") {
  auto missing = loadHostCosts("/nonexistent/costs.txt");
  REQUIRE_FALSE(missing.isOk());
  CHECK(contains(missing.status().message(), "/nonexistent/costs.txt"));
  char dir[] = "/tmp/plait-host-costs-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string good = std::string(dir) + "/good.txt", big = std::string(dir) + "/big.txt";
  std::ofstream(good) << "hop_us 0.75\n";
  std::ofstream(big) << std::string(70 << 10, '#');
  CHECK(loadHostCosts(good)->hopUs == 0.75);
  auto tooBig = loadHostCosts(big);
  REQUIRE_FALSE(tooBig.isOk());
  CHECK(contains(tooBig.status().message(), "larger than 65536 bytes"));

  std::string from;
  unsetenv(kHostCostsVariable);
  CHECK(hostCostsFromEnvironment(&from)->hopUs == kHostCosts.hopUs);
  CHECK(from.empty());
  setenv(kHostCostsVariable, good.c_str(), 1);
  CHECK(hostCostsFromEnvironment(&from)->hopUs == 0.75);
  CHECK(from == good);
  setenv(kHostCostsVariable, big.c_str(), 1);
  auto bad = hostCostsFromEnvironment(&from);
  REQUIRE_FALSE(bad.isOk());
  CHECK(contains(bad.status().message(), "PLAIT_HOST_COSTS"));
  CHECK(contains(bad.status().message(), big));
  unsetenv(kHostCostsVariable);
  std::remove(good.c_str());
  std::remove(big.c_str());
  rmdir(dir);
}

TEST_CASE("the fit recovers the costs that made the times", "[host_costs]") {
  const HostCosts truth{0.4, 0.35, 4700, 10400, 0.55};
  for (int n : {2, 3, 8}) {
    auto fit = fitHostCosts(samplesOf(truth, n), n);
    REQUIRE(fit.isOk());
    CHECK(fit->callUs == Approx(truth.callUs).epsilon(1e-6));
    CHECK(fit->hopUs == Approx(truth.hopUs).epsilon(1e-6));
    CHECK(fit->ringBytesPerUs == Approx(truth.ringBytesPerUs).epsilon(1e-6));
    CHECK(fit->oneShotBytesPerUs == Approx(truth.oneShotBytesPerUs).epsilon(1e-6));
    CHECK(fit->oneShotUs == Approx(truth.oneShotUs).epsilon(1e-6));
  }
  // Noise of +-5% on every time moves no fitted cost by more than 15%.
  auto noisy = fitHostCosts(samplesOf(truth, 2, 0.05), 2);
  REQUIRE(noisy.isOk());
  CHECK(noisy->hopUs == Approx(truth.hopUs).epsilon(0.15));
  CHECK(noisy->callUs + noisy->hopUs == Approx(truth.callUs + truth.hopUs).epsilon(0.15));
  CHECK(noisy->ringBytesPerUs == Approx(truth.ringBytesPerUs).epsilon(0.15));
  CHECK(noisy->oneShotBytesPerUs == Approx(truth.oneShotBytesPerUs).epsilon(0.15));
  CHECK(noisy->oneShotUs == Approx(truth.oneShotUs).epsilon(0.15));
}

TEST_CASE("the fit clamps what it cannot believe and refuses what it cannot fit", "[host_costs]") {
  // Flat one-shot times: no measurable per-byte cost, so the rate is the top of its range.
  std::vector<CostSample> flat = samplesOf(HostCosts{0.4, 0.35, 4700, 10400, 0.55}, 2);
  for (CostSample& s : flat)
    if (s.kind == CostSample::kOneShotAllReduce) s.us = 1.0;
  std::vector<std::string> notes;
  auto fit = fitHostCosts(flat, 2, &notes);
  REQUIRE(fit.isOk());
  CHECK(fit->oneShotBytesPerUs == 1e9);
  REQUIRE(notes.size() >= 1);
  CHECK(contains(notes.back(), "one_shot_bytes_per_us"));

  CHECK_FALSE(fitHostCosts(samplesOf(kHostCosts, 2), 1).isOk());
  std::vector<CostSample> ringOnly;
  for (const CostSample& s : samplesOf(kHostCosts, 2))
    if (s.kind == CostSample::kRingAllReduce) ringOnly.push_back(s);
  auto noOneShot = fitHostCosts(ringOnly, 2);
  REQUIRE_FALSE(noOneShot.isOk());
  CHECK(contains(noOneShot.status().message(), "one-shot AllReduce samples at two sizes or more (got 0)"));
  std::vector<CostSample> noGather;
  for (const CostSample& s : samplesOf(kHostCosts, 2))
    if (s.kind != CostSample::kRingAllGather) noGather.push_back(s);
  auto partial = fitHostCosts(noGather, 2);
  REQUIRE_FALSE(partial.isOk());
  CHECK(contains(partial.status().message(), "ring AllGather samples at two sizes or more (got 0)"));
  auto negative = fitHostCosts({{CostSample::kRingAllReduce, 8, -1}}, 2);
  REQUIRE_FALSE(negative.isOk());
  CHECK(contains(negative.status().message(), "is not a measurement"));
}

Plan planWith(const HostCosts& costs, size_t bytes, CollType coll = CollType::kAllReduce, int nranks = 2,
               double cpuShare = 1, uint8_t algos = 0) {
  TunerInputs ti;
  ti.nranks = ti.nLocalRanks = nranks;
  ti.cpuShare = cpuShare;
  ti.nChannels = 1;
  ti.ringStepBytes = 128 << 10;
  ti.meshStepBytes = 32 << 10;
  ti.lineMaxBytes = 3 << 10;  // kLineMaxMessageBytes
  ti.fullMesh = true;
  ti.costs = costs;
  Task task;
  task.coll = coll;
  task.algos = algos;
  return Tuner(ti).plan(task, bytes);
}

TEST_CASE("the tuner's one-shot/ring crossover follows the costs it is given", "[host_costs][tuner]") {
  // The earlier built-in estimates (a fused ring pass priced at 12 GB/s): ring from a few KiB.
  const HostCosts estimates{0.05, 0.25, 12000, 8000, 0.30};
  CHECK(planWith(estimates, 64).algo == Algorithm::kOneShot);
  CHECK(planWith(estimates, 16 << 10).algo == Algorithm::kRing);
  // This VM's measured costs (plait-calibrate, 2 ranks; the built-in ones now): one-shot up to the mesh step.
  const HostCosts measured{0.367, 0.381, 4736, 10368, 0.55};
  for (const HostCosts& c : {measured, kHostCosts}) {
    CHECK(planWith(c, 16 << 10).algo == Algorithm::kOneShot);
    CHECK(planWith(c, 32 << 10).algo == Algorithm::kOneShot);
    CHECK(planWith(c, 64 << 10).algo == Algorithm::kRing);  // beyond the mesh: ring whatever the costs
  }
  // A slow one-shot: ring even at 8 B.
  CHECK(planWith(HostCosts{0.05, 0.25, 12000, 1, 0.3}, 8).algo == Algorithm::kRing);
  // A slow start for one-shot: ring from 8 B.
  CHECK(planWith(HostCosts{0.05, 0.25, 12000, 8000, 5}, 8).algo == Algorithm::kRing);
  // The prediction is the model's: fixed cost + n x bytes / rate for a one-shot of n = 2 ranks.
  CHECK(planWith(measured, 1024).predictedUs == Approx(0.55 + 2.0 * 1024 / 10368));
}

// The warnings a Tuner's construction logs under `name`=`value`.
std::string tunerWarnings(const char* name, const char* value) {
  char path[] = "/tmp/plait-tuner-log-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    test::ScopedEnv setting(name, value);
    test::ScopedEnv level("PLAIT_DEBUG", "WARN");
    test::ScopedEnv file("PLAIT_DEBUG_FILE", path);
    log::reset();
    planWith(kHostCosts, 64);
    log::reset();  // closes the file
  }
  log::reset();
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return text;
}

TEST_CASE("ranks that share cores price copies and hand-offs higher, the one-shot's n reads most", "[tuner]") {
  // 4 ranks on 2 cores (perf/host/log_depth.sh, 2026-11-29: the one-shot ahead at 4-16 KiB, the three within
  // noise of each other at 32-64 KiB, the ring ahead from 256 KiB).
  CHECK(planWith(kHostCosts, 8 << 10, CollType::kAllReduce, 4, 0.5).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 16 << 10, CollType::kAllReduce, 4, 0.5).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 256 << 10, CollType::kAllReduce, 4, 0.5).algo == Algorithm::kRing);
  // A core each: one-shot up to the mesh step.
  CHECK(planWith(kHostCosts, 16 << 10, CollType::kAllReduce, 4, 1).algo == Algorithm::kOneShot);
  // At 8 B the byte terms are nothing: what is left is the one-shot's hand-off, hopUs / share^2 when shared.
  CHECK(planWith(kHostCosts, 8, CollType::kAllReduce, 4, 0.5).predictedUs ==
        Approx(planWith(kHostCosts, 8, CollType::kAllReduce, 4, 1).predictedUs + 3 * kHostCosts.hopUs)
            .epsilon(0.01));
}

TEST_CASE("the log-depth schedules: halving-doubling where the ring's hops cost most", "[tuner]") {
  // 8 ranks on 2 cores (perf/results/host/log_depth.md): the one-shot at 4 KiB; halving-doubling at 32-64 KiB,
  // where it took 0.63-0.75x the ring's time and the one-shot's; the ring from 256 KiB.
  CHECK(planWith(kHostCosts, 4 << 10, CollType::kAllReduce, 8, 0.25).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 32 << 10, CollType::kAllReduce, 8, 0.25).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 64 << 10, CollType::kAllReduce, 8, 0.25).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 256 << 10, CollType::kAllReduce, 8, 0.25).algo == Algorithm::kRing);
  // Recursive-doubling AllGather (powers of two): beyond the one-shot's blocks (3 KiB), at 4 and 8 ranks
  // (0.77-0.96x the ring's time at 8 ranks from 64 KiB, 0.81-0.90 at 4 from 16 KiB).
  CHECK(planWith(kHostCosts, 16 << 10, CollType::kAllGather, 8, 0.25).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 64 << 10, CollType::kAllGather, 8, 0.25).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 16 << 10, CollType::kAllGather, 4, 0.5).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 64 << 10, CollType::kAllGather, 6, 0.33).algo == Algorithm::kRing);  // not a power of 2
  // A core each: hops are cheap, the ring's fused passes win sooner.
  CHECK(planWith(kHostCosts, 256 << 10, CollType::kAllReduce, 8, 1).algo == Algorithm::kRing);
  // The binomial trees lost to the chains at every size below 1 MiB at 4 and 8 ranks: never the tuner's own
  // choice, even where the model would price them lower (16 ranks with a core each, 2 KiB).
  for (CollType rooted : {CollType::kBroadcast, CollType::kReduce}) {
    for (size_t bytes : {size_t(4) << 10, size_t(64) << 10, size_t(1) << 20})
      CHECK(planWith(kHostCosts, bytes, rooted, 8, 0.25).algo == Algorithm::kRing);
    for (size_t bytes : {size_t(2) << 10, size_t(4) << 10})
      CHECK(planWith(kHostCosts, bytes, rooted, 16, 1).algo != Algorithm::kTree);
  }
  // A selection gets them, at any size and rank count; AllGather at powers of two only, ReduceScatter never
  // (forced: refused).
  CHECK(planWith(kHostCosts, 1 << 20, CollType::kBroadcast, 4, 0.5, kAlgoTree).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 100, CollType::kReduce, 3, 1, kAlgoTree).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 1 << 20, CollType::kAllGather, 4, 0.5, kAlgoTree).algo == Algorithm::kTree);
  CHECK(planWith(kHostCosts, 1 << 20, CollType::kAllGather, 6, 0.5, kAlgoTree).refused);
  CHECK(planWith(kHostCosts, 1 << 20, CollType::kReduceScatter, 4, 0.5, kAlgoTree).refused);
  {
    test::ScopedEnv algo("PLAIT_ALGO", "tree");
    CHECK(planWith(kHostCosts, 64, CollType::kAllReduce, 2).algo == Algorithm::kTree);
    CHECK(planWith(kHostCosts, 1 << 20, CollType::kReduceScatter, 4).algo == Algorithm::kRing);  // none: the tuner's
  }
  // Only with every peer on the mesh.
  TunerInputs ti;
  ti.nranks = 8;
  ti.nLocalRanks = 4;
  ti.nChannels = 1;
  ti.ringStepBytes = 128 << 10;
  ti.meshStepBytes = 32 << 10;
  ti.fullMesh = false;
  Task task;
  task.algos = kAlgoTree;
  CHECK(Tuner(ti).plan(task, 64 << 10).refused);
}

TEST_CASE("the chains (Broadcast, Reduce) slice their whole buffer, the others one block", "[tuner]") {
  constexpr size_t KiB = 1024;
  for (CollType chain : {CollType::kBroadcast, CollType::kReduce}) {
    // The whole buffer in steps of at most 128 KiB, at 2 ranks and at 4 on 2 cores.
    CHECK(planWith(kHostCosts, 64 * KiB, chain).sliceBytes == 64 * KiB);
    CHECK(planWith(kHostCosts, 512 * KiB, chain).sliceBytes == 128 * KiB);
    CHECK(planWith(kHostCosts, 64 * KiB, chain, 4, 0.5).sliceBytes == 64 * KiB);
    CHECK(planWith(kHostCosts, 8 * KiB, chain, 4, 0.5).sliceBytes == 8 * KiB);
    // Small buffers with a core per rank: two slices (a block each) pipeline.
    CHECK(planWith(kHostCosts, 8 * KiB, chain).sliceBytes == 4 * KiB);
  }
  // An AllGather or a ring AllReduce moves one block per step.
  CHECK(planWith(kHostCosts, 64 * KiB, CollType::kAllGather).sliceBytes == 32 * KiB);
  CHECK(planWith(kHostCosts, 256 * KiB, CollType::kAllReduce).sliceBytes == 128 * KiB);
  CHECK(planWith(kHostCosts, 128 * KiB, CollType::kAllReduce, 4, 0.5).sliceBytes == 32 * KiB);
}

TEST_CASE("small AllGathers, ReduceScatters, Broadcasts and Reduces run one-shot: up to a line message from 3 ranks, "
          "512 bytes at 2", "[tuner]") {
  for (int nranks : {2, 3, 4}) {
    const size_t most = nranks == 2 ? 512 : 3072;
    for (CollType coll : {CollType::kAllGather, CollType::kReduceScatter}) {  // the block is the message
      CHECK(planWith(kHostCosts, 64 * nranks, coll, nranks).algo == Algorithm::kOneShot);
      CHECK(planWith(kHostCosts, most * nranks, coll, nranks).algo == Algorithm::kOneShot);
      // Beyond: the ring, or at 4 ranks recursive-doubling AllGather (2 hops to the ring's 3).
      const Algorithm beyond = coll == CollType::kAllGather && nranks == 4 ? Algorithm::kTree : Algorithm::kRing;
      CHECK(planWith(kHostCosts, (most + 1) * nranks, coll, nranks).algo == beyond);
    }
    for (CollType coll : {CollType::kBroadcast, CollType::kReduce}) {  // the whole buffer is
      CHECK(planWith(kHostCosts, 64, coll, nranks).algo == Algorithm::kOneShot);
      CHECK(planWith(kHostCosts, most, coll, nranks).algo == Algorithm::kOneShot);
      CHECK(planWith(kHostCosts, most + 1, coll, nranks).algo == Algorithm::kRing);
    }
  }
  // The 512-byte rule is the tuner's own choice: a selection of the one-shot
  // runs it at 2 ranks up to the line message.
  CHECK(planWith(kHostCosts, 2 * 3072, CollType::kAllGather, 2, 1, kAlgoOneShot).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 3072, CollType::kReduce, 2, 1, kAlgoOneShot).algo == Algorithm::kOneShot);
  CHECK(planWith(kHostCosts, 3073, CollType::kReduce, 2, 1, kAlgoOneShot).refused);
  {
    test::ScopedEnv algo("PLAIT_ALGO", "oneshot");
    CHECK(planWith(kHostCosts, 2 * 1024, CollType::kReduceScatter).algo == Algorithm::kOneShot);
    CHECK(planWith(kHostCosts, 2 * 3073, CollType::kReduceScatter).algo == Algorithm::kRing);  // cannot: the ring
  }
  test::ScopedEnv algo("PLAIT_ALGO", "ring");
  CHECK(planWith(kHostCosts, 64, CollType::kBroadcast).algo == Algorithm::kRing);
}

TEST_CASE("PLAIT_ALGO takes NCCL_ALGO's syntax, per collective too", "[tuner]") {
  CHECK(planWith(kHostCosts, 64).algo == Algorithm::kOneShot);  // the cost model's choice at 64 B
  {
    test::ScopedEnv algo("PLAIT_ALGO", "allreduce:ring;allgather:ring");
    CHECK(planWith(kHostCosts, 64).algo == Algorithm::kRing);
  }
  {
    test::ScopedEnv algo("NCCL_ALGO", "Ring");
    CHECK(planWith(kHostCosts, 64).algo == Algorithm::kRing);
  }
  {
    test::ScopedEnv algo("PLAIT_ALGO", "allgather:ring");  // says nothing of AllReduce
    CHECK(planWith(kHostCosts, 64).algo == Algorithm::kOneShot);
  }
  {
    test::ScopedEnv algo("PLAIT_ALGO", "^ring");
    CHECK(planWith(kHostCosts, 16 << 10).algo == Algorithm::kOneShot);
    CHECK(planWith(kHostCosts, 1 << 20).algo == Algorithm::kTree);  // one-shot cannot take 1 MiB: halving-doubling
    CHECK(planWith(kHostCosts, 1 << 20, CollType::kAllGather).algo == Algorithm::kTree);  // recursive doubling
  }
  {
    test::ScopedEnv algo("PLAIT_ALGO", "oneshot");
    CHECK(planWith(HostCosts{0.05, 0.25, 12000, 1, 0.3}, 8 << 10).algo == Algorithm::kOneShot);  // costs overruled
  }
}

TEST_CASE("NCCL_ALGO and NCCL_PROTO settings Plait cannot honour are said and ignored", "[tuner]") {
  CHECK(tunerWarnings("PLAIT_ALGO", "ring") == "");
  const std::string tree = tunerWarnings("NCCL_ALGO", "Tree");
  CHECK(contains(tree, "NCCL_ALGO=\"Tree\" allows ReduceScatter none"));
  CHECK(contains(tree, "none of Plait's algorithms (ring, oneshot; tree but for ReduceScatter); the tuner chooses "
                       "there"));
  const std::string pat = tunerWarnings("NCCL_ALGO", "PAT");
  CHECK(contains(pat, "NCCL_ALGO=\"PAT\" allows AllReduce, Broadcast, Reduce, AllGather, ReduceScatter none"));
  CHECK(contains(tunerWarnings("PLAIT_ALGO", "ring,bogus"), "unknown algorithm \"bogus\""));
  for (const char* fine : {"Simple", "^LL,LL128", "simple, LL"}) CHECK(tunerWarnings("NCCL_PROTO", fine) == "");
  CHECK(contains(tunerWarnings("NCCL_PROTO", "LL128"), "NCCL_PROTO=\"LL128\" leaves out Simple, the only protocol"));
  CHECK(contains(tunerWarnings("NCCL_PROTO", "^Simple"), "leaves out Simple"));
  CHECK(contains(tunerWarnings("PLAIT_PROTO", "Simple,LLL"), "unknown protocol \"LLL\""));
  // Either way the tuner still plans: the cost model's choice.
  test::ScopedEnv pat2("NCCL_ALGO", "PAT");
  CHECK(planWith(kHostCosts, 64).algo == Algorithm::kOneShot);
}

}  // namespace
}  // namespace plait
