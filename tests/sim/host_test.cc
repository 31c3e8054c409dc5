// plait-sim's host-rank model: the library's own plan and costs, cores
// shared by threads, DRAM past the cache, the network between hosts.
#include <catch2/catch.hpp>

#include "core/cost_model.h"
#include "sim/host.h"

using namespace plait;
using namespace plait::sim;

namespace {

CollectiveResult run(const HostRunSpec& s, uint64_t bytes, CollType coll = CollType::kAllReduce) {
  auto r = simulateHostRanks(s, coll, bytes);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return *r;
}

}  // namespace

TEST_CASE("host ranks: small messages take the one-shot plan, large ones the ring at the host costs", "[sim][host]") {
  HostRunSpec s;  // 2 ranks, 2 cores: one channel each, nothing shared
  CHECK(run(s, 8).plan == "oneshot");
  const uint64_t big = 4 << 20;
  const CollectiveResult r = run(s, big);
  CHECK(r.plan == "ring 1ch");
  // call + 2 hand-offs + the bus bytes at one core's fused-pass rate.
  CHECK(r.timeUs == Approx(kHostCosts.callUs + 2 * kHostCosts.hopUs + 1.0 * big / kHostCosts.ringBytesPerUs));
}

TEST_CASE("host ranks: more threads than cores share them and wait for wake-ups", "[sim][host]") {
  HostRunSpec two, four;
  four.ranksPerHost = 4;  // 4 threads on 2 cores
  const uint64_t big = 4 << 20;
  const CollectiveResult a = run(two, big), b = run(four, big);
  // Each core runs two of the ring's threads: half the rate; 6 steps of wake-ups.
  CHECK(b.channelGBs == Approx(a.channelGBs / 2));
  CHECK(b.latencyUs == Approx(kHostCosts.callUs + 6 * four.wakeUs));
}

TEST_CASE("host ranks: buffers past the cache go through the host's DRAM", "[sim][host]") {
  HostRunSpec s;
  s.memGBs = 5;
  s.cacheBytes = 32 << 20;
  const CollectiveResult cached = run(s, 4 << 20);  // 2 ranks x 2 x 4 MiB = 16 MiB: in cache
  const CollectiveResult dram = run(s, 64 << 20);
  CHECK(cached.plan == "ring 1ch");
  CHECK(dram.plan == "ring 1ch DRAM");
  // Two ranks' hops share 5 GB/s: 2.5 each, below a core's 12.
  CHECK(dram.channelGBs == Approx(2.5));
}

TEST_CASE("host ranks across hosts: the NIC bounds the ring, network steps cost their latency", "[sim][host]") {
  HostRunSpec s;
  s.hosts = 2;
  s.ranksPerHost = 1;
  s.nicGBs = 1.0;
  const CollectiveResult r = run(s, 64 << 20);
  // Two channels (2 cores, 1 rank per host) share the NIC.
  CHECK(r.channels == 2);
  CHECK(r.channels * r.channelGBs == Approx(1.0));
  CHECK(r.latencyUs == Approx(kHostCosts.callUs + 2 * s.netHopUs));
  s.nicGBs = 0;
  CHECK_FALSE(simulateHostRanks(s, CollType::kAllReduce, 1 << 20).isOk());
  s.nicGBs = 1;
  auto a2a = simulateHostRanks(s, CollType::kAlltoAll, 1 << 20);
  REQUIRE_FALSE(a2a.isOk());
  CHECK_THAT(a2a.status().toString(), Catch::Contains("AlltoAll"));
}
