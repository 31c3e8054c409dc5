// The simulator's parts against hand-worked answers: max-min fair shares,
// the event-driven flow simulation, fabric routes and bad inputs.
#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "sim/collective.h"
#include "sim/fabric.h"
#include "sim/flows.h"
#include "topology/xml.h"

using namespace plait;
using namespace plait::sim;

namespace {

std::string dataPath(const std::string& name) { return std::string(PLAIT_TOPO_TEST_DATA) + "/" + name; }

topo::Cluster loadCluster(const std::string& name, int hosts) {
  auto c = topo::loadCluster(dataPath(name), hosts);
  INFO(c.status().toString());
  REQUIRE(c.isOk());
  return std::move(c).value();
}

// 8 HGX H100 hosts, two per leaf, on `spec`: a model and its 1 GiB ring AllReduce.
std::pair<std::unique_ptr<ClusterModel>, CollectiveResult> ringAllReduceOn8H100(NetworkSpec spec) {
  spec.hostsPerLeaf = 2;
  auto model = ClusterModel::create(loadCluster("hgx_h100.xml", 8), spec);
  REQUIRE(model.isOk());
  SimOptions ring;
  ring.algorithms = 1u << static_cast<int>(SimAlgo::kRing);
  auto r = (*model)->simulate(CollType::kAllReduce, uint64_t(1) << 30, ring);
  REQUIRE(r.isOk());
  return {std::move(model).value(), *r};
}

Flow flowOver(std::initializer_list<int> links, double ceiling = 0) {
  Flow f;
  for (int l : links) f.uses.push_back({l, 1.0});
  f.ceilingGBs = ceiling;
  return f;
}

}  // namespace

TEST_CASE("max-min fair shares match hand-worked answers", "[sim][flows]") {
  SECTION("two flows on one link split it") {
    const auto r = maxMinRates({10.0}, {flowOver({0}), flowOver({0})});
    CHECK(r[0] == Approx(5.0));
    CHECK(r[1] == Approx(5.0));
  }
  SECTION("the textbook case: a flow held back by one link leaves the rest to the others") {
    // Link 0: 10 GB/s shared by f0 and f1; link 1: 4 GB/s shared by f1 and f2.
    // Link 1 fills first at 2 each; f0 then takes what f1 leaves on link 0.
    const auto r = maxMinRates({10.0, 4.0}, {flowOver({0}), flowOver({0, 1}), flowOver({1})});
    CHECK(r[0] == Approx(8.0));
    CHECK(r[1] == Approx(2.0));
    CHECK(r[2] == Approx(2.0));
  }
  SECTION("a flow crossing a link twice counts twice") {
    Flow twice;
    twice.uses = {{0, 1.0}, {0, 1.0}};
    mergeUses(&twice.uses);
    REQUIRE(twice.uses.size() == 1);
    CHECK(twice.uses[0].weight == 2.0);
    const auto r = maxMinRates({10.0}, {twice, flowOver({0})});
    // 2x + x = 10 when both rise together.
    CHECK(r[0] == Approx(10.0 / 3));
    CHECK(r[1] == Approx(10.0 / 3));
  }
  SECTION("a ceiling stops one flow and the others take the rest") {
    const auto r = maxMinRates({10.0}, {flowOver({0}, 3.0), flowOver({0})});
    CHECK(r[0] == Approx(3.0));
    CHECK(r[1] == Approx(7.0));
  }
  SECTION("a flow with no link and no ceiling is unbounded; a zero-capacity link stops its flows") {
    const auto r = maxMinRates({0.0, 5.0}, {Flow{}, flowOver({0}), flowOver({1})});
    CHECK(std::isinf(r[0]));
    CHECK(r[1] == 0.0);
    CHECK(r[2] == Approx(5.0));
  }
}

TEST_CASE("flows finish when their bytes are through, rates changing as flows come and go", "[sim][flows]") {
  // One link of 1 GB/s = 1000 bytes per microsecond.
  std::vector<TimedFlow> flows(3);
  flows[0] = {flowOver({0}), 1000, 0};  // shares the link: 500 B/us -> done at 2 us
  flows[1] = {flowOver({0}), 3000, 0};  // 1000 B by 2 us, then alone: 2000 B at 1000 B/us -> 4 us
  flows[2] = {flowOver({0}), 500, 10};  // starts after the others: alone, 0.5 us
  const auto t = simulateFlows({1.0}, flows);
  CHECK(t[0] == Approx(2.0));
  CHECK(t[1] == Approx(4.0));
  CHECK(t[2] == Approx(10.5));
}

