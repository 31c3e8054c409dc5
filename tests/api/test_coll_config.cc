// NCCL 2.32's per-call configuration: the nccl*Config collectives against an
// independent reference, algorithm selection (honoured, refused when forced,
// ignored when not), the struct read no further than the caller's size, every
// bad field named; ncclWinGetUserPtr; and ncclConfig_t's checks (communicator
// creation), NCCL 2.32's fields read by the caller's size. Ranks are threads.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "harness.h"

using namespace plait_test;

namespace {

constexpr int kRanks = 3;
constexpr size_t kCount = 1000;

std::string lastError(ncclComm_t comm) { return ncclGetLastError(comm); }

// Every Config variant once with `config`; each output checked against
// values computed here from the inputs' formula (rank r, element i: r*1000+i).
std::string runAll(int r, ncclComm_t comm, const ncclCollConfig_t* config) {
  auto in = [](int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 997)); };
  std::vector<float> send(kCount * kRanks), recv(kCount * kRanks);
  for (size_t i = 0; i < send.size(); ++i) send[i] = in(r, i);
  auto fail = [&](const char* what) { return std::string(what) + ": " + lastError(comm); };

  if (ncclAllReduceConfig(send.data(), recv.data(), kCount, ncclFloat, ncclSum, comm, nullptr, config) != ncclSuccess)
    return fail("ncclAllReduceConfig");
  for (size_t i = 0; i < kCount; ++i)
    if (recv[i] != in(0, i) + in(1, i) + in(2, i)) return "AllReduce element " + std::to_string(i);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclBroadcastConfig(send.data(), recv.data(), kCount, ncclFloat, 1, comm, nullptr, config) != ncclSuccess)
    return fail("ncclBroadcastConfig");
  for (size_t i = 0; i < kCount; ++i)
    if (recv[i] != in(1, i)) return "Broadcast element " + std::to_string(i);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclReduceConfig(send.data(), recv.data(), kCount, ncclFloat, ncclMax, 2, comm, nullptr, config) != ncclSuccess)
    return fail("ncclReduceConfig");
  if (r == 2)
    for (size_t i = 0; i < kCount; ++i)
      if (recv[i] != in(2, i)) return "Reduce element " + std::to_string(i);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclAllGatherConfig(send.data(), recv.data(), kCount, ncclFloat, comm, nullptr, config) != ncclSuccess)
    return fail("ncclAllGatherConfig");
  for (int p = 0; p < kRanks; ++p)
    for (size_t i = 0; i < kCount; ++i)
      if (recv[p * kCount + i] != in(p, i)) return "AllGather block " + std::to_string(p);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclReduceScatterConfig(send.data(), recv.data(), kCount, ncclFloat, ncclSum, comm, nullptr, config) !=
      ncclSuccess)
    return fail("ncclReduceScatterConfig");
  for (size_t i = 0; i < kCount; ++i) {
    const size_t at = r * kCount + i;
    if (recv[i] != in(0, at) + in(1, at) + in(2, at)) return "ReduceScatter element " + std::to_string(i);
  }

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclAlltoAllConfig(send.data(), recv.data(), kCount, ncclFloat, comm, nullptr, config) != ncclSuccess)
    return fail("ncclAlltoAllConfig");
  for (int p = 0; p < kRanks; ++p)
    for (size_t i = 0; i < kCount; ++i)
      if (recv[p * kCount + i] != in(p, r * kCount + i)) return "AlltoAll block " + std::to_string(p);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclGatherConfig(send.data(), recv.data(), kCount, ncclFloat, 0, comm, nullptr, config) != ncclSuccess)
    return fail("ncclGatherConfig");
  if (r == 0)
    for (int p = 0; p < kRanks; ++p)
      for (size_t i = 0; i < kCount; ++i)
        if (recv[p * kCount + i] != in(p, i)) return "Gather block " + std::to_string(p);

  std::fill(recv.begin(), recv.end(), -1.f);
  if (ncclScatterConfig(send.data(), recv.data(), kCount, ncclFloat, 1, comm, nullptr, config) != ncclSuccess)
    return fail("ncclScatterConfig");
  for (size_t i = 0; i < kCount; ++i)
    if (recv[i] != in(1, r * kCount + i)) return "Scatter element " + std::to_string(i);
  return "";
}

