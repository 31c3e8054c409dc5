// plait-sim against published nccl-tests results (AllReduce, float, sum).
// Goal (issue 19): large messages within 10% of each figure, latency within
// 2x. Calibration: the Simple protocol's NVLink and PCIe efficiencies
// (core/cost_model.cc) were set from the first two rows below; the others
// are predictions. Figures the model misses are documented in README.md's
// plait-sim section, not tested here.
//
// The machines are described (tests/topology/data/make_machines.py) from the
// public descriptions of the systems; H200 shares H100's NVLink 4 and NICs,
// so the 248-node H200 figure runs on hgx_h100.xml.
#include <catch2/catch.hpp>

#include "sim/collective.h"

using namespace plait;
using namespace plait::sim;

namespace {

std::unique_ptr<ClusterModel> model(const std::string& machine, int hosts) {
  auto c = topo::loadCluster(std::string(PLAIT_TOPO_TEST_DATA) + "/" + machine, hosts);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  auto m = ClusterModel::create(std::move(c).value(), NetworkSpec{});
  INFO(m.status().toString());
  REQUIRE(m.isOk());
  return std::move(m).value();
}

CollectiveResult allReduce(const ClusterModel& m, uint64_t bytes, const SimOptions& options = {}) {
  auto r = m.simulate(CollType::kAllReduce, bytes, options);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return *r;
}

SimOptions only(SimAlgo a) {
  SimOptions o;
  o.algorithms = static_cast<uint8_t>(1u << static_cast<int>(a));
  return o;
}

void checkBusBw(const ClusterModel& m, uint64_t bytes, double published, const SimOptions& options = {}) {
  const CollectiveResult r = allReduce(m, bytes, options);
  INFO(bytes << " B: predicted " << r.busBw << " GB/s (" << simAlgoName(r.algorithm) << " "
             << protocolName(r.protocol) << "), published " << published);
  CHECK(r.busBw == Approx(published).epsilon(0.10));
}

void checkLatency(const ClusterModel& m, uint64_t bytes, double publishedUs) {
  const CollectiveResult r = allReduce(m, bytes);
  INFO(bytes << " B: predicted " << r.timeUs << " us, published " << publishedUs);
  CHECK(r.timeUs >= publishedUs / 2);
  CHECK(r.timeUs <= publishedUs * 2);
}

constexpr uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;

}  // namespace

// microsoft/mscclpp docs/performance-ndmv4.md: 8 x A100 NVSwitch, NCCL 2.17.
TEST_CASE("8 x A100 on NVSwitch", "[sim][published]") {
  auto m = model("dgx_a100.xml", 1);
  checkBusBw(*m, GiB, 231.5);
  checkLatency(*m, KiB, 16.96);
}

// The same document: 2 x 8 A100 with 8 HDR InfiniBand NICs per host.
TEST_CASE("2 x 8 A100 over 8 HDR NICs", "[sim][published]") {
  auto m = model("dgx_a100.xml", 2);
  checkBusBw(*m, GiB, 183.8);
  checkBusBw(*m, 4 * GiB, 188.2);
  checkLatency(*m, KiB, 35.85);
}

// NVIDIA/nccl-tests issues #212 / #283: 2 nodes x 1 A100 (one HDR NIC each),
// 1 KiB latency. (The 1 GiB bandwidth there, 18.65 GB/s, is a documented miss:
// the model gives 23.0 and NCCL's own tuner 24, as healthy HDR links measure;
// README, "Cluster simulator".)
TEST_CASE("2 x 1 A100 latency", "[sim][published]") {
  auto m = model("a100_single.xml", 2);
  checkLatency(*m, KiB, 21.27);
}

// NVIDIA/nccl-tests issue #290 (REFERENCE.md): 8 x H100, ring about 370 GB/s
// (NCCL_ALGO=RING); by default NVLS, peak busbw about 480 GB/s (nccl-tests
// issue #212, NVIDIA's answer there), which the model picks from a few MiB.
TEST_CASE("8 x H100 on NVSwitch", "[sim][published]") {
  auto m = model("hgx_h100.xml", 1);
  checkBusBw(*m, 8 * GiB, 370, only(SimAlgo::kRing));
  checkBusBw(*m, 8 * GiB, 480);
  CHECK(allReduce(*m, 8 * GiB).algorithm == SimAlgo::kNvls);
  // NVLS's 25 us latency loses to the ring and the tree on small messages.
  CHECK(allReduce(*m, KiB).algorithm != SimAlgo::kNvls);
}

// NVIDIA/nccl issue #1455: NCCL_ALGO=NVLS on 2 to 8 of the 8 H100s (2-4 GiB):
// about 365-370 GB/s on 2 to 4 GPUs (as the ring), then 420, 440, 460 and
// 480 on 5 to 8. The model's NVLS moves S (1 + 1/n) over each GPU's links
// (core/cost_model.h), which is what makes the busbw rise with n; below 4
// GPUs its own pick is the ring.
TEST_CASE("H100 NVLS busbw by GPU count", "[sim][published]") {
  auto m = model("hgx_h100.xml", 1);
  const double published[] = {0, 0, 367, 367, 367, 420, 440, 460, 480};
  for (int n = 2; n <= 8; ++n) {
    std::vector<GpuRef> gpus;
    for (int g = 0; g < n; ++g) gpus.push_back({0, g});
    auto comm = m->communicator(gpus);
    REQUIRE(comm.isOk());
    auto r = m->simulateConcurrent({*comm}, CollType::kAllReduce, 4 * GiB, SimOptions{});
    REQUIRE(r.isOk());
    INFO(n << " GPUs: predicted " << r->busBw << " GB/s (" << simAlgoName(r->algorithm) << "), published "
           << published[n]);
    CHECK(r->busBw == Approx(published[n]).epsilon(0.10));
    CHECK((r->algorithm == SimAlgo::kNvls) == (n >= 4));
  }
}

// NVIDIA/nccl issue #2140 (NCCL 2.30.4): 8 x B300, busbw 695 GB/s with NVLS
// off and 845 with it on. B300 has B200's NVLink 5 (18 links); hgx_b200.xml
// is the 8-GPU NVSwitch box with it.
TEST_CASE("8 x B300 on NVSwitch", "[sim][published]") {
  auto m = model("hgx_b200.xml", 1);
  checkBusBw(*m, 8 * GiB, 695, only(SimAlgo::kRing));
  checkBusBw(*m, 8 * GiB, 845);
}

// NVIDIA/nccl-tests issue #319 (REFERENCE.md): 2 x 8 H100 over 8 x 400 Gb/s, ring about 396 GB/s.
TEST_CASE("2 x 8 H100 over 8 x 400 Gb/s", "[sim][published]") {
  auto m = model("hgx_h100.xml", 2);
  checkBusBw(*m, 8 * GiB, 396);
}

// coreweave/nccl-tests PR #43: 248 x 8 H200 (1,984 GPUs), 512 MiB about 350 GB/s.
TEST_CASE("248 x 8 H200 over a rail-optimised fat tree", "[sim][published]") {
  auto m = model("hgx_h100.xml", 248);
  checkBusBw(*m, 512 * MiB, 350);
  // At this scale a ring's 3,966 steps cost milliseconds: the tree is the pick.
  CHECK(allReduce(*m, 512 * MiB).algorithm == SimAlgo::kTree);
}
