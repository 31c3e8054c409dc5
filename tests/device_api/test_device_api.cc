// The device API's host side (nccl_device.h, src/api/device_api.cc): the
// structures kernels read have NCCL's layout (against NVIDIA's header where
// the CUDA toolkit ships it), the teams a communicator reports, the resource
// requirements of barriers, and ncclDevCommCreate's refusal, which names
// what is missing.
#include <catch2/catch.hpp>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "nccl_device.h"

#include "device_layout_fields.h"

namespace {
PLAIT_DEVICE_LAYOUT_FUNCTION(plaitDeviceLayout)
bool lastErrorMentions(const char* word) { return std::strstr(ncclGetLastError(nullptr), word) != nullptr; }
}  // namespace

#ifdef PLAIT_HAVE_NVIDIA_DEVICE_HEADER
extern "C" int nvidiaDeviceLayout(size_t* out, const char** names, int max);

TEST_CASE("Every field kernels read sits where NVIDIA's nccl_device.h puts it", "[device-api][abi]") {
  constexpr int kMax = 128;
  size_t ours[kMax], theirs[kMax];
  const char* names[kMax];
  const int n = plaitDeviceLayout(ours, names, kMax);
  REQUIRE(n <= kMax);
  REQUIRE(nvidiaDeviceLayout(theirs, nullptr, kMax) == n);
  for (int i = 0; i < n; ++i) {
    INFO(names[i]);
    CHECK(ours[i] == theirs[i]);
  }
}
#endif

TEST_CASE("The layout matches NCCL 2.28's measured sizes", "[device-api][abi]") {
  CHECK(sizeof(ncclDevComm) == 200);
  CHECK(offsetof(ncclDevComm, resourceWindow_inlined) == 40);
  CHECK(offsetof(ncclDevComm, lsaMultimem) == 112);
  CHECK(offsetof(ncclDevComm, ginSignalShadows) == 192);
  CHECK(sizeof(ncclWindow_vidmem) == 72);
  CHECK(offsetof(ncclWindow_vidmem, ginWins) == 40);
  CHECK(sizeof(ncclDevCommRequirements) == 56);
  CHECK(offsetof(ncclDevCommRequirements, ginCounterCount) == 52);
}

TEST_CASE("Teams of a one-host communicator: LSA is everyone, the rail is this rank", "[device-api]") {
  constexpr int n = 3;
  std::vector<ncclComm_t> comms(n);
  REQUIRE(ncclCommInitAll(comms.data(), n, nullptr) == ncclSuccess);
  for (int r = 0; r < n; ++r) {
    const ncclTeam_t world = ncclTeamWorld(comms[r]);
    CHECK((world.nRanks == n && world.rank == r && world.stride == 1));
    const ncclTeam_t lsa = ncclTeamLsa(comms[r]);
    CHECK((lsa.nRanks == n && lsa.rank == r && lsa.stride == 1));
    const ncclTeam_t rail = ncclTeamRail(comms[r]);
    CHECK((rail.nRanks == 1 && rail.rank == 0 && rail.stride == n));
    CHECK(ncclTeamRankToWorld(comms[r], lsa, (r + 1) % n) == (r + 1) % n);
    CHECK(ncclTeamRankToLsa(comms[r], world, n - 1) == n - 1);
    CHECK(ncclTeamRankToWorld(comms[r], lsa, n) == -1);  // no such member
    // The inline device-side arithmetic agrees with the library's.
    ncclDevComm dc{};
    dc.rank = r;
    dc.nRanks = n;
    dc.lsaRank = lsa.rank;
    dc.lsaSize = lsa.nRanks;
    CHECK(ncclTeamRankToWorld(dc, lsa, 0) == ncclTeamRankToWorld(comms[r], lsa, 0));
    CHECK(ncclTeamRankIsMember(lsa, world, (r + 2) % n));
    CHECK(ncclTeamRankToTeam(rail, world, r) == 0);
  }
  for (ncclComm_t c : comms) REQUIRE(ncclCommDestroy(c) == ncclSuccess);
}

