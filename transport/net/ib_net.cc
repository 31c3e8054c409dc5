// ib_net.cc — InfiniBand / RoCE verbs behind the net interface (net.h),
// built as the module libplait-net-ib.so (linked with libibverbs; libplait
// itself never links it). net_plugin.cc tries it before the socket
// transport; with no active port (no RDMA hardware: ibv_get_device_list
// returns NULL) devices() reports 0 and the socket transport is chosen.
//
// UNVERIFIED ON HARDWARE: written and compiled on a machine without an RDMA
// device. What decides (NCCL_IB_HCA, GID choice, QP attributes, the
// registration cache, the wire layout) is in ib_logic.h and unit-tested;
// the verbs calls below follow NCCL's net_ib and have not run.
//
// Design (NCCL's): a connection is N reliable-connected QPs
// (NCCL_IB_QPS_PER_CONNECTION) sharing one CQ, set up over a TCP socket on
// the NCCL_SOCKET_IFNAME interface (handle = the receiver's address): the
// sender sends its ConnInfo (QPs, its FIFO's address and rkey), the receiver
// answers with its own; both move their QPs INIT -> RTR -> RTS.
// Data: irecv() posts a receive WR on every QP, then RDMA-writes a FifoSlot
// (buffer address, rkey, capacity, tag, sequence) into the sender's FIFO.
// isend() waits (returns a null request) until its slot holds the matching
// sequence, then RDMA-writes its data split over the QPs, each part with
// immediate data = the message size; the receive is complete after one
// completion per QP. Registrations go through a per-device RegCache.
// GPU memory (GPUDirect RDMA) is registered as a dmabuf (ibv_reg_dmabuf_mr,
// probed per device); iflush has no read-back QP yet, so the proxy orders a
// receive into GPU memory with the GPU's own flush (cuFlushGPUDirectRDMAWrites).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "transport/net/connect_stages.h"
#include "transport/net/ib_net_internal.h"