TEST_CASE("routes between hosts go up the NIC, over the spine only between leaves", "[sim][fabric]") {
  const topo::Cluster cluster = loadCluster("dgx_a100.xml", 3);
  std::vector<topo::PathTable> paths{topo::PathTable(cluster.systems[0], topo::PathOptions{})};
  for (int perLeaf : {1, 2}) {
    NetworkSpec spec;
    spec.hostsPerLeaf = perLeaf;
    auto fabric = Fabric::build(cluster, paths, spec);
    REQUIRE(fabric.isOk());
    std::vector<int> route;
    const int switches = fabric->appendRoute({0, 0}, {1, 0}, 0, 0, &route);
    std::string names;
    for (int l : route) names += fabric->linkName(l) + "; ";
    INFO(names);
    CHECK(switches == (perLeaf == 1 ? 3 : 1));
    CHECK(names.find("host 0 NET0 up") != std::string::npos);
    CHECK(names.find("host 1 NET0 down") != std::string::npos);
    CHECK((names.find("spine") != std::string::npos) == (perLeaf == 1));
  }
  NetworkSpec single;
  single.kind = NetworkSpec::Kind::kSingleSwitch;
  auto fabric = Fabric::build(cluster, paths, single);
  REQUIRE(fabric.isOk());
  std::vector<int> route;
  CHECK(fabric->appendRoute({0, 3}, {2, 5}, 1, 2, &route) == 1);
  route.clear();
  CHECK(fabric->appendRoute({1, 3}, {1, 5}, 0, 0, &route) == 0);  // inside a host: NVLink through the NVSwitch
  for (int l : route) CHECK(fabric->links()[l].cls == LinkClass::kNvlink);
}

TEST_CASE("oversubscribed spines slow a collective that crosses them", "[sim][fabric]") {
  auto atRatio = [](double ratio) {
    NetworkSpec spec;
    spec.oversubscription = ratio;
    return ringAllReduceOn8H100(spec).second.busBw;
  };
  const double full = atRatio(1), quarter = atRatio(4);
  // A ring crosses each leaf's uplink once per channel: at 4:1 the uplink of
  // two hosts' rail carries one channel in 100 GB/s / 4 = 25 GB/s, below the
  // NIC's 46 GB/s.
  CHECK(quarter < 0.7 * full);
}

TEST_CASE("bad inputs are refused with a message naming them", "[sim][errors]") {
  auto xml = topo::parseXml(R"(<network kind="torus"/>)");
  REQUIRE(xml.isOk());
  auto spec = parseNetworkSpec(*xml);
  REQUIRE_FALSE(spec.isOk());
  CHECK_THAT(spec.status().toString(), Catch::Contains("torus"));
  xml = topo::parseXml(R"(<network oversubscription="0.5"/>)");
  REQUIRE(xml.isOk());
  spec = parseNetworkSpec(*xml);
  REQUIRE_FALSE(spec.isOk());
  CHECK_THAT(spec.status().toString(), Catch::Contains("oversubscription"));

  // Several hosts without NICs cannot be joined by a network.
  auto machine = topo::parseXml(R"(<system version="1">
  <cpu numaid="0" affinity="ff" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
    <pci busid="0000:21:00.0" class="0x030200" vendor="0x10de" device="0x0000" subsystem_vendor="0x10de"
         subsystem_device="0x0000" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="80" rank="0" gdr="1"/>
    </pci>
  </cpu>
</system>)");
  REQUIRE(machine.isOk());
  auto sys = topo::buildSystem(*machine);
  REQUIRE(sys.isOk());
  auto model = ClusterModel::create(topo::replicateSystem(*sys, 2), NetworkSpec{});
  REQUIRE_FALSE(model.isOk());
  INFO(model.status().toString());

  auto huge = ClusterModel::create(loadCluster("dgx_a100.xml", ClusterModel::kMaxGpus / 8 + 1), NetworkSpec{});
  REQUIRE_FALSE(huge.isOk());
  CHECK_THAT(huge.status().toString(), Catch::Contains("GPUs"));

  NetworkSpec manySpines;
  manySpines.hostsPerLeaf = 1;
  manySpines.spines = 1 << 16;
  auto spines = ClusterModel::create(loadCluster("dgx_a100.xml", 64), manySpines);
  REQUIRE_FALSE(spines.isOk());
  CHECK_THAT(spines.status().toString(), Catch::Contains("spines"));

  auto ok = ClusterModel::create(loadCluster("dgx_a100.xml", 1), NetworkSpec{});
  REQUIRE(ok.isOk());
  auto a2a = (*ok)->simulate(CollType::kAlltoAll, 1 << 20, SimOptions{});
  REQUIRE_FALSE(a2a.isOk());
  CHECK_THAT(a2a.status().toString(), Catch::Contains("AlltoAll"));
  SimOptions none;
  none.protocols = 0;
  CHECK_FALSE((*ok)->simulate(CollType::kAllReduce, 1 << 20, none).isOk());
}