// One AllReduce with `config`: its result code and last error; every rank
// must agree on both.
struct Outcome {
  ncclResult_t result = ncclSuccess;
  std::string error;
};
std::vector<Outcome> allReduceWith(const ncclCollConfig_t& config, size_t count = kCount,
                                   ncclResult_t (*call)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                                        cudaStream_t, const ncclCollConfig_t*) = nullptr) {
  std::vector<Outcome> out(kRanks);
  auto errors = runThreads(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<float> send(count * kRanks, 1.f), recv(count * kRanks, 0.f);
    out[r].result = call ? call(send.data(), recv.data(), count, ncclFloat, comm, nullptr, &config)
                         : ncclAllReduceConfig(send.data(), recv.data(), count, ncclFloat, ncclSum, comm, nullptr,
                                               &config);
    out[r].error = out[r].result == ncclSuccess ? "" : lastError(comm);
    if (out[r].result == ncclSuccess && !call && recv[count - 1] != static_cast<float>(kRanks))
      return "wrong sum " + std::to_string(recv[count - 1]);
    return "";
  });
  REQUIRE(errors.empty());
  return out;
}

}  // namespace

TEST_CASE("nccl*Config: every collective with no config and with the initializer", "[config]") {
  const ncclCollConfig_t defaults = NCCL_COLLCONFIG_INITIALIZER;
  ncclCollConfig_t ring = NCCL_COLLCONFIG_INITIALIZER;
  ring.algSelection = "ring";
  ring.maxCTAs = 1;
  ring.userProfilerTag = 0x1234;
  for (const ncclCollConfig_t* config : {static_cast<const ncclCollConfig_t*>(nullptr), &defaults,
                                         static_cast<const ncclCollConfig_t*>(&ring)}) {
    auto errors = runThreads(kRanks, [&](int r, ncclComm_t comm) { return runAll(r, comm, config); });
    INFO((config == nullptr ? "NULL" : config == &defaults ? "initializer" : "ring, 1 channel, tagged"));
    CHECK(errors == std::vector<std::string>{});
  }
}

TEST_CASE("nccl*Config: a forced selection the call cannot honour is ncclInvalidUsage; unforced, the tuner chooses",
          "[config]") {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  SECTION("NCCL's pat: Plait runs none") {
    c.algSelection = "pat";
    for (const Outcome& o : allReduceWith(c)) {
      CHECK(o.result == ncclInvalidUsage);
      CHECK_THAT(o.error, Catch::Contains("algSelection \"pat\" allows AllReduce no algorithm Plait runs"));
    }
    c.forceAlgSelection = 0;
    for (const Outcome& o : allReduceWith(c)) CHECK(o.result == ncclSuccess);
  }
  SECTION("tree: AllReduce runs halving-doubling (the sum is checked); AllGather at 3 ranks has none") {
    c.algSelection = "tree";
    for (const Outcome& o : allReduceWith(c)) CHECK(o.result == ncclSuccess);
    for (const Outcome& o : allReduceWith(c, kCount, ncclAllGatherConfig)) {
      CHECK(o.result == ncclInvalidUsage);
      CHECK_THAT(o.error, Catch::Contains("algSelection allows AllGather only tree"));
    }
  }
  SECTION("oneshot for AllGather: blocks beyond a line message (3 KiB) cannot have it") {
    c.algSelection = "oneshot";
    for (const Outcome& o : allReduceWith(c, kCount, ncclAllGatherConfig)) {
      CHECK(o.result == ncclInvalidUsage);
      CHECK_THAT(o.error, Catch::Contains("algSelection allows AllGather only oneshot") &&
                              Catch::Contains("forceAlgSelection=0"));
    }
    c.forceAlgSelection = 0;
    for (const Outcome& o : allReduceWith(c, kCount, ncclAllGatherConfig)) CHECK(o.result == ncclSuccess);
    c.forceAlgSelection = 1;
    for (const Outcome& o : allReduceWith(c, 700, ncclAllGatherConfig)) CHECK(o.result == ncclSuccess);
  }
  SECTION("per collective: a selection for other collectives leaves this one free") {
    c.algSelection = "allgather:^ring;broadcast:tree";
    for (const Outcome& o : allReduceWith(c)) CHECK(o.result == ncclSuccess);
    c.algSelection = "AllReduce:Ring , OneShot";
    for (const Outcome& o : allReduceWith(c)) CHECK(o.result == ncclSuccess);
  }
  SECTION("direct alone, on buffers that are not registered") {
    c.algSelection = "direct";
    for (const Outcome& o : allReduceWith(c)) {
      CHECK(o.result == ncclInvalidUsage);
      CHECK_THAT(o.error, Catch::Contains("only direct"));
    }
  }
}