// A host-memory communicator (no CUDA device: this test's builds without
// the emulator) cannot; test_device_api_windows covers one that can.
TEST_CASE("ncclDevCommCreate is refused with ncclInvalidUsage naming what is missing", "[device-api]") {
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);
  reqs.lsaBarrierCount = 4;
  ncclDevComm dc;
  int device = -1;
  if (ncclCommCuDevice(comm, &device) != ncclSuccess || device < 0) {
    CHECK(ncclDevCommCreate(comm, &reqs, &dc) == ncclInvalidUsage);
    CHECK(lastErrorMentions("cannot use the device API: it has no CUDA device"));
  }
  reqs.lsaMultimem = true;
  reqs.ginSignalCount = 16;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc) == ncclInvalidUsage);
  CHECK(lastErrorMentions("lsaMultimem"));
  CHECK(lastErrorMentions("GIN"));
  CHECK(ncclDevCommCreate(comm, nullptr, &dc) == ncclInvalidArgument);
  CHECK(lastErrorMentions("reqs is NULL"));
  CHECK(ncclDevCommCreate(comm, &reqs, nullptr) == ncclInvalidArgument);
  CHECK(ncclDevCommCreate(nullptr, &reqs, &dc) == ncclInvalidArgument);
  std::memset(&dc, 0, sizeof dc);
  CHECK(ncclDevCommDestroy(comm, &dc) == ncclInvalidArgument);
  CHECK(lastErrorMentions("not created by ncclDevCommCreate"));
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
  // A destroyed communicator has no teams.
  const ncclTeam_t none = ncclTeamWorld(comm);
  CHECK((none.nRanks == 0 && none.rank == 0 && none.stride == 0));
  CHECK(ncclTeamRankToWorld(comm, ncclTeam_t{1, 0, 1}, 0) == -1);
}

TEST_CASE("Barrier and all-to-all requirements size their buffers", "[device-api]") {
  ncclLsaBarrierHandle_t lsa;
  ncclDevResourceRequirements_t req;
  REQUIRE(ncclLsaBarrierCreateRequirement(ncclTeam_t{4, 1, 1}, 8, &lsa, &req) == ncclSuccess);
  CHECK(lsa.nBarriers == 8);
  CHECK(req.bufferSize == (3 * 8 + 8 * 4) * sizeof(uint32_t));  // the layout lsa_barrier.h reads
  CHECK(req.outBufferHandle == &lsa.bufHandle);
  CHECK(req.next == nullptr);
  CHECK(ncclLsaBarrierCreateRequirement(ncclTeam_t{4, 1, 1}, -1, &lsa, &req) == ncclInvalidArgument);
  CHECK(ncclLsaBarrierCreateRequirement(ncclTeam_t{4, 1, 1}, 1, nullptr, &req) == ncclInvalidArgument);

  CHECK(ncclLLA2ACalcSlots(100, 12) == 200);  // 8 payload bytes per slot
  CHECK(ncclLLA2ACalcSlots(0, 8) == 0);
  CHECK(ncclLLA2ACalcSlots(INT_MAX, INT_MAX) == 0);  // no count fits an int: none (was signed overflow)
  ncclLLA2AHandle_t a2a;
  REQUIRE(ncclLLA2ACreateRequirement(2, 200, &a2a, &req) == ncclSuccess);
  CHECK(a2a.nSlots == 200);
  CHECK(req.bufferSize == 2 * (1 + 2 * 200) * 16);
  CHECK(req.bufferAlign == 16);

  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitAll(&comm, 1, nullptr) == ncclSuccess);
  ncclGinBarrierHandle_t gin;
  REQUIRE(ncclGinBarrierCreateRequirement(comm, ncclTeamRail(comm), 2, &gin, &req) == ncclSuccess);
  CHECK(req.ginSignalCount == 2);
  CHECK(req.outGinSignalStart == &gin.signal0);
  // Hostile values: a team that is not this communicator's maps no rank
  // (computed in 64 bits: was signed overflow that could land in range).
  CHECK(ncclTeamRankToWorld(comm, ncclTeam_t{INT_MAX, 0, INT_MAX}, INT_MAX - 1) == -1);
  CHECK(ncclTeamRankToLsa(comm, ncclTeam_t{INT_MAX, INT_MAX, 2}, 0) == -1);
  // A requirements list with a cycle is refused by name, not walked for
  // ever (review of 2026-11-30).
  ncclDevResourceRequirements_t loop;
  std::memset(static_cast<void*>(&loop), 0, sizeof loop);
  loop.bufferSize = 64;
  loop.next = &loop;
  ncclDevCommRequirements_t reqs;
  std::memset(static_cast<void*>(&reqs), 0, sizeof reqs);
  reqs.resourceRequirementsList = &loop;
  ncclDevComm_t dc;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(comm)).find("has a cycle") != std::string::npos);
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}