namespace plait::ib::mod {

PlaitNetLogger gLog = nullptr;
std::vector<std::unique_ptr<Device>> gDevices;
IbOptions gOpt;

std::string textOf(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  const bool v6 = a.sa.sa_family == AF_INET6;
  inet_ntop(a.sa.sa_family, v6 ? static_cast<const void*>(&a.v6.sin6_addr) : &a.v4.sin_addr, buf, sizeof buf);
  const int port = ntohs(v6 ? a.v6.sin6_port : a.v4.sin_port);
  return (v6 ? "[" + std::string(buf) + "]" : std::string(buf)) + ":" + std::to_string(port);
}

RegDmaBufMr regDmaBufMr() {
  static const RegDmaBufMr fn = reinterpret_cast<RegDmaBufMr>(dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr"));
  return fn;
}

namespace {

std::mutex gMu;
bool gInitDone = false;

// NCCL's probe: a dmabuf registration of fd -1 fails with EOPNOTSUPP or
// EPROTONOSUPPORT where the kernel or HCA cannot register dmabufs, and with
// another error (EBADF) where it can. PLAIT_IB_DMABUF_DISABLE=1 says no.
bool dmabufSupported(ibv_pd* pd) {
  const char* off = std::getenv("PLAIT_IB_DMABUF_DISABLE");
  if (off != nullptr && std::strcmp(off, "1") == 0) return false;
  const RegDmaBufMr reg = regDmaBufMr();
  if (reg == nullptr) return false;
  errno = 0;
  ibv_mr* mr = reg(pd, 0, 0, 0, -1, 0);
  if (mr != nullptr) {  // never expected; give it back
    ibv_dereg_mr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}
Address gIfAddr{};
socklen_t lengthOf(const Address& a) { return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }

// Mbit/s from ibv_port_attr's active_speed / active_width codes.
int portSpeedMbps(const ibv_port_attr& p) {
  int lane = 2500;
  switch (p.active_speed) {
    case 2: lane = 5000; break;     // DDR
    case 4: case 8: lane = 10000; break;  // QDR, FDR10
    case 16: lane = 14000; break;   // FDR
    case 32: lane = 25000; break;   // EDR
    case 64: lane = 50000; break;   // HDR
    case 128: lane = 100000; break; // NDR
    default: break;
  }
  int width = p.active_width == 2 ? 4 : p.active_width == 4 ? 8 : p.active_width == 8 ? 12 : p.active_width == 16 ? 2 : 1;
  return lane * width;
}

// The GID table of a RoCE port, with each entry's RoCE version from sysfs.
std::vector<GidEntry> gidTable(ibv_context* ctx, const std::string& dev, int port, int len) {
  std::vector<GidEntry> table;
  for (int i = 0; i < len; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, static_cast<uint8_t>(port), i, &gid) != 0) break;
    GidEntry e;
    std::memcpy(e.raw, gid.raw, 16);
    std::ifstream type("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                       std::to_string(i));
    std::string text;
    std::getline(type, text);
    e.roceVersion = text.find("v2") != std::string::npos ? 2 : text.empty() ? 0 : 1;
    table.push_back(e);
  }
  return table;
}

// Opens every active port NCCL_IB_HCA allows.
void discover() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    IB_INFO("NET/IB: no RDMA devices (ibv_get_device_list: %s)", std::strerror(errno));
    return;
  }
  for (int d = 0; d < n; ++d) {
    const std::string dev = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) continue;
    ibv_device_attr attr{};
    bool used = false;
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        if (!gOpt.hca.matches(dev, port)) continue;
        auto dv = std::make_unique<Device>();
        dv->name = dev + ":" + std::to_string(port);
        dv->ctx = ctx;
        dv->port = port;
        dv->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        dv->lid = pa.lid;
        dv->mtu = pa.active_mtu;
        dv->speedMbps = portSpeedMbps(pa);
        dv->gidIndex = dv->roce ? selectGid(gidTable(ctx, dev, port, pa.gid_tbl_len), gOpt.gid) : 0;
        if (dv->roce && dv->gidIndex < 0) continue;
        ibv_query_gid(ctx, static_cast<uint8_t>(port), dv->gidIndex, &dv->gid);
        dv->pd = ibv_alloc_pd(ctx);
        if (!dv->pd) continue;
        ibv_pd* pd = dv->pd;
        dv->cache = std::make_unique<RegCache>(
            static_cast<size_t>(sysconf(_SC_PAGESIZE)), 64,
            [pd](uintptr_t start, size_t bytes) -> void* {
              return ibv_reg_mr(pd, reinterpret_cast<void*>(start), bytes,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
            },
            [](void* mr) { ibv_dereg_mr(static_cast<ibv_mr*>(mr)); });
        dv->dmabuf = dmabufSupported(pd);
        IB_INFO("NET/IB: %s %s, GID index %d, MTU code %d, %d Mbit/s%s", dv->name.c_str(), dv->roce ? "RoCE" : "IB",
                dv->gidIndex, dv->mtu, dv->speedMbps, dv->dmabuf ? ", dmabuf (GPUDirect RDMA)" : "");
        gDevices.push_back(std::move(dv));
        used = true;
      }
    }
    if (!used) ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
}

// The setup socket's interface: NCCL_SOCKET_IFNAME (same syntax as
// NCCL_IB_HCA without ports); default: the first up one that is not lo/docker.
bool pickInterface() {
  const char* spec = std::getenv("PLAIT_SOCKET_IFNAME");
  if (!spec) spec = std::getenv("NCCL_SOCKET_IFNAME");
  const HcaSpec names = HcaSpec::parse(spec ? spec : "");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    if (f == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)) continue;
    const std::string name = i->ifa_name;
    if (spec ? !names.matches(name, -1) : (name.rfind("lo", 0) == 0 || name.rfind("docker", 0) == 0)) continue;
    std::memcpy(&gIfAddr, i->ifa_addr, f == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    found = true;
  }
  freeifaddrs(list);
  return found;
}

