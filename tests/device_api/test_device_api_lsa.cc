// nccl_device.h's inline device code on the emulator: ranks whose windows
// are mapped at NCCL's flat layout (each LSA rank's copy stride4G x 4 GiB
// after the previous one, here one reservation of address space with the
// pages in use made accessible), kernels of every rank running at once on
// their own streams. Checks the window pointers against the layout, an LSA
// AllReduce written like nccl-tests' against a host sum, and that the
// barriers' epochs carry over from one launch to the next. The library does
// not map such windows yet (ncclDevCommCreate refuses): this tests the
// header's half of the device API.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "lsa_kernels.h"

using namespace plait_device_api_test;

namespace {

constexpr size_t k4G = size_t(1) << 32;

// Per rank, at base + rank * 4 GiB: the send window, the receive window and
// the resource window, each `part` bytes.
class FlatSpace {
 public:
  FlatSpace(int nranks, size_t part) : nranks_(nranks), part_(part) {
    void* p = mmap(nullptr, k4G * nranks, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<char*>(p);
    for (int r = 0; r < nranks; ++r) REQUIRE(mprotect(base_ + r * k4G, 3 * part, PROT_READ | PROT_WRITE) == 0);
  }
  ~FlatSpace() { munmap(base_, k4G * nranks_); }
  char* window(int which) const { return base_ + which * part_; }  // rank 0's copy of window `which`
  char* at(int rank, int which) const { return base_ + rank * k4G + which * part_; }

 private:
  int nranks_;
  size_t part_;
  char* base_;
};

ncclWindow_vidmem windowOf(char* flat, int rank) {
  ncclWindow_vidmem w;
  std::memset(&w, 0, sizeof w);
  w.lsaFlatBase = flat;
  w.lsaRank = rank;
  w.worldRank = rank;
  w.stride4G = 1;
  return w;
}

}  // namespace

TEST_CASE("Window pointers follow the flat layout", "[device-api][emu]") {
  FlatSpace space(3, 1 << 16);
  const int rank = 1;
  ncclWindow_vidmem w = windowOf(space.window(1), rank);
  ncclDevComm dc;
  std::memset(&dc, 0, sizeof dc);
  dc.rank = rank;
  dc.nRanks = 3;
  dc.lsaRank = rank;
  dc.lsaSize = 3;
  dc.resourceWindow_inlined = windowOf(space.window(2), rank);
  void* out[5] = {};
  REQUIRE(launchPointers(&w, 24, 2, 0, dc, 3, out, nullptr) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(out[0] == space.at(1, 1) + 24);
  CHECK(out[1] == space.at(2, 1) + 24);
  CHECK(out[2] == space.at(0, 1) + 24);
  CHECK(out[3] == space.at(1, 2) + 3 * 128);  // resource handles count 128-byte units
  CHECK(out[4] == space.at(2, 2) + 3 * 128);
}

TEST_CASE("An LSA AllReduce across ranks' windows, barriers carried over launches", "[device-api][emu]") {
  const int nranks = GENERATE(2, 3, 4);
  constexpr int kBlocks = 3, kThreads = 32, kLaunches = 6;
  constexpr size_t kCount = 10007;
  INFO(nranks << " ranks");
  const size_t barrierBytes = (3 + static_cast<size_t>(nranks)) * kBlocks * sizeof(uint32_t);
  FlatSpace space(nranks, kCount * sizeof(int64_t));
  std::vector<ncclWindow_vidmem> send, recv;
  std::vector<ncclDevComm> comms(nranks);
  std::vector<cudaStream_t> streams(nranks);
  for (int r = 0; r < nranks; ++r) {
    send.push_back(windowOf(space.window(0), r));
    recv.push_back(windowOf(space.window(1), r));
    ncclDevComm& dc = comms[r];
    std::memset(&dc, 0, sizeof dc);
    dc.rank = r;
    dc.nRanks = nranks;
    dc.lsaRank = r;
    dc.lsaSize = nranks;
    dc.resourceWindow_inlined = windowOf(space.window(2), r);
    dc.lsaBarrier.bufHandle = 0;
    dc.lsaBarrier.nBarriers = kBlocks;
    std::memset(space.at(r, 2), 0, barrierBytes);  // as ncclDevCommCreate zeroes it
    REQUIRE(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess);
  }
  for (int launch = 0; launch < kLaunches; ++launch) {
    for (int r = 0; r < nranks; ++r) {
      std::memset(space.at(r, 0), 0, kCount * sizeof(int64_t));  // the kernel writes its send values itself
      std::memset(space.at(r, 1), 0xee, kCount * sizeof(int64_t));
    }
    for (int r = 0; r < nranks; ++r)
      REQUIRE(launchLsaAllReduce(&send[r], &recv[r], kCount, launch + 1, comms[r], kBlocks, kThreads, streams[r]) ==
              cudaSuccess);
    for (int r = 0; r < nranks; ++r) REQUIRE(cudaStreamSynchronize(streams[r]) == cudaSuccess);
    const int64_t rankSum = 1000003LL * nranks * (nranks + 1) / 2;
    for (int r = 0; r < nranks; ++r) {
      const auto* out = reinterpret_cast<const int64_t*>(space.at(r, 1));
      size_t wrong = 0;
      for (size_t i = 0; i < kCount; ++i)
        if (out[i] != rankSum + static_cast<int64_t>(nranks) * static_cast<int64_t>(i) * (launch + 1)) ++wrong;
      INFO("launch " << launch << ", rank " << r);
      CHECK(wrong == 0);
    }
  }
  // Two syncs per launch: each barrier's epoch (word n + index) is 2 x launches
  // on every rank, and each inbox holds what its peer last posted.
  for (int r = 0; r < nranks; ++r) {
    const auto* words = reinterpret_cast<const uint32_t*>(space.at(r, 2));
    for (int b = 0; b < kBlocks; ++b) {
      CHECK(words[kBlocks + b] == 2 * kLaunches);
      for (int peer = 0; peer < nranks; ++peer)
        CHECK(words[3 * kBlocks + b * nranks + peer] == (peer == r ? 0u : 2u * kLaunches));
    }
  }
  for (cudaStream_t s : streams) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}
