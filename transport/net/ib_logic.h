// ib_logic.h — the parts of the InfiniBand verbs module (ib_net.cc) that
// decide rather than talk to a device, kept apart so they are unit-tested on
// machines without one (tests/transport/test_net_ib.cc):
// - NCCL_IB_HCA parsing and matching (NCCL's syntax);
// - RoCE GID selection over a GID table (NCCL_IB_GID_INDEX,
//   NCCL_IB_ROCE_VERSION_NUM, NCCL_IB_ADDR_FAMILY);
// - the queue-pair state machine's attributes (INIT, RTR, RTS), with
//   NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, NCCL_IB_SL, NCCL_IB_TC, NCCL_IB_PKEY;
// - the registration cache (page-aligned ranges, reference counts, LRU
//   eviction of unused registrations);
// - the wire layout: the connection metadata exchanged over TCP at setup, the
//   receiver-to-sender FIFO slot, and how a message is split over the QPs.
// Nothing here touches a device; verbs.h is included for its plain structs.
// UNVERIFIED ON HARDWARE: no RDMA device was available where this was
// written; the logic follows NCCL's net_ib and the verbs man pages.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

namespace plait::ib {

// ---- NCCL_IB_HCA -----------------------------------------------------------
// "mlx5_0:1,mlx5_1" (prefixes, optional :port), "^mlx5_2" (all but these),
// "=mlx5_0" (exact names), "^=mlx5_0:1" (all but exactly these). Empty: all.
struct HcaSpec {
  struct Item {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Item> items;

  static HcaSpec parse(const std::string& text);
  // Whether device `dev`'s port `port` (1-based) is to be used.
  bool matches(const std::string& dev, int port) const;
};

// ---- GID selection ---------------------------------------------------------
struct GidEntry {
  uint8_t raw[16] = {};
  int roceVersion = 0;  // 1, 2, or 0 when unknown (IB link layer, no sysfs type)
};
struct GidPrefs {
  int index = -1;         // NCCL_IB_GID_INDEX: >= 0 forces it
  int roceVersion = 2;    // NCCL_IB_ROCE_VERSION_NUM
  int family = 2;         // NCCL_IB_ADDR_FAMILY: AF_INET (2) or AF_INET6 (10)
};
// The GID index to use on a RoCE port: the forced one if valid, else the
// first entry that is not all zeros, has the wanted RoCE version, and holds
// an address of the wanted family (IPv4: ::ffff:a.b.c.d; IPv6: not
// link-local fe80::/10 and not v4-mapped), falling back to any RoCE version
// of that family, then to index 0 as NCCL does. -1 if the table is empty.
int selectGid(const std::vector<GidEntry>& table, const GidPrefs& prefs);
bool gidIsZero(const uint8_t raw[16]);
bool gidIsV4Mapped(const uint8_t raw[16]);
bool gidIsLinkLocal(const uint8_t raw[16]);

// ---- queue-pair attributes -------------------------------------------------
struct QpOptions {
  int timeout = 20;    // NCCL_IB_TIMEOUT: 4.096 us * 2^timeout per try
  int retryCnt = 7;    // NCCL_IB_RETRY_CNT
  int sl = 0;          // NCCL_IB_SL
  int tc = 0;          // NCCL_IB_TC
  int pkeyIndex = 0;   // NCCL_IB_PKEY
};
// What one side tells the other about one QP (and its port).
struct PeerQp {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  int mtu = IBV_MTU_1024;
  bool roce = false;  // Ethernet link layer: address by GID
};
struct QpAttr {
  ibv_qp_attr attr{};
  int mask = 0;
};
QpAttr qpInitAttr(int port, const QpOptions& o);
QpAttr qpRtrAttr(const PeerQp& remote, int port, int localGidIndex, int localMtu, const QpOptions& o);
QpAttr qpRtsAttr(uint32_t localPsn, const QpOptions& o);

// ---- registration cache ----------------------------------------------------
// Registrations cover whole pages. A request inside a cached registration
// reuses it (reference counted); one that is not entirely inside any gets a
// new registration of its page-aligned range (partial overlaps are fine for
// verbs). A registration whose count drops to zero stays cached, and the
// least recently acquired of those are deregistered beyond `maxIdle`.
// Not thread-safe (the module holds a lock around it).
class RegCache {
 public:
  using RegisterFn = std::function<void*(uintptr_t start, size_t bytes)>;  // null on failure
  using DeregisterFn = std::function<void(void* mr)>;
  RegCache(size_t pageBytes, size_t maxIdle, RegisterFn reg, DeregisterFn dereg);
  ~RegCache();  // deregisters everything left
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // The registration covering [addr, addr + bytes); null if registering failed.
  void* acquire(const void* addr, size_t bytes);
  // Gives back one acquire() of `mr`; false if `mr` is not held.
  bool release(void* mr);

  size_t entries() const { return entries_.size(); }
  size_t idle() const;
  int refs(void* mr) const;

 private:
  struct Entry {
    uintptr_t start, end;
    void* mr;
    int refs;
  };
  void evict();
  size_t page_, maxIdle_;
  RegisterFn reg_;
  DeregisterFn dereg_;
  std::list<Entry> entries_;  // most recently used first
};

// ---- wire layout -----------------------------------------------------------
constexpr int kMaxQps = 16;
constexpr int kFifoSlots = 64;  // receives one recv comm may have posted
constexpr uint64_t kConnMagic = 0x504c414954494221ULL;  // "PLAITIB!"

// Sent once each way over the setup socket: the sender first (its QPs and
// where its FIFO is), then the receiver (its QPs).
struct ConnInfo {
  uint64_t magic = kConnMagic;
  uint64_t id = 0;  // the listener's handle's (the sender's info), so a stranger on the port is told apart
  uint32_t nQps = 0;
  uint32_t mtu = 0;
  uint64_t fifoAddr = 0;  // sender: its FIFO of kFifoSlots FifoSlots
  uint32_t fifoRkey = 0;
  uint32_t pad = 0;
  PeerQp qps[kMaxQps];
};

// One posted receive, written by the receiver into the sender's FIFO with
// an RDMA write; `seq` (the receive's 1-based sequence number) is written
// last in the struct and the sender takes the slot when seq matches (as
// NCCL does, relying on the HCA placing the write's bytes in order).
struct alignas(64) FifoSlot {
  uint64_t addr;   // where the data goes
  uint32_t rkey;
  uint32_t bytes;  // capacity of the receive
  int32_t tag;
  uint32_t pad;
  uint64_t seq;
};
static_assert(sizeof(FifoSlot) == 64);

// Bytes of a `bytes`-byte message that QP q of nQps carries: equal parts
// rounded up to `align` (the last QPs may carry less, or nothing). Every QP
// still sends one RDMA write with immediate data, so the receiver counts
// nQps completions per message; the immediate data is the message's size.
size_t qpShare(size_t bytes, int q, int nQps, size_t align = 128);
size_t qpOffset(size_t bytes, int q, int nQps, size_t align = 128);

// ---- options from the environment (NCCL_ and PLAIT_ names) -----------------
struct IbOptions {
  HcaSpec hca;
  GidPrefs gid;
  QpOptions qp;
  int qpsPerConnection = 1;  // NCCL_IB_QPS_PER_CONNECTION, 1..kMaxQps
};
// `get` returns an environment variable's value or null (getenv in the
// module; a map in tests). PLAIT_X wins over NCCL_X.
IbOptions readOptions(const std::function<const char*(const char*)>& get);

}  // namespace plait::ib
