// GPUDirect RDMA on the network transport, without a GPU or an RDMA NIC: the
// socket transport standing in for a NIC that registers dmabufs
// (PLAIT_NET_SOCKET_DMABUF=1, socket_dmabuf.h), and "GPU memory" that is a
// memfd seen at one address by the ranks and reached by the network only
// through the dmabuf (the fd) — as a NIC reaches GPU pages, never through
// the GPU's virtual address.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../scoped_env.h"
#include "transport/net/net_plugin.h"
#include "transport/net/net_transport.h"
#include "transport/net_test_util.h"

using namespace plait;
using test::ScopedEnv;

namespace {

// A memfd of `bytes` mapped twice: `view` is what the "GPU" (the test's
// code) addresses; the network gets the fd. `view` is null if that failed:
// no assertion here, the proxy threads allocate them (FakeGpuMemory), and
// Catch2's assertions belong to the test's own thread.
struct MemfdRange {
  int fd = -1;
  char* view = nullptr;
  size_t bytes = 0;
  explicit MemfdRange(size_t n) : bytes(n) {
    fd = ::memfd_create("plait-test-dmabuf", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(n)) != 0) return;
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) view = static_cast<char*>(m);
  }
  ~MemfdRange() {
    if (view != nullptr) ::munmap(view, bytes);
    if (fd >= 0) ::close(fd);
  }
};

// NetGpuMemory over memfds; counts what the proxy asks of it. Both ranks'
// threads share one, so it locks.
class FakeGpuMemory final : public NetGpuMemory {
 public:
  std::string description() const override { return "fake GPU"; }
  Result<Buffer> allocate(size_t bytes) override {
    auto range = std::make_unique<MemfdRange>(bytes);
    if (range->view == nullptr) return systemError("a memfd for the fake GPU memory");
    Buffer b{range->view, bytes, ::dup(range->fd), 0};
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.push_back(std::move(range));
    allocated.fetch_add(1);
    return b;
  }
  void release(const Buffer& b) override {
    ::close(b.fd);
    released.fetch_add(1);
  }
  Status flush() override {
    flushes.fetch_add(1);
    return Status::ok();
  }
  std::optional<bool> nearEnough(const PlaitNetProperties&) const override { return near; }

  std::optional<bool> near;
  std::atomic<int> allocated{0}, released{0}, flushes{0};

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<MemfdRange>> ranges_;  // alive as long as this object
};

}  // namespace

TEST_CASE("socket net: dmabuf registration only when standing in for a GPUDirect NIC", "[net]") {
  const PlaitNetV8& net = loopbackSocketNet();
  PlaitNetProperties props{};
  void *sc, *rc;
  connectPair(net, &sc, &rc);
  MemfdRange range(8192);
  REQUIRE(range.view != nullptr);
  void* mh = nullptr;
  {
    ScopedEnv off("PLAIT_NET_SOCKET_DMABUF", nullptr);
    REQUIRE(net.getProperties(0, &props) == 0);
    CHECK(props.ptrSupport == kNetPtrHost);
    CHECK(net.regMrDmaBuf(sc, range.view, 4096, kNetPtrCuda, 0, range.fd, &mh) == netresult::kInvalidUsage);
    CHECK_THAT(takeNetError(), Catch::Contains("PLAIT_NET_SOCKET_DMABUF=1"));
  }
  ScopedEnv on("PLAIT_NET_SOCKET_DMABUF", "1");
  REQUIRE(net.getProperties(0, &props) == 0);
  CHECK(props.ptrSupport == (kNetPtrHost | kNetPtrCuda | kNetPtrDmaBuf));
  CHECK(net.regMrDmaBuf(sc, range.view, 4096, kNetPtrCuda, 0, -1, &mh) == netresult::kInvalidArgument);
  CHECK(mh == nullptr);
  net.closeSend(sc);
  net.closeRecv(rc);
}

