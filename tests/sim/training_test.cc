// A training step's traffic: volumes against the strategy's arithmetic, and
// what placement changes.
#include <catch2/catch.hpp>

#include "sim/training.h"

using namespace plait;
using namespace plait::sim;

namespace {

std::unique_ptr<ClusterModel> h100s(int hosts, double oversubscription = 1, bool pxn = true) {
  auto c = topo::loadCluster(std::string(PLAIT_TOPO_TEST_DATA) + "/hgx_h100.xml", hosts);
  REQUIRE(c.isOk());
  NetworkSpec net;
  net.hostsPerLeaf = 4;
  net.oversubscription = oversubscription;
  net.pxn = pxn;
  auto m = ClusterModel::create(std::move(c).value(), net);
  INFO(m.status().toString());
  REQUIRE(m.isOk());
  return std::move(m).value();
}

StepReport step(const ClusterModel& m, const TrainingSpec& s) {
  auto r = simulateStep(m, s);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return std::move(r).value();
}

const PhaseReport& phase(const StepReport& r, const std::string& name) {
  for (const PhaseReport& p : r.phases)
    if (p.name == name) return p;
  FAIL("no phase " << name);
  return r.phases.front();
}

TrainingSpec small() {
  TrainingSpec s;
  s.tp = 8;
  s.pp = 2;
  s.dModel = 1024;
  s.blocks = 4;
  s.seq = 512;
  s.accumulate = 2;
  return s;
}

}  // namespace

TEST_CASE("a step's phases move the bytes the strategy implies", "[sim][training]") {
  auto m = h100s(8);  // 64 GPUs: tp 8 x pp 2 x dp 4
  const TrainingSpec s = small();
  const StepReport r = step(*m, s);
  const double act = 1.0 * s.seq * s.dModel * 2;
  const PhaseReport& tp = phase(r, "TP");
  CHECK(tp.groups == 8);
  CHECK(tp.groupSize == 8);
  CHECK(tp.calls == 4 * (s.blocks / s.pp) * s.accumulate);
  CHECK(tp.bytesPerCall == act);
  // Inside a host, NVLS (the tuner's pick for 1 MiB on 8 H100s): each GPU's
  // two NVLink links to the switch carry (1 + 1/n) of the buffer; nothing
  // leaves the host. As a ring, each hop's two links carry 2 (n-1)/n of it.
  const std::vector<SimLink>& links = m->fabric().links();
  double nvlink = 0, nic = 0;
  for (size_t l = 0; l < links.size(); ++l) {
    if (links[l].cls == LinkClass::kNvlink) nvlink += tp.result.linkBytes[l];
    if (links[l].cls == LinkClass::kNic) nic += tp.result.linkBytes[l];
  }
  CHECK(tp.result.algorithm == SimAlgo::kNvls);
  CHECK(nvlink == Approx(tp.groups * 8 * 2 * (1.0 + 1.0 / 8) * act));
  CHECK(nic == 0);
  // Pipeline: every (tp, dp) rank of a boundary sends 1/tp of the
  // activations each way, one rail each.
  const PhaseReport& pp = phase(r, "PP");
  CHECK(pp.groups == (s.pp - 1) * 4 * s.tp);
  CHECK(pp.bytesPerCall == act / s.tp);
  // Data parallel: 12 d^2 per block of this stage, sharded over TP.
  const PhaseReport& dp = phase(r, "DP");
  CHECK(dp.groups == s.tp * s.pp);
  CHECK(dp.groupSize == 4);
  CHECK(dp.bytesPerCall == Approx(12.0 * s.dModel * s.dModel * (s.blocks / s.pp) / s.tp * 2));
  CHECK(r.commUs() == Approx(tp.totalUs() + pp.totalUs() + dp.totalUs()));
}

TEST_CASE("placement: tensor parallelism across hosts and off-rail pipelines cost what they should", "[sim][training]") {
  auto m = h100s(8, 4.0);  // leaves of 4 hosts, spines oversubscribed 4:1
  TrainingSpec s = small();
  s.seq = 4096;  // 32 MiB activations: bandwidth, not latency
  s.dModel = 4096;
  const StepReport inHost = step(*m, s);
  s.tpAcrossHosts = true;
  const StepReport across = step(*m, s);
  // The same all-reduces over NICs instead of NVLink: several times slower.
  CHECK(phase(across, "TP").timePerCallUs > 3 * phase(inHost, "TP").timePerCallUs);

  // Pipelines: one host per stage, dp 1, so the boundaries cross leaves.
  auto pipeline = [](const ClusterModel& model, int shift) {
    TrainingSpec p = small();
    p.pp = 8;
    p.blocks = 8;
    p.ppRailShift = shift;
    return step(model, p);
  };
  const int spine = static_cast<int>(LinkClass::kSpine);
  auto direct = h100s(8, 4.0, /*pxn=*/false);
  const StepReport onRail = pipeline(*direct, 0), offRail = pipeline(*direct, 1);
  // On rail, only the boundary between the two leaves uses the spine; off
  // rail every boundary's traffic changes rail and so crosses it, slower.
  CHECK(offRail.bytesByClass[spine] > 3 * onRail.bytesByClass[spine]);
  CHECK(phase(offRail, "PP").timePerCallUs > phase(onRail, "PP").timePerCallUs);
  // PXN (NCCL's default on NVLink machines) first crosses NVLink to the GPU
  // on the receiver's rail: off rail costs no more spine than on rail.
  const StepReport pxnOffRail = pipeline(*m, 1);
  CHECK(pxnOffRail.bytesByClass[spine] == Approx(onRail.bytesByClass[spine]));
}

TEST_CASE("expert parallelism: all-to-all inside each EP group, expert gradients over the others", "[sim][training]") {
  auto m = h100s(8);
  TrainingSpec s = small();
  s.pp = 1;
  s.blocks = 2;
  s.experts = 8;
  s.ep = 4;  // dp 8 = 2 EP groups of 4
  const StepReport r = step(*m, s);
  const PhaseReport& ep = phase(r, "EP");
  CHECK(ep.groups == s.tp * 2);
  CHECK(ep.groupSize == 4);
  CHECK(ep.bytesPerCall == Approx(1.0 * (s.seq / s.tp) * s.dModel * 2 * s.topK * s.capacityFactor / s.ep));
  const PhaseReport& edp = phase(r, "EDP");
  CHECK(edp.groupSize == 2);
  CHECK(edp.groups == s.tp * s.ep);
}

TEST_CASE("a spec that does not fit the cluster is refused, naming the parameter", "[sim][training]") {
  auto m = h100s(2);
  TrainingSpec s = small();
  s.dp = 3;
  auto r = simulateStep(*m, s);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().toString(), Catch::Contains("dp 3"));
  s = small();
  s.dp = 0;
  s.ep = 3;
  r = simulateStep(*m, s);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().toString(), Catch::Contains("ep 3"));
  s = small();
  s.blocks = 3;
  r = simulateStep(*m, s);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().toString(), Catch::Contains("blocks 3"));
}