TEST_CASE("nccl*Config: bad fields are ncclInvalidArgument naming the field", "[config]") {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  std::string want;
  SECTION("magic") {
    c.magic = 0x1234;
    want = "NCCL_COLLCONFIG_INITIALIZER (magic 0x1234)";
  }
  SECTION("an older version") {
    c.version = 22800;
    want = "not an ncclCollConfig_t of NCCL 2.32 or later";
  }
  SECTION("minCTAs above maxCTAs") {
    c.minCTAs = 4;
    c.maxCTAs = 2;
    want = "minCTAs 4 exceeds maxCTAs 2";
  }
  SECTION("maxCTAs below 1") {
    c.maxCTAs = 0;
    want = "maxCTAs 0 is below 1";
  }
  SECTION("an unknown algorithm") {
    c.algSelection = "ring,bogus";
    want = "unknown algorithm \"bogus\"";
  }
  SECTION("an unknown collective") {
    c.algSelection = "allsum:ring";
    want = "unknown collective \"allsum\"";
  }
  SECTION("a circular ext list") {
    ncclConfigExt_t a{}, b{};
    a.next = &b;
    b.next = &a;
    c.ext = &a;
    want = "a circular list?";
    for (const Outcome& o : allReduceWith(c)) {
      CHECK(o.result == ncclInvalidArgument);
      CHECK_THAT(o.error, Catch::Contains(want));
    }
    return;
  }
  SECTION("a launchCompletionEvent with host buffers") {
    c.launchCompletionEvent = reinterpret_cast<cudaEvent_t>(0x1000);
    want = "launchCompletionEvent is set but the buffers are host memory";
  }
  for (const Outcome& o : allReduceWith(c)) {
    CHECK(o.result == ncclInvalidArgument);
    CHECK_THAT(o.error, Catch::Contains(want));
  }
}

TEST_CASE("nccl*Config: fields past the caller's size are never read; vendor options are ignored", "[config]") {
  // A caller whose header ended before launchCompletionEvent: whatever lies
  // there (here a non-null pointer, an error if it were read) is not part of
  // its struct.
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.size = offsetof(ncclCollConfig_t, launchCompletionEvent);
  c.launchCompletionEvent = reinterpret_cast<cudaEvent_t>(0x1000);
  for (const Outcome& o : allReduceWith(c)) CHECK(o.result == ncclSuccess);
  ncclConfigExt_t vendor{};
  vendor.key.vendorId = 0x123456;
  vendor.val.i = 7;
  ncclCollConfig_t v = NCCL_COLLCONFIG_INITIALIZER;
  v.ext = &vendor;
  for (const Outcome& o : allReduceWith(v)) CHECK(o.result == ncclSuccess);
}

TEST_CASE("ncclWinGetUserPtr: the buffer a window was registered with", "[config][window]") {
  auto errors = runThreads(2, [](int, ncclComm_t comm) -> std::string {
    std::vector<char> heap(1 << 16);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, heap.data() + 64, 4096, &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return "register: " + lastError(comm);
    void* user = nullptr;
    if (ncclWinGetUserPtr(comm, win, &user) != ncclSuccess) return "get: " + lastError(comm);
    if (user != heap.data() + 64) return "wrong user pointer";
    if (ncclWinGetUserPtr(comm, win, nullptr) != ncclInvalidArgument) return "NULL outUserPtr accepted";
    if (ncclWinGetUserPtr(comm, nullptr, &user) != ncclInvalidArgument) return "NULL window accepted";
    if (ncclCommWindowDeregister(comm, win) != ncclSuccess) return "deregister: " + lastError(comm);
    if (ncclWinGetUserPtr(comm, win, &user) != ncclInvalidArgument || user != nullptr)
      return "a deregistered window still answered";
    if (lastError(comm).find("not a live registration") == std::string::npos) return "message: " + lastError(comm);
    return "";
  });
  CHECK(errors == std::vector<std::string>{});
}

// ncclConfig_t (communicator creation): every field NCCL checks is checked,
// naming it; the fields NCCL 2.29-2.32 appended are read only when the
// caller's size covers them.
namespace {

ncclResult_t initSolo(ncclConfig_t* config, ncclComm_t* comm) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  return ncclCommInitRankConfig(comm, 1, id, 0, config);
}

void checkSoloWorks(ncclComm_t comm) {
  float x = 4.0f;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(x == 4.0f);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

}  // namespace

