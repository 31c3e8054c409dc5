// The InfiniBand verbs module without a device: what it decides (ib_logic.h:
// NCCL_IB_HCA, GID choice, QP attributes, the registration cache, the wire
// layout, options), and that the module loads, reports no device here and
// leaves the choice to sockets. Nothing here proves the verbs path works on
// hardware (it has not run on any).
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "transport/net/ib_logic.h"
#include "transport/net/net_plugin.h"

using namespace plait;
using namespace plait::ib;

TEST_CASE("ib: NCCL_IB_HCA selects devices and ports as NCCL does", "[net][ib]") {
  HcaSpec all = HcaSpec::parse("");
  CHECK(all.matches("mlx5_0", 1));

  HcaSpec list = HcaSpec::parse("mlx5_0:1,mlx5_1");
  REQUIRE(list.items.size() == 2);
  CHECK(list.items[0].port == 1);
  CHECK(list.items[1].port == -1);
  CHECK(list.matches("mlx5_0", 1));
  CHECK_FALSE(list.matches("mlx5_0", 2));
  CHECK(list.matches("mlx5_1", 2));
  CHECK(list.matches("mlx5_10", 1));  // prefixes, as NCCL: "mlx5_1" also names mlx5_10
  CHECK_FALSE(list.matches("mlx4_0", 1));

  HcaSpec exact = HcaSpec::parse("=mlx5_1");
  CHECK(exact.exact);
  CHECK(exact.matches("mlx5_1", 1));
  CHECK_FALSE(exact.matches("mlx5_10", 1));

  HcaSpec except = HcaSpec::parse("^mlx5_2");
  CHECK(except.exclude);
  CHECK(except.matches("mlx5_0", 1));
  CHECK_FALSE(except.matches("mlx5_2", 1));
  CHECK_FALSE(except.matches("mlx5_20", 1));

  HcaSpec exceptExact = HcaSpec::parse("^=mlx5_0:2");
  CHECK(exceptExact.exclude);
  CHECK(exceptExact.exact);
  CHECK(exceptExact.matches("mlx5_0", 1));
  CHECK_FALSE(exceptExact.matches("mlx5_0", 2));
  CHECK(exceptExact.matches("mlx5_01", 2));
  CHECK(HcaSpec::parse(",,mlx5_0,").items.size() == 1);
}

namespace {
GidEntry gid(std::initializer_list<uint8_t> bytes, int version) {
  GidEntry g;
  int i = 0;
  for (uint8_t b : bytes) g.raw[i++] = b;
  g.roceVersion = version;
  return g;
}
GidEntry v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, int version) {
  return gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d}, version);
}
}  // namespace

TEST_CASE("ib: RoCE GID selection over fake GID tables", "[net][ib]") {
  const std::vector<GidEntry> table = {
      gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 1),  // 0 link-local, v1
      gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 2),  // 1 link-local, v2
      v4(10, 0, 0, 1, 1),                                               // 2 IPv4, v1
      v4(10, 0, 0, 1, 2),                                               // 3 IPv4, v2
      gid({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 1),      // 4 IPv6 ULA, v1
      gid({0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 2),      // 5 IPv6 ULA, v2
      GidEntry{},                                                       // 6 empty
  };
  GidPrefs p;  // defaults: auto, RoCE v2, AF_INET
  CHECK(selectGid(table, p) == 3);
  p.roceVersion = 1;
  CHECK(selectGid(table, p) == 2);
  p.family = AF_INET6;
  CHECK(selectGid(table, p) == 4);
  p.roceVersion = 2;
  CHECK(selectGid(table, p) == 5);
  p.index = 1;  // NCCL_IB_GID_INDEX forces it, even a link-local one
  CHECK(selectGid(table, p) == 1);
  p.index = 99;  // out of the table: automatic
  CHECK(selectGid(table, p) == 5);

  // Only v1 entries of the family: falls back to the family, any version.
  const std::vector<GidEntry> onlyV1 = {GidEntry{}, v4(192, 168, 1, 2, 1)};
  CHECK(selectGid(onlyV1, GidPrefs{}) == 1);
  // Nothing of the family: index 0, as NCCL.
  const std::vector<GidEntry> onlyLinkLocal = {table[1]};
  CHECK(selectGid(onlyLinkLocal, GidPrefs{}) == 0);
  CHECK(selectGid({}, GidPrefs{}) == -1);
  CHECK(gidIsV4Mapped(table[3].raw));
  CHECK(gidIsLinkLocal(table[0].raw));
  CHECK(gidIsZero(table[6].raw));
}