TEST_CASE("socket net: sends and receives on a dmabuf registration go through the dmabuf at its offset", "[net]") {
  const PlaitNetV8& net = loopbackSocketNet();
  ScopedEnv on("PLAIT_NET_SOCKET_DMABUF", "1");
  void *sc, *rc;
  connectPair(net, &sc, &rc);
  // The dmabuf holds 3 pages; the registered range is its pages 1 and 2.
  // The "device addresses" of the range are another buffer filled with 0xEE:
  // bytes read or written there instead of through the fd show up as such.
  MemfdRange dmabuf(3 * 4096);
  REQUIRE(dmabuf.view != nullptr);
  for (size_t i = 0; i < dmabuf.bytes; ++i) dmabuf.view[i] = static_cast<char>(i * 13 + 1);
  std::vector<char> device(2 * 4096, static_cast<char>(0xEE));
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(net.regMrDmaBuf(sc, device.data(), device.size(), kNetPtrCuda, 4096, dmabuf.fd, &smh) == 0);
  REQUIRE(net.regMrDmaBuf(rc, device.data(), device.size(), kNetPtrCuda, 4096, dmabuf.fd, &rmh) == 0);

  // Send 1000 bytes from device offset 100: the bytes at dmabuf 4096 + 100.
  std::vector<char> in(1000, 0);
  void* data = in.data();
  int cap = static_cast<int>(in.size()), tag = 0;
  void* hostHandle = nullptr;
  void *rreq = nullptr, *sreq = nullptr;
  REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &hostHandle, &rreq) == 0);
  REQUIRE(net.isend(sc, device.data() + 100, 1000, 0, smh, &sreq) == 0);
  REQUIRE(waitRequest(net, rreq, sreq) == 1000);
  CHECK(std::memcmp(in.data(), dmabuf.view + 4096 + 100, 1000) == 0);

  // Receive into device offset 200: lands at dmabuf 4096 + 200.
  std::vector<char> out(500);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(255 - i);
  data = device.data() + 200;
  cap = 500;
  REQUIRE(net.irecv(rc, 1, &data, &cap, &tag, &rmh, &rreq) == 0);
  REQUIRE(net.isend(sc, out.data(), 500, 0, nullptr, &sreq) == 0);
  REQUIRE(waitRequest(net, rreq, sreq) == 500);
  CHECK(std::memcmp(dmabuf.view + 4096 + 200, out.data(), 500) == 0);
  CHECK(std::count(device.begin(), device.end(), static_cast<char>(0xEE)) == static_cast<long>(device.size()));

  // Outside the registered range: refused, naming it.
  CHECK(net.isend(sc, device.data() + 8000, 500, 0, smh, &sreq) == netresult::kInvalidArgument);
  CHECK_THAT(takeNetError(), Catch::Contains("outside their dmabuf registration"));
  net.deregMr(sc, smh);
  net.deregMr(rc, rmh);
  net.closeSend(sc);
  net.closeRecv(rc);
}

// Two ranks connect with GPU memory offered: with PLAIT_NET_GDR=1 every
// connector's steps are in it (the control pages are not), steps cross
// through the dmabufs, every received step is flushed before the receiver
// sees it, and the buffers go back at destruction. PLAIT_NET_GDR=-1 uses
// them only when the topology places NIC and GPU close enough.
TEST_CASE("net transport: GPUDirect steps in GPU memory, flushed before they are posted", "[net]") {
  loopbackSocketNet();
  ScopedEnv dmabuf("PLAIT_NET_SOCKET_DMABUF", "1");
  const char* mode = GENERATE("1", "-1");
  const bool near = GENERATE(true, false);
  ScopedEnv gdr("PLAIT_NET_GDR", mode);
  const bool used = std::string(mode) == "1" || near;
  auto gpu = std::make_shared<FakeGpuMemory>();
  gpu->near = near;
  ThreadOob::Shared shared;
  std::atomic<uint32_t> abortFlags[2] = {0, 0};
  std::unique_ptr<NetTransport> t[2];
  std::thread threads[2];
  std::string errors[2];
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      ThreadOob oob(shared, r);
      NetTransportOptions o = twoRankOptions(r, &abortFlags[r]);
      o.gpu = gpu;
      auto res = NetTransport::connect(oob, o, Deadline::afterMs(10000));
      if (res.isOk()) t[r] = std::move(res).value();
      else errors[r] = res.status().toString();
    });
  for (auto& th : threads) th.join();
  REQUIRE(errors[0] == "");
  REQUIRE(errors[1] == "");
  INFO("PLAIT_NET_GDR=" << mode << ", near: " << near);
  CHECK(t[0]->gpuDirect() == used);
  CHECK((t[0]->description().find("/GDRDMA") != std::string::npos) == used);
  CHECK(gpu->allocated.load() == (used ? 8 : 0));  // per rank: ring send and receive, p2p send and receive
  CHECK((t[0]->ringSend(0)->detachedSteps() != nullptr) == used);
  CHECK((t[1]->ringRecv(0)->detachedSteps() != nullptr) == used);

  constexpr int kSteps = 12;  // more than the FIFO's 4 steps: slots are reused
  std::thread sender([&] {
    FifoSender* s = t[0]->ringSend(0);
    for (int i = 0; i < kSteps; ++i) {
      auto buf = s->acquire();
      if (!buf.isOk()) return;
      std::memset(buf.value(), 'A' + i, 4096);
      s->post(1000 + i);
    }
  });
  FifoReceiver* f = t[1]->ringRecv(0);
  for (int i = 0; i < kSteps; ++i) {
    size_t n = 0;
    auto buf = f->acquire(&n);
    REQUIRE(buf.isOk());
    REQUIRE(n == static_cast<size_t>(1000 + i));
    CHECK(buf.value()[0] == static_cast<char>('A' + i));
    CHECK(buf.value()[n - 1] == static_cast<char>('A' + i));
    f->release();
  }
  sender.join();
  CHECK(gpu->flushes.load() == (used ? kSteps : 0));
  t[0].reset();
  t[1].reset();
  CHECK(gpu->released.load() == gpu->allocated.load());
}