TEST_CASE("the simulator's plan follows the library's tuner and protocol limits", "[sim][tuner]") {
  auto model = ClusterModel::create(loadCluster("dgx_a100.xml", 1), NetworkSpec{});
  REQUIRE(model.isOk());
  SimOptions plait;  // what Plait's CUDA executor runs: rings, Simple
  plait.algorithms = 1u << static_cast<int>(SimAlgo::kRing);
  plait.protocols = 1u << static_cast<int>(Protocol::kSimple);
  // One channel per 256 KiB (core/tuner.h devicePlan), at most the rings found.
  for (uint64_t bytes : {uint64_t(4096), uint64_t(1) << 20, uint64_t(1) << 30}) {
    auto r = (*model)->simulate(CollType::kAllReduce, bytes, plait);
    REQUIRE(r.isOk());
    const int expected = static_cast<int>(std::min<uint64_t>((bytes + (256 << 10) - 1) >> 18, 6));
    CHECK(r->channels == expected);
    CHECK(r->protocol == Protocol::kSimple);
    CHECK(r->algorithm == SimAlgo::kRing);
    // time = latency + bytes on each link / rate.
    CHECK(r->timeUs == Approx(r->latencyUs + 2.0 * 7 / 8 * bytes / r->channels / (r->channelGBs * 1e3)));
  }
  // LL is never picked above its limit.
  auto big = (*model)->simulate(CollType::kAllReduce, uint64_t(8) << 20, SimOptions{});
  REQUIRE(big.isOk());
  CHECK(big->protocol != Protocol::kLL);
  // AllGather moves half an AllReduce's bytes per link in half the steps.
  auto ag = (*model)->simulate(CollType::kAllGather, uint64_t(1) << 30, plait);
  auto ar = (*model)->simulate(CollType::kAllReduce, uint64_t(1) << 30, plait);
  REQUIRE(ag.isOk());
  REQUIRE(ar.isOk());
  CHECK(ag->timeUs < 0.55 * ar->timeUs);
  CHECK(ag->busBw == Approx(ar->busBw).epsilon(0.02));
}

TEST_CASE("all-to-all: PXN keeps each transfer on the receiver's rail; without it, rails meet at the spines",
          "[sim][transfers]") {
  auto run = [](bool pxn) {
    NetworkSpec spec;
    spec.hostsPerLeaf = 2;        // both hosts under one leaf per rail
    spec.oversubscription = 4;    // and thin spines
    spec.pxn = pxn;
    auto model = ClusterModel::create(loadCluster("hgx_h100.xml", 2), spec);
    REQUIRE(model.isOk());
    auto r = (*model)->simulateAlltoAll(uint64_t(1) << 30);
    INFO(r.status().toString());
    REQUIRE(r.isOk());
    double spine = 0;
    for (size_t l = 0; l < (*model)->fabric().links().size(); ++l)
      if ((*model)->fabric().links()[l].cls == LinkClass::kSpine) spine += r->linkBytes[l];
    return std::make_pair(*r, spine);
  };
  const auto [withPxn, spineWith] = run(true);
  const auto [without, spineWithout] = run(false);
  // Half of each GPU's buffer goes to the other host, spread over the 8
  // rails: each NIC carries S/2 at 46 GB/s (50 GB/s x 0.92).
  CHECK(withPxn.busBw == Approx(2 * 46.0 * 15 / 16).epsilon(0.05));
  CHECK(withPxn.plan == "pairs PXN");
  CHECK(spineWith == 0);
  // Without PXN a GPU sends to all 8 rails of the other host by its own NIC:
  // 7 of 8 transfers change rail at the spines, a quarter as wide as the leaves.
  CHECK(spineWithout > 0);
  CHECK(without.timeUs > 1.5 * withPxn.timeUs);
}

TEST_CASE("all-to-all is refused beyond the pair-by-pair limit", "[sim][transfers]") {
  auto model = ClusterModel::create(loadCluster("hgx_h100.xml", ClusterModel::kMaxAlltoAllRanks / 8 + 1), NetworkSpec{});
  REQUIRE(model.isOk());
  auto r = (*model)->simulateAlltoAll(1 << 20);
  REQUIRE_FALSE(r.isOk());
  CHECK_THAT(r.status().toString(), Catch::Contains("AlltoAll"));
}