int ibInit(PlaitNetLogger logger) {
  std::lock_guard<std::mutex> lock(gMu);
  gLog = logger;
  if (gInitDone) return netr::kSuccess;
  gInitDone = true;
  gOpt = readOptions([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
  discover();
  if (!gDevices.empty() && !pickInterface()) {
    IB_WARN("NET/IB: no interface matches NCCL_SOCKET_IFNAME for connection setup");
    gDevices.clear();
  }
  return netr::kSuccess;
}

int ibDevices(int* ndev) {
  *ndev = static_cast<int>(gDevices.size());
  return netr::kSuccess;
}

int ibGetProperties(int dev, PlaitNetProperties* props) {
  if (dev < 0 || dev >= static_cast<int>(gDevices.size())) return netr::kInvalidArgument;
  Device& d = *gDevices[dev];
  std::memset(props, 0, sizeof *props);
  props->name = const_cast<char*>(d.name.c_str());
  props->guid = ibv_get_device_guid(d.ctx->device);
  props->ptrSupport = kNetPtrHost | (d.dmabuf ? kNetPtrCuda | kNetPtrDmaBuf : 0);
  props->regIsGlobal = 1;
  props->speed = d.speedMbps;
  props->port = d.port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  return netr::kSuccess;
}

// ---- non-blocking socket helpers ------------------------------------------

// Moves what it can of buf[*done..size); 1 when all moved, 0 for later, -1 on error.
int socketStep(int fd, void* buf, size_t size, size_t* done, bool sending) {
  while (*done < size) {
    char* p = static_cast<char*>(buf) + *done;
    ssize_t n = sending ? ::send(fd, p, size - *done, MSG_NOSIGNAL) : ::recv(fd, p, size - *done, 0);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (n == 0) errno = ECONNRESET;
    return -1;
  }
  return 1;
}

void nonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

struct Handle {
  uint64_t magic;
  uint64_t id;  // random, the listener's: the sender repeats it in its ConnInfo
  Address addr;
  void* state;  // the connecting side's Pending (connect() is called again with the same handle)
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

// A connection being made (either side): socket progress and the two infos.
struct Pending {
  Comm* comm = nullptr;
  int stage = 0;
  size_t done = 0;
  ConnInfo mine{}, theirs{};
};

struct ListenComm {
  int fd = -1;
  int dev = 0;
  uint64_t id = 0;  // the handle's
  Pending* pending = nullptr;
  std::chrono::steady_clock::time_point since;  // when `pending` was accepted
};

// A connection that has not sent its ConnInfo this long is dropped, and the
// next one in the backlog accepted: a stranger that connects and stays silent
// cannot keep the peer out until the setup's deadline.
constexpr std::chrono::seconds kAcceptStall{10};

// The connecting side's Pendings (connect_stages.h: the handle that holds one
// is a copy of a peer's bytes).
// Never destroyed: a non-blocking init may still be connecting at exit.
net::StageRegistry<Pending>& gConnecting = *new net::StageRegistry<Pending>();

// Creates the CQ, the QPs (moved to INIT) and the FIFO memory; fills `info`.
bool createQps(Comm* c, int nQps, ConnInfo* info) {
  Device& d = *c->dev;
  c->nQps = nQps;
  c->cq = ibv_create_cq(d.ctx, nQps * 3 * kFifoSlots, nullptr, nullptr, 0);
  if (!c->cq) return false;
  c->fifo = static_cast<FifoSlot*>(std::aligned_alloc(4096, sizeof(FifoSlot) * kFifoSlots));
  std::memset(c->fifo, 0, sizeof(FifoSlot) * kFifoSlots);
  c->fifoMr = ibv_reg_mr(d.pd, c->fifo, sizeof(FifoSlot) * kFifoSlots,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!c->fifoMr) return false;
  std::mt19937 rng(std::random_device{}());
  info->nQps = static_cast<uint32_t>(nQps);
  info->mtu = static_cast<uint32_t>(d.mtu);
  info->fifoAddr = reinterpret_cast<uintptr_t>(c->fifo);
  info->fifoRkey = c->fifoMr->rkey;
  for (int q = 0; q < nQps; ++q) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = c->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 2 * kFifoSlots;
    ia.cap.max_recv_wr = kFifoSlots;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = sizeof(FifoSlot);
    c->qps[q] = ibv_create_qp(d.pd, &ia);
    if (!c->qps[q]) return false;
    QpAttr init = qpInitAttr(d.port, gOpt.qp);
    if (ibv_modify_qp(c->qps[q], &init.attr, init.mask) != 0) return false;
    c->psn[q] = rng() & 0xffffff;
    PeerQp& p = info->qps[q];
    p.qpn = c->qps[q]->qp_num;
    p.psn = c->psn[q];
    p.lid = d.lid;
    std::memcpy(p.gid, d.gid.raw, 16);
    p.mtu = d.mtu;
    p.roce = d.roce;
  }
  return true;
}

// INIT -> RTR -> RTS against the peer's QPs.
bool connectQps(Comm* c, const ConnInfo& remote) {
  if (remote.magic != kConnMagic || static_cast<int>(remote.nQps) != c->nQps) {
    errno = EPROTO;
    return false;
  }
  for (int q = 0; q < c->nQps; ++q) {
    QpAttr rtr = qpRtrAttr(remote.qps[q], c->dev->port, c->dev->gidIndex, c->dev->mtu, gOpt.qp);
    QpAttr rts = qpRtsAttr(c->psn[q], gOpt.qp);
    if (ibv_modify_qp(c->qps[q], &rtr.attr, rtr.mask) != 0 || ibv_modify_qp(c->qps[q], &rts.attr, rts.mask) != 0)
      return false;
  }
  return true;
}

int failSetup(Pending* p, const char* what) {
  IB_WARN("NET/IB: %s %s: %s", what, textOf(p->comm->peer).c_str(), errno ? std::strerror(errno) : "failed");
  destroyComm(p->comm);
  gConnecting.drop(p);  // the connector's; an acceptor's is only deleted
  return netr::kRemoteError;
}

// The acceptor's pending connection is not from the peer the handle went to
// (a stranger reached the port, or it stayed silent): close it and keep
// listening.
int dropStranger(ListenComm* l, const char* why) {
  Pending* p = l->pending;
  l->pending = nullptr;
  IB_WARN("NET/IB: dropping a connection from %s: %s", textOf(p->comm->peer).c_str(), why);
  destroyComm(p->comm);
  delete p;
  return netr::kSuccess;
}

int ibListen(int dev, void* handleBytes, void** listenComm) {
  Address bindAddr = gIfAddr;
  if (bindAddr.sa.sa_family == AF_INET6) bindAddr.v6.sin6_port = 0;
  else bindAddr.v4.sin_port = 0;
  int fd = ::socket(bindAddr.sa.sa_family, SOCK_STREAM, 0);
  socklen_t len = lengthOf(bindAddr);
  if (fd < 0 || ::bind(fd, &bindAddr.sa, len) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, &bindAddr.sa, &len) != 0) {
    IB_WARN("NET/IB: listening on %s: %s", textOf(bindAddr).c_str(), std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return netr::kSystemError;
  }
  nonBlocking(fd);
  const uint64_t id = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  Handle h{kConnMagic, id, bindAddr, nullptr};
  std::memset(handleBytes, 0, kNetHandleBytes);
  std::memcpy(handleBytes, &h, sizeof h);
  auto* l = new ListenComm();
  l->fd = fd;
  l->dev = dev;
  l->id = id;
  *listenComm = l;
  return netr::kSuccess;
}

// Sender: 0 connect the socket, 1 wait for it, create QPs, 2 send our info,
// 3 receive theirs, connect the QPs: done.
int ibConnect(int dev, void* handleBytes, void** sendComm, PlaitNetDeviceHandle**) {
  *sendComm = nullptr;
  Handle h;
  std::memcpy(&h, handleBytes, sizeof h);
  if (h.magic != kConnMagic) return netr::kInvalidArgument;
  if (h.state != nullptr && !gConnecting.owns(h.state, [&](const Pending& mine) { return mine.mine.id == h.id; })) {
    IB_WARN("NET/IB: a connection handle carries connector state this process did not make (a listener's handle "
            "arrives with it zeroed)");
    return netr::kInvalidArgument;
  }
  auto* p = static_cast<Pending*>(h.state);
  if (p == nullptr) {
    p = gConnecting.adopt(new Pending());
    p->mine.id = h.id;
    p->comm = new Comm();
    p->comm->dev = gDevices[dev].get();
    p->comm->sending = true;
    p->comm->peer = h.addr;
    p->comm->fd = ::socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
    if (p->comm->fd < 0) return failSetup(p, "socket for");
    nonBlocking(p->comm->fd);
    if (::connect(p->comm->fd, &h.addr.sa, lengthOf(h.addr)) != 0 && errno != EINPROGRESS)
      return failSetup(p, "connecting to");
    h.state = p;
    std::memcpy(handleBytes, &h, sizeof h);
  }
  Comm* c = p->comm;
  errno = 0;
  if (p->stage == 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      errno = err;
      return failSetup(p, "connecting to");
    }
    if (!createQps(c, gOpt.qpsPerConnection, &p->mine)) return failSetup(p, "creating QPs for");
    p->mine.id = h.id;
    p->stage = 1;
  }
  int rc = 1;
  if (p->stage == 1 && (rc = socketStep(c->fd, &p->mine, sizeof p->mine, &p->done, true)) == 1) {
    p->stage = 2;
    p->done = 0;
  }
  if (p->stage == 2 && (rc = socketStep(c->fd, &p->theirs, sizeof p->theirs, &p->done, false)) == 1) {
    if (p->theirs.magic != kConnMagic || p->theirs.id != h.id) {
      errno = EPROTO;
      return failSetup(p, "QP information not from the handle's listener");
    }
    if (!connectQps(c, p->theirs)) return failSetup(p, "connecting QPs to");
    *sendComm = c;
    gConnecting.drop(p);
    return netr::kSuccess;
  }
  if (rc < 0) return failSetup(p, "exchanging QP information with");
  return netr::kSuccess;
}

// Receiver: 0 accept, 1 receive the sender's info, create and connect QPs,
// 2 send ours: done.
int ibAccept(void* listenComm, void** recvComm, PlaitNetDeviceHandle**) {
  auto* l = static_cast<ListenComm*>(listenComm);
  *recvComm = nullptr;
  errno = 0;
  if (l->pending == nullptr) {
    Address from{};
    socklen_t len = sizeof from;
    int fd = ::accept(l->fd, &from.sa, &len);
    if (fd < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? netr::kSuccess : netr::kSystemError;
    nonBlocking(fd);
    l->pending = new Pending();
    l->pending->comm = new Comm();
    l->pending->comm->dev = gDevices[l->dev].get();
    l->pending->comm->peer = from;
    l->pending->comm->fd = fd;
    l->since = std::chrono::steady_clock::now();
  }
  Pending* p = l->pending;
  Comm* c = p->comm;
  int rc = 1;
  if (p->stage == 0 && (rc = socketStep(c->fd, &p->theirs, sizeof p->theirs, &p->done, false)) == 1) {
    if (p->theirs.magic != kConnMagic || p->theirs.id != l->id) return dropStranger(l, "not this handle's sender");
    if (p->theirs.nQps < 1 || p->theirs.nQps > kMaxQps) {
      l->pending = nullptr;
      errno = EPROTO;
      return failSetup(p, "bad QP information from");
    }
    c->remoteFifo = p->theirs.fifoAddr;
    c->remoteRkey = p->theirs.fifoRkey;
    const bool made = createQps(c, static_cast<int>(p->theirs.nQps), &p->mine);
    p->mine.id = l->id;
    if (!made || !connectQps(c, p->theirs)) {
      l->pending = nullptr;
      return failSetup(p, "connecting QPs to");
    }
    p->stage = 1;
    p->done = 0;
  }
  if (p->stage == 1 && (rc = socketStep(c->fd, &p->mine, sizeof p->mine, &p->done, true)) == 1) {
    *recvComm = c;
    l->pending = nullptr;
    delete p;
    return netr::kSuccess;
  }
  if (rc < 0 && p->stage == 0) return dropStranger(l, "it closed before sending its QP information");
  if (rc < 0) {
    l->pending = nullptr;
    return failSetup(p, "exchanging QP information with");
  }
  if (p->stage == 0 && std::chrono::steady_clock::now() - l->since > kAcceptStall)
    return dropStranger(l, "no QP information within 10 s");
  return netr::kSuccess;
}

int ibCloseListen(void* listenComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (l->pending) {
    destroyComm(l->pending->comm);
    delete l->pending;
  }
  ::close(l->fd);
  delete l;
  return netr::kSuccess;
}

}  // namespace

void destroyComm(Comm* c) {
  for (int q = 0; q < c->nQps; ++q)
    if (c->qps[q]) ibv_destroy_qp(c->qps[q]);
  if (c->cq) ibv_destroy_cq(c->cq);
  if (c->fifoMr) ibv_dereg_mr(c->fifoMr);
  std::free(c->fifo);
  if (c->fd >= 0) ::close(c->fd);
  delete c;
}

// The data path (ib_data.cc).
int ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
int ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
int ibDeregMr(void* comm, void* mhandle);
int ibIsend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
int ibIrecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
int ibTest(void* request, int* done, int* sizes);
int ibClose(void* comm);

namespace {
int ibIflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory only: nothing to flush
  return netr::kSuccess;
}
int ibGetDeviceMr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return netr::kSuccess;
}
int ibIrecvConsumed(void*, int, void*) { return netr::kSuccess; }
}  // namespace

}  // namespace plait::ib::mod

using namespace plait::ib::mod;
extern "C" __attribute__((visibility("default"))) const PlaitNetV8 ncclNetPlugin_v8 = {
    "IB",    ibInit,        ibDevices, ibGetProperties, ibListen, ibConnect, ibAccept,
    ibRegMr, ibRegMrDmaBuf, ibDeregMr, ibIsend,         ibIrecv,  ibIflush,  ibTest,
    ibClose, ibClose,       ibCloseListen, ibGetDeviceMr, ibIrecvConsumed,
};