TEST_CASE("ib: queue-pair state machine attributes", "[net][ib]") {
  QpOptions o;
  o.timeout = 22;
  o.retryCnt = 5;
  o.sl = 3;
  o.tc = 106;
  o.pkeyIndex = 1;
  QpAttr init = qpInitAttr(2, o);
  CHECK(init.attr.qp_state == IBV_QPS_INIT);
  CHECK(init.attr.port_num == 2);
  CHECK(init.attr.pkey_index == 1);
  CHECK((init.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) != 0);
  CHECK(init.mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));

  PeerQp remote;
  remote.qpn = 0x1234;
  remote.psn = 0xabcde;
  remote.lid = 7;
  remote.mtu = IBV_MTU_4096;
  remote.gid[0] = 0xfd;
  remote.roce = true;
  QpAttr rtr = qpRtrAttr(remote, 1, 3, IBV_MTU_2048, o);
  CHECK(rtr.attr.qp_state == IBV_QPS_RTR);
  CHECK(rtr.attr.path_mtu == IBV_MTU_2048);  // the smaller of both ends
  CHECK(rtr.attr.dest_qp_num == 0x1234);
  CHECK(rtr.attr.rq_psn == 0xabcde);
  CHECK(rtr.attr.ah_attr.is_global == 1);
  CHECK(rtr.attr.ah_attr.grh.sgid_index == 3);
  CHECK(rtr.attr.ah_attr.grh.dgid.raw[0] == 0xfd);
  CHECK(rtr.attr.ah_attr.grh.traffic_class == 106);
  CHECK(rtr.attr.ah_attr.sl == 3);
  CHECK((rtr.mask & IBV_QP_AV) != 0);
  CHECK((rtr.mask & IBV_QP_DEST_QPN) != 0);
  remote.roce = false;  // InfiniBand link layer: by LID
  rtr = qpRtrAttr(remote, 1, 0, IBV_MTU_4096, o);
  CHECK(rtr.attr.ah_attr.is_global == 0);
  CHECK(rtr.attr.ah_attr.dlid == 7);
  CHECK(rtr.attr.path_mtu == IBV_MTU_4096);

  QpAttr rts = qpRtsAttr(0x42, o);
  CHECK(rts.attr.qp_state == IBV_QPS_RTS);
  CHECK(rts.attr.timeout == 22);
  CHECK(rts.attr.retry_cnt == 5);
  CHECK(rts.attr.rnr_retry == 7);
  CHECK(rts.attr.sq_psn == 0x42);
  CHECK((rts.mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_SQ_PSN)) ==
        (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_SQ_PSN));
}

TEST_CASE("ib: options from NCCL_IB_* and PLAIT_IB_*", "[net][ib]") {
  std::map<std::string, std::string> env = {
      {"NCCL_IB_HCA", "^mlx5_2"},      {"NCCL_IB_TIMEOUT", "23"},         {"PLAIT_IB_TIMEOUT", "18"},
      {"NCCL_IB_RETRY_CNT", "9"},      {"NCCL_IB_GID_INDEX", "3"},        {"NCCL_IB_ROCE_VERSION_NUM", "1"},
      {"NCCL_IB_ADDR_FAMILY", "AF_INET6"}, {"NCCL_IB_QPS_PER_CONNECTION", "40"}, {"NCCL_IB_TC", "106"}};
  auto get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  IbOptions o = readOptions(get);
  CHECK(o.hca.exclude);
  CHECK(o.qp.timeout == 18);   // PLAIT_ wins over NCCL_
  CHECK(o.qp.retryCnt == 7);   // clamped to the 3-bit field
  CHECK(o.gid.index == 3);
  CHECK(o.gid.roceVersion == 1);
  CHECK(o.gid.family == AF_INET6);
  CHECK(o.qpsPerConnection == kMaxQps);
  CHECK(o.qp.tc == 106);
  IbOptions d = readOptions([](const char*) -> const char* { return nullptr; });
  CHECK(d.qp.timeout == 20);
  CHECK(d.qp.retryCnt == 7);
  CHECK(d.gid.index == -1);
  CHECK(d.gid.roceVersion == 2);
  CHECK(d.gid.family == AF_INET);
  CHECK(d.qpsPerConnection == 1);
  CHECK(d.hca.items.empty());
}