TEST_CASE("ECMP by hash: one spine equals ideal ECMP; several let flows collide", "[sim][fabric]") {
  auto busBw = [](int spines) {
    NetworkSpec spec;
    spec.spines = spines;
    const auto [model, r] = ringAllReduceOn8H100(spec);
    if (spines > 0) {
      const int l = model->fabric().leafLink(0, 0, true, spines - 1);
      REQUIRE(l >= 0);
      CHECK_THAT(model->fabric().linkName(l), Catch::Contains("spine " + std::to_string(spines - 1)));
    }
    return r.busBw;
  };
  const double ideal = busBw(0);
  CHECK(busBw(1) == Approx(ideal));  // one spine of the leaves' whole uplink bandwidth is ideal ECMP
  // Two spines, each half as wide: a ring channel that a hash puts on a
  // spine shares it with whichever other channel lands there too.
  CHECK(busBw(2) < ideal);
  auto xml = topo::parseXml(R"(<network spines="16"/>)");
  REQUIRE(xml.isOk());
  auto spec = parseNetworkSpec(*xml);
  REQUIRE(spec.isOk());
  CHECK(spec->spines == 16);
}

TEST_CASE("NVLS runs on one NVSwitch host from Hopper on, and loads each GPU's switch links S(1 + 1/n)",
          "[sim][nvls]") {
  SimOptions nvls;
  nvls.algorithms = 1u << static_cast<int>(SimAlgo::kNvls);
  const uint64_t bytes = uint64_t(1) << 30;
  SECTION("8 x H100: every GPU's links to the NVSwitch, each way") {
    auto model = ClusterModel::create(loadCluster("hgx_h100.xml", 1), NetworkSpec{});
    REQUIRE(model.isOk());
    auto r = (*model)->simulate(CollType::kAllReduce, bytes, nvls);
    REQUIRE(r.isOk());
    CHECK(r->algorithm == SimAlgo::kNvls);
    CHECK(r->latencyUs == Approx(nvlsLatencyUs()));
    const Fabric& fabric = (*model)->fabric();
    int switchLinks = 0;
    for (size_t l = 0; l < fabric.links().size(); ++l) {
      const std::string name = fabric.linkName(static_cast<int>(l));
      const bool toSwitch = name.find("->NVS") != std::string::npos, fromSwitch = name.find("NVS->") != std::string::npos;
      if (!toSwitch && !fromSwitch) {
        CHECK(r->linkBytes[l] == 0.0);
        continue;
      }
      ++switchLinks;
      INFO(name);
      CHECK(r->linkBytes[l] == Approx(bytes * (1.0 + 1.0 / 8)));
      // Both ways at NVLS's efficiency of the link: busy at 0.85 of its capacity.
      CHECK(r->linkBusy[l] == Approx(nvlsEfficiency(90)));
    }
    CHECK(switchLinks == 16);
    CHECK(r->busBw == Approx(r->algBw * 2 * 7 / 8));
  }
  SECTION("72 GPUs of an NVL72 rack: NCCL's 32 heads, so S(1 + 1/32)") {
    CHECK(nvlsHeads(8) == 8);
    CHECK(nvlsHeads(72) == 32);
    auto model = ClusterModel::create(loadCluster("gb200_nvl72.xml", 1), NetworkSpec{});
    REQUIRE(model.isOk());
    auto r = (*model)->simulate(CollType::kAllReduce, bytes, nvls);
    REQUIRE(r.isOk());
    const Fabric& fabric = (*model)->fabric();
    int switchLinks = 0;
    for (size_t l = 0; l < fabric.links().size(); ++l) {
      if (fabric.linkName(static_cast<int>(l)).find("NVS") == std::string::npos || r->linkBytes[l] == 0.0) continue;
      ++switchLinks;
      CHECK(r->linkBytes[l] == Approx(bytes * (1.0 + 1.0 / 32)));
    }
    CHECK(switchLinks == 2 * 72);
  }
  SECTION("not before Hopper, not across hosts, not for other collectives") {
    auto a100 = ClusterModel::create(loadCluster("dgx_a100.xml", 1), NetworkSpec{});
    REQUIRE(a100.isOk());
    CHECK_FALSE((*a100)->simulate(CollType::kAllReduce, bytes, nvls).isOk());
    CHECK((*a100)->simulate(CollType::kAllReduce, bytes, SimOptions{})->algorithm != SimAlgo::kNvls);
    auto two = ClusterModel::create(loadCluster("hgx_h100.xml", 2), NetworkSpec{});
    REQUIRE(two.isOk());
    CHECK_FALSE((*two)->simulate(CollType::kAllReduce, bytes, nvls).isOk());
    auto one = ClusterModel::create(loadCluster("hgx_h100.xml", 1), NetworkSpec{});
    REQUIRE(one.isOk());
    CHECK_FALSE((*one)->simulate(CollType::kAllGather, bytes, nvls).isOk());
    CHECK((*one)->simulate(CollType::kAllGather, bytes, SimOptions{})->algorithm == SimAlgo::kRing);
  }
}
