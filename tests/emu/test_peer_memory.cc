// A rank's device buffer opened by another process (src/device/peer_memory):
// a forked owner exports a range inside its cuMem allocation (ncclMemAlloc's
// kind, its fd passed by transport/fdpass) and one inside cudaMalloc'd memory
// (a CUDA IPC handle); the peer maps the first anywhere and again at an
// address it reserved (the device API's flat layout), the second by IPC,
// reads the owner's bytes through each, and its writes reach the owner.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/peer_memory.h"
#include "device/vmm.h"
#include "transport/fdpass/fd_passing.h"

namespace {

using namespace plait::device;

constexpr size_t kOffset = 8192;  // the range starts inside the allocation
constexpr size_t kCount = 5000;   // ints

bool writeAll(int fd, const void* p, size_t n) { return ::write(fd, p, n) == static_cast<ssize_t>(n); }
bool readAll(int fd, void* p, size_t n) { return ::read(fd, p, n) == static_cast<ssize_t>(n); }

std::vector<int> pattern(int salt) {
  std::vector<int> v(kCount);
  for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<int>(i) * 3 + salt;
  return v;
}

// The owner: two buffers, exported; waits for the peer, then checks that the
// peer's writes arrived. Exit code 0 when all is as expected.
[[noreturn]] void owner(const std::string& token, pid_t peerPid, int toPeer, int fromPeer) {
  if (cudaSetDevice(1) != cudaSuccess) _exit(10);
  void* vmmBuf = nullptr;
  std::string why;
  if (vmm::allocate(&vmmBuf, size_t(4) << 20, &why) != vmm::Outcome::kOk) _exit(11);
  void* ipcBuf = nullptr;
  if (cudaMalloc(&ipcBuf, kOffset + kCount * sizeof(int)) != cudaSuccess) _exit(12);
  const std::vector<int> a = pattern(1), b = pattern(2);
  char* vmmRange = static_cast<char*>(vmmBuf) + kOffset;
  char* ipcRange = static_cast<char*>(ipcBuf) + kOffset;
  if (cudaMemcpy(vmmRange, a.data(), kCount * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(ipcRange, b.data(), kCount * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess)
    _exit(13);
  int fd = -1, none = -1;
  auto ev = peer_memory::exportRange(vmmRange, kCount * sizeof(int), &fd);
  auto ei = peer_memory::exportRange(ipcRange, kCount * sizeof(int), &none);
  if (!ev.isOk() || !ei.isOk() || fd < 0 || none != -1) _exit(14);
  if (ev->kind != peer_memory::kVmm || ei->kind != peer_memory::kIpc || ev->offset != kOffset) _exit(15);
  auto box = plait::fdpass::FdMailbox::open(token, 1, {peerPid, ::getpid()});
  if (!box.isOk() || !(*box)->send(0, 1, fd, plait::Deadline::afterMs(10000)).isOk()) _exit(16);
  ::close(fd);
  if (!writeAll(toPeer, &*ev, sizeof *ev) || !writeAll(toPeer, &*ei, sizeof *ei)) _exit(17);
  char done = 0;
  if (!readAll(fromPeer, &done, 1) || done != 'd') _exit(18);
  std::vector<int> seen(kCount);
  if (cudaMemcpy(seen.data(), vmmRange, kCount * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) _exit(19);
  for (size_t i = 0; i < kCount; ++i)
    if (seen[i] != -a[i]) _exit(20);
  if (cudaMemcpy(seen.data(), ipcRange, kCount * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) _exit(21);
  for (size_t i = 0; i < kCount; ++i)
    if (seen[i] != -b[i]) _exit(22);
  if (vmm::release(vmmBuf, &why) != vmm::Outcome::kOk || cudaFree(ipcBuf) != cudaSuccess) _exit(23);
  _exit(0);
}

std::vector<int> readDevice(const void* p) {
  std::vector<int> v(kCount);
  REQUIRE(cudaMemcpy(v.data(), p, kCount * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

}  // namespace

TEST_CASE("A peer process maps a rank's cuMem and cudaMalloc ranges and reads and writes them", "[emu]") {
  std::random_device rd;
  const std::string token = "peermem" + std::to_string(::getpid()) + "x" + std::to_string(rd());
  int down[2], up[2];
  REQUIRE(::pipe(down) == 0);
  REQUIRE(::pipe(up) == 0);
  const pid_t self = ::getpid();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) owner(token, self, down[1], up[0]);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  auto box = plait::fdpass::FdMailbox::open(token, 0, {self, child});
  REQUIRE(box.isOk());
  peer_memory::Exported ev, ei;
  REQUIRE(readAll(down[0], &ev, sizeof ev));
  REQUIRE(readAll(down[0], &ei, sizeof ei));
  auto fd = (*box)->receive(1, 1, plait::Deadline::afterMs(10000));
  REQUIRE(fd.isOk());
  CHECK(ev.device == 1);
  CHECK(ev.allocationSize == size_t(4) << 20);

  auto anywhere = peer_memory::importRange(ev, *fd, nullptr);
  REQUIRE(anywhere.isOk());
  CHECK(anywhere->reserved);
  CHECK(readDevice(anywhere->range) == pattern(1));
  // At a chosen address: the second slot of a range reserved for two peers.
  CUdeviceptr flat = 0;
  REQUIRE(cuMemAddressReserve(&flat, 2 * ev.allocationSize, 0, 0, 0) == CUDA_SUCCESS);
  void* slot = reinterpret_cast<void*>(flat + ev.allocationSize);
  auto placed = peer_memory::importRange(ev, *fd, slot);
  REQUIRE(placed.isOk());
  CHECK(placed->mapping == slot);
  CHECK(placed->range == static_cast<char*>(slot) + kOffset);
  CHECK_FALSE(placed->reserved);
  CHECK(readDevice(placed->range) == pattern(1));
  ::close(*fd);

  auto ipc = peer_memory::importRange(ei, -1, nullptr);
  REQUIRE(ipc.isOk());
  CHECK(readDevice(ipc->range) == pattern(2));
  CHECK(peer_memory::importRange(ei, -1, slot).status().code() == plait::Code::kInvalidArgument);
  peer_memory::Exported bad = ev;
  bad.size = bad.allocationSize;  // past the end of the allocation
  CHECK(peer_memory::importRange(bad, 0, nullptr).status().code() == plait::Code::kInvalidArgument);

  // Writes through one mapping reach the owner (and the other mapping).
  std::vector<int> neg = pattern(1);
  for (int& x : neg) x = -x;
  REQUIRE(cudaMemcpy(placed->range, neg.data(), kCount * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(readDevice(anywhere->range) == neg);
  neg = pattern(2);
  for (int& x : neg) x = -x;
  REQUIRE(cudaMemcpy(ipc->range, neg.data(), kCount * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(peer_memory::closeImported(*anywhere).isOk());
  CHECK(peer_memory::closeImported(*placed).isOk());
  CHECK(peer_memory::closeImported(*ipc).isOk());
  CHECK(cuMemAddressFree(flat, 2 * ev.allocationSize) == CUDA_SUCCESS);
  REQUIRE(::write(up[1], "d", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (int f : {down[0], down[1], up[0], up[1]}) ::close(f);

  int none = 0;
  std::vector<int> host(16);
  CHECK(peer_memory::exportRange(host.data(), 64, &none).status().code() == plait::Code::kInvalidArgument);
  CHECK(none == -1);
}