TEST_CASE("ib: registration cache: containment, overlaps, reference counts, eviction", "[net][ib]") {
  std::map<void*, std::pair<uintptr_t, size_t>> live;
  int registrations = 0, next = 1;
  {
    RegCache cache(
        4096, 1,
        [&](uintptr_t start, size_t bytes) -> void* {
          ++registrations;
          void* mr = reinterpret_cast<void*>(static_cast<uintptr_t>(next++));
          live[mr] = {start, bytes};
          return mr;
        },
        [&](void* mr) { REQUIRE(live.erase(mr) == 1); });
    alignas(4096) static char buf[8 * 4096];
    void* a = cache.acquire(buf + 100, 3 * 4096);  // pages 0..3
    REQUIRE(a != nullptr);
    CHECK(live[a].first == reinterpret_cast<uintptr_t>(buf));
    CHECK(live[a].second == 4 * 4096);
    void* inside = cache.acquire(buf + 4096, 100);  // contained: reused
    CHECK(inside == a);
    CHECK(cache.refs(a) == 2);
    CHECK(registrations == 1);
    void* overlap = cache.acquire(buf + 3 * 4096, 2 * 4096);  // pages 3..4: partly outside
    CHECK(overlap != a);
    CHECK(registrations == 2);
    CHECK(cache.entries() == 2);

    CHECK(cache.release(a));
    CHECK(cache.release(a));
    CHECK(cache.refs(a) == 0);  // unused but cached
    CHECK(live.count(a) == 1);
    CHECK(cache.acquire(buf + 200, 10) == a);  // a cache hit brings it back
    CHECK(registrations == 2);
    CHECK(cache.release(a));
    CHECK(cache.release(overlap));  // two idle, maxIdle 1: the least recently acquired goes
    CHECK(cache.idle() == 1);
    CHECK(live.count(overlap) == 0);
    CHECK(live.count(a) == 1);
    CHECK_FALSE(cache.release(overlap));  // gone
    CHECK_FALSE(cache.release(a));        // held by nobody
    void* zero = cache.acquire(buf + 6 * 4096, 0);  // empty range: still one page
    CHECK(live[zero].second == 4096);
  }
  CHECK(live.empty());  // the destructor deregisters the rest
}

TEST_CASE("ib: wire layout and the split of a message over QPs", "[net][ib]") {
  CHECK(sizeof(FifoSlot) == 64);
  CHECK(offsetof(FifoSlot, seq) == 24);  // last field written, as NCCL's idx
  CHECK(sizeof(ConnInfo) < 4096);
  // The proxy posts up to 2 messages per FIFO step: network FIFOs of up to 32
  // steps (8 by default) never wait; more (PLAIT_SHM_STEPS allows 64) find no
  // free slot at times (a null request) and retry.
  CHECK(kFifoSlots >= 2 * 32);
  for (int nQps : {1, 2, 3, 4, 16}) {
    for (size_t bytes : {size_t(0), size_t(1), size_t(127), size_t(128), size_t(129), size_t(4096), size_t(1000003),
                         size_t(4) << 20}) {
      size_t sum = 0;
      for (int q = 0; q < nQps; ++q) {
        CHECK(qpOffset(bytes, q, nQps) == sum);
        if (q + 1 < nQps && qpShare(bytes, q + 1, nQps) > 0) CHECK(qpShare(bytes, q, nQps) % 128 == 0);
        sum += qpShare(bytes, q, nQps);
      }
      CHECK(sum == bytes);
      CHECK(qpShare(bytes, 0, nQps) >= qpShare(bytes, nQps - 1, nQps));
    }
  }
}

TEST_CASE("ib module: loads, finds no device without RDMA hardware, and sockets are chosen", "[net][ib]") {
  auto api = loadNetModule(PLAIT_IB_MODULE, nullptr);
  REQUIRE(api.isOk());
  CHECK(std::string(api.value()->name) == "IB");
  REQUIRE(api.value()->init(netLogger) == 0);
  int ndev = -1;
  REQUIRE(api.value()->devices(&ndev) == 0);
  if (ndev > 0) {
    WARN("this machine has " << ndev << " active RDMA port(s): the no-device checks are skipped");
    return;
  }
  CHECK(ndev == 0);
  PlaitNetProperties props{};
  CHECK(api.value()->getProperties(0, &props) != 0);
  setenv("PLAIT_NET_MODULE_DIR", PLAIT_NET_MODULE_DIR_PATH, 1);
  setenv("PLAIT_SOCKET_IFNAME", "lo", 1);
  auto choice = chooseNet();
  REQUIRE(choice.isOk());
  CHECK(std::string(choice->api->name) == "Socket");
}