TEST_CASE("ncclConfig_t: a value NCCL refuses is ncclInvalidArgument naming the field", "[config]") {
  struct Bad {
    int ncclConfig_t::*field;
    int value;
    const char* says;
  };
  const Bad bad[] = {
      {&ncclConfig_t::blocking, 2, "config->blocking is 2; must be 0 or 1"},
      {&ncclConfig_t::cgaClusterSize, -1, "config->cgaClusterSize is -1"},
      {&ncclConfig_t::minCTAs, 0, "config->minCTAs is 0; must be ≥ 1"},
      {&ncclConfig_t::maxCTAs, -3, "config->maxCTAs is -3"},
      {&ncclConfig_t::splitShare, 5, "config->splitShare is 5"},
      {&ncclConfig_t::collnetEnable, 2, "config->collnetEnable is 2"},
      {&ncclConfig_t::CTAPolicy, 4, "config->CTAPolicy is 4; must be a combination of NCCL_CTA_POLICY_*"},
      {&ncclConfig_t::shrinkShare, -1, "config->shrinkShare is -1"},
      {&ncclConfig_t::nvlsCTAs, 0, "config->nvlsCTAs is 0"},
      {&ncclConfig_t::nChannelsPerNetPeer, 65, "config->nChannelsPerNetPeer is 65; must be 1..64"},
      {&ncclConfig_t::nvlinkCentricSched, 3, "config->nvlinkCentricSched is 3"},
      {&ncclConfig_t::graphUsageMode, 3, "config->graphUsageMode is 3; must be 0, 1 or 2"},
      {&ncclConfig_t::numRmaCtx, -2, "config->numRmaCtx is -2"},
      {&ncclConfig_t::maxP2pPeers, 0, "config->maxP2pPeers is 0"},
      {&ncclConfig_t::graphStreamOrdering, 2, "config->graphStreamOrdering is 2"},
      {&ncclConfig_t::launchOrderImplicit, -1, "config->launchOrderImplicit is -1"},
      {&ncclConfig_t::numRmaSig, -1, "config->numRmaSig is -1"},
      {&ncclConfig_t::rmaEagerInit, 7, "config->rmaEagerInit is 7"},
      {&ncclConfig_t::hostCftMode, 0, "config->hostCftMode is 0"},
      {&ncclConfig_t::nvlsHostMode, -4, "config->nvlsHostMode is -4"},
  };
  for (const Bad& b : bad) {
    INFO(b.says);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.*b.field = b.value;
    ncclComm_t comm = nullptr;
    CHECK(initSolo(&config, &comm) == ncclInvalidArgument);
    CHECK(comm == nullptr);
    CHECK_THAT(std::string(ncclGetLastError(nullptr)), Catch::Contains(b.says));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 4;
  config.maxCTAs = 2;
  ncclComm_t comm = nullptr;
  CHECK(initSolo(&config, &comm) == ncclInvalidArgument);
  CHECK_THAT(std::string(ncclGetLastError(nullptr)), Catch::Contains("config->minCTAs 4 exceeds config->maxCTAs 2"));
  config = NCCL_CONFIG_INITIALIZER;
  config.size = 8;
  CHECK(initSolo(&config, &comm) == ncclInvalidArgument);
  CHECK_THAT(std::string(ncclGetLastError(nullptr)), Catch::Contains("config->size 8 is too small"));
}

TEST_CASE("ncclConfig_t: NCCL 2.32's fields are accepted, and not read past an older caller's size", "[config]") {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CHECK(config.size == sizeof(ncclConfig_t));
  CHECK(config.nvlsHostMode == NCCL_CONFIG_UNDEF_INT);
  config.graphUsageMode = 1;
  config.numRmaCtx = 2;
  config.maxP2pPeers = 8;
  config.graphStreamOrdering = 0;
  config.launchOrderImplicit = 1;
  config.numRmaSig = 4;
  config.rmaEagerInit = 1;
  config.hostCftMode = ncclHostCftFallback;
  config.nvlsHostMode = ncclNvlsHostModeDisableTransport | ncclNvlsHostModeDisableSymmetricMultimem;
  config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  ncclComm_t comm = nullptr;
  REQUIRE(initSolo(&config, &comm) == ncclSuccess);
  checkSoloWorks(comm);

  // A program built against NCCL 2.28's nccl.h: its structure ends after
  // nvlinkCentricSched; what lies beyond (here: values NCCL would refuse)
  // is not its configuration.
  config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, nvlinkCentricSched) + sizeof(int);
  config.graphUsageMode = -7;
  config.hostCftMode = 99;
  comm = nullptr;
  REQUIRE(initSolo(&config, &comm) == ncclSuccess);
  checkSoloWorks(comm);
}

// Older headers' structures end before the pointer fields: NCCL 2.14's at
// netName's end, 2.17's before commName. What lies beyond the caller's size
// is not its configuration, pointers included (read as a string, a stray
// value there crashed ncclCommInitRankConfig; review of 2026-11-30).
TEST_CASE("ncclConfig_t's pointer fields are read only within the caller's size", "[config]") {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, commName);
  config.commName = reinterpret_cast<const char*>(uintptr_t{1});  // not the caller's: never followed
  ncclComm_t comm = nullptr;
  REQUIRE(initSolo(&config, &comm) == ncclSuccess);
  checkSoloWorks(comm);

  config = NCCL_CONFIG_INITIALIZER;
  config.size = offsetof(ncclConfig_t, netName);
  config.netName = reinterpret_cast<const char*>(uintptr_t{1});
  config.commName = reinterpret_cast<const char*>(uintptr_t{1});
  comm = nullptr;
  REQUIRE(initSolo(&config, &comm) == ncclSuccess);
  checkSoloWorks(comm);
}
