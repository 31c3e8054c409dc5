// net_transport.cc — making the network connections (the data path is in proxy.cc).
#include "transport/net/net_transport.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "base/config.h"
#include "base/log.h"
#include "transport/net/net_plugin.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kNetSendFromBuffers, "NET_SEND_FROM_BUFFERS", 1,
                "1: ring sends over the built-in socket module go out of the user's buffers, not a copy in the "
                "FIFO step; 0: always copy");
PLAIT_PARAM_INT(kNetGdr, "NET_GDR", -1,
                "GPUDirect RDMA for device buffers to other hosts: the network connectors' step buffers in GPU memory, "
                "registered as dmabufs. -1: when the network plugin supports dmabufs and the topology puts the NIC "
                "within NCCL_NET_GDR_LEVEL of the GPU; 1: whenever the plugin supports dmabufs (an error if it does "
                "not); 0: never (steps in host memory, mapped for the kernels)");

constexpr int kRingTag = 0x100;  // + channel
constexpr int kP2pTag = 0x7000;

// Each rank's part of the exchange: its FIFO shapes, then one handle per
// connector it receives on (ring channels, then point-to-point per rank).
struct ShapeInfo {
  int64_t ringSteps, ringStepBytes, p2pSteps, p2pStepBytes;
  bool operator==(const ShapeInfo&) const = default;
};

struct Listening {
  void* comm;  // null once accepted and closed
  NetConnector* conn;
};
struct Connecting {
  std::array<char, kNetHandleBytes> handle;  // the receiver's; connect() keeps its progress in it
  NetConnector* conn;
  bool done;
};

// Drives every connect() and accept() until all connections exist. Both
// kinds progress in one loop: peers connect to each other in any order.
Status connectAll(const PlaitNetV8& net, int dev, std::vector<Connecting>& connects, std::vector<Listening>& listens,
                  const std::atomic<uint32_t>* abortFlag, Deadline deadline) {
  size_t left = connects.size() + listens.size();
  while (left > 0) {
    bool moved = false;
    for (Connecting& k : connects) {
      if (k.done) continue;
      void* comm = nullptr;
      PlaitNetDeviceHandle* devHandle = nullptr;
      if (net.connect(dev, k.handle.data(), &comm, &devHandle) != 0)
        return remoteError("connecting to rank " + std::to_string(k.conn->peer()) + ": " + takeNetError());
      if (comm == nullptr) continue;
      PLAIT_RETURN_IF_ERROR(k.conn->attach(net, comm));
      k.done = moved = true;
      --left;
    }
    for (Listening& l : listens) {
      if (l.comm == nullptr) continue;
      void* comm = nullptr;
      PlaitNetDeviceHandle* devHandle = nullptr;
      if (net.accept(l.comm, &comm, &devHandle) != 0)
        return remoteError("accepting the connection of rank " + std::to_string(l.conn->peer()) + ": " +
                           takeNetError());
      if (comm == nullptr) continue;
      PLAIT_RETURN_IF_ERROR(l.conn->attach(net, comm));
      net.closeListen(l.comm);
      l.comm = nullptr;
      moved = true;
      --left;
    }
    if (moved) continue;
    if (abortFlag && abortFlag->load(std::memory_order_acquire)) return remoteError("aborted while connecting");
    if (deadline.expired()) {
      std::string who;
      for (Connecting& k : connects)
        if (!k.done) who += " " + std::to_string(k.conn->peer()) + " (to)";
      for (Listening& l : listens)
        if (l.comm) who += " " + std::to_string(l.conn->peer()) + " (from)";
      return remoteError("timed out making network connections with rank(s)" + who);
    }
    usleep(200);
  }
  return Status::ok();
}

WaitContext connectorContext(const NetTransportOptions& o, int peer, const char* what) {
  WaitContext ctx;
  ctx.abortFlag = o.abortFlag;
  ctx.peerPid = -1;  // another host: its pid means nothing here
  ctx.peerRank = peer;
  ctx.oversubscribed = o.oversubscribed;
  ctx.waitTimeoutMs = o.waitTimeoutMs;
  ctx.what = what;
  return ctx;
}

}  // namespace

Status NetTransport::makeConnectors(const NetTransportOptions& o) {
  const int nranks = static_cast<int>(o.remote.size());
  auto add = [this](bool sending, int peer, FifoShape shape, bool trailer, int tag, WaitContext ctx) {
    connectors_.push_back(std::make_unique<NetConnector>(sending, peer, shape, trailer, tag, ctx, gpu_));
    return connectors_.back().get();
  };
  ringSend_.assign(o.nChannels, nullptr);
  ringRecv_.assign(o.nChannels, nullptr);
  for (int c = 0; c < o.nChannels; ++c) {
    if (o.remote[o.ringNext[c]])
      ringSend_[c] = add(true, o.ringNext[c], o.ring, false, kRingTag + c, connectorContext(o, o.ringNext[c], "ring send"));
    if (o.remote[o.ringPrev[c]])
      ringRecv_[c] =
          add(false, o.ringPrev[c], o.ring, false, kRingTag + c, connectorContext(o, o.ringPrev[c], "ring receive"));
  }
  p2pSend_.assign(nranks, nullptr);
  p2pRecv_.assign(nranks, nullptr);
  for (int q = 0; q < nranks; ++q) {
    if (!o.remote[q]) continue;
    p2pSend_[q] = add(true, q, o.p2p, true, kP2pTag, connectorContext(o, q, "point-to-point send"));
    p2pRecv_[q] = add(false, q, o.p2p, true, kP2pTag, connectorContext(o, q, "point-to-point receive"));
  }
  for (auto& c : connectors_) PLAIT_RETURN_IF_ERROR(c->allocate());
  // The built-in socket module sends from any memory of this process without
  // a registration: the host schedules' ring sends may leave their payload in
  // the user's buffers (FifoSender::postReference), saving the copy into the
  // step. Other modules (verbs, UCX, plugins) need registered memory; the
  // device path's FIFOs are the kernels'.
  if (o.sendFromBuffers && !gpu_ && net_ == socketNet() && kNetSendFromBuffers.get() != 0)
    for (NetConnector* c : ringSend_)
      if (c) c->frontSender()->enableReferences();
  return Status::ok();
}

Result<std::shared_ptr<NetGpuMemory>> NetTransport::chooseGpuMemory(const NetTransportOptions& o,
                                                                     const PlaitNetProperties& props) const {
  const int64_t mode = kNetGdr.get();
  if (mode < -1 || mode > 1)
    return invalidArgument("PLAIT_NET_GDR=" + std::to_string(mode) + ": -1 (auto), 0 (off) or 1 (on)");
  if (!o.gpu || mode == 0) return std::shared_ptr<NetGpuMemory>();
  // The two functions GPUDirect RDMA needs are optional in a plugin's table (checkNetTable).
  const bool dmabuf = (props.ptrSupport & kNetPtrDmaBuf) != 0 && (props.ptrSupport & kNetPtrCuda) != 0 &&
                      net_->regMrDmaBuf != nullptr && net_->iflush != nullptr;
  if (mode == 1) {
    if (!dmabuf)
      return invalidUsage(description_ + " cannot register GPU memory (its plugin reports no dmabuf support); "
                          "PLAIT_NET_GDR=1 asks for GPUDirect RDMA");
    return o.gpu;
  }
  if (!dmabuf) return std::shared_ptr<NetGpuMemory>();
  const std::optional<bool> near = o.gpu->nearEnough(props);
  if (!near.value_or(false)) {
    PLAIT_INFO(kNet, "%s: no GPUDirect RDMA with %s: %s", description_.c_str(), o.gpu->description().c_str(),
               near ? "the NIC is farther than NCCL_NET_GDR_LEVEL" : "the topology does not place them both");
    return std::shared_ptr<NetGpuMemory>();
  }
  return o.gpu;
}

Status NetTransport::exchangeAndConnect(OobExchange& oob, const NetTransportOptions& o, Deadline deadline) {
  const int nranks = oob.nranks(), nCh = o.nChannels;
  const size_t slotBytes = sizeof(ShapeInfo) + static_cast<size_t>(nCh + nranks) * kNetHandleBytes;
  std::vector<char> all(slotBytes * nranks, 0);
  auto handleOf = [&](int r, int index) { return &all[slotBytes * r + sizeof(ShapeInfo) + index * kNetHandleBytes]; };
  const ShapeInfo shapes{o.ring.nSteps, static_cast<int64_t>(o.ring.stepBytes), o.p2p.nSteps,
                         static_cast<int64_t>(o.p2p.stepBytes)};
  std::memcpy(&all[slotBytes * rank_], &shapes, sizeof shapes);

  std::vector<Listening> listens;
  auto closeListens = [&] {
    for (Listening& l : listens)
      if (l.comm) net_->closeListen(l.comm);
  };
  auto listenFor = [&](NetConnector* conn, int index) -> Status {
    void* lc = nullptr;
    if (net_->listen(dev_, handleOf(rank_, index), &lc) != 0)
      return systemError("listening for rank " + std::to_string(conn->peer()) + ": " + takeNetError());
    listens.push_back({lc, conn});
    return Status::ok();
  };
  Status s;
  for (int c = 0; c < nCh && s.isOk(); ++c)
    if (ringRecv_[c]) s = listenFor(ringRecv_[c], c);
  for (int q = 0; q < nranks && s.isOk(); ++q)
    if (p2pRecv_[q]) s = listenFor(p2pRecv_[q], nCh + q);
  if (s.isOk()) s = oob.allGather(all.data(), slotBytes, deadline);
  for (int r = 0; r < nranks && s.isOk(); ++r) {
    ShapeInfo theirs;
    std::memcpy(&theirs, &all[slotBytes * r], sizeof theirs);
    if (o.remote[r] && !(theirs == shapes))
      s = invalidUsage("rank " + std::to_string(r) + " uses other FIFO shapes (PLAIT_SHM_STEPS, PLAIT_SHM_STEP_BYTES, "
                       "PLAIT_NET_P2P_*, and PLAIT_SHM_P2P_* for device buffers): every rank must set them alike");
  }
  if (!s.isOk()) {
    closeListens();
    return s;
  }

  std::vector<Connecting> connects;
  for (int c = 0; c < nCh; ++c)
    if (ringSend_[c]) connects.push_back({{}, ringSend_[c], false});
  for (int q = 0; q < nranks; ++q)
    if (p2pSend_[q]) connects.push_back({{}, p2pSend_[q], false});
  for (Connecting& k : connects) {
    const int peer = k.conn->peer();
    int index = -1;  // a ring channel's slot, else (point-to-point) the receiver's slot for this rank
    for (int c = 0; c < nCh; ++c)
      if (ringSend_[c] == k.conn) index = c;
    if (index < 0) index = nCh + rank_;
    std::memcpy(k.handle.data(), handleOf(peer, index), kNetHandleBytes);
  }
  s = connectAll(*net_, dev_, connects, listens, abortFlag_, deadline);
  closeListens();
  return s;
}

Result<std::unique_ptr<NetTransport>> NetTransport::connect(OobExchange& oob, const NetTransportOptions& options,
                                                            Deadline deadline) {
  std::unique_ptr<NetTransport> t(new NetTransport());
  t->rank_ = oob.rank();
  t->abortFlag_ = options.abortFlag;
  PLAIT_ASSIGN_OR_RETURN(NetChoice choice, chooseNet());
  t->net_ = choice.api;
  t->dev_ = options.localRank % choice.nDevices;
  PlaitNetProperties props{};
  if (t->net_->getProperties(t->dev_, &props) != 0) return systemError("network device properties: " + takeNetError());
  PLAIT_RETURN_IF_ERROR(checkNetProperties(props, t->dev_, t->net_->name));
  t->description_ = std::string("NET/") + t->net_->name + "/" + (props.name ? props.name : "?");
  PLAIT_ASSIGN_OR_RETURN(t->gpu_, t->chooseGpuMemory(options, props));
  if (t->gpu_) t->description_ += "/GDRDMA";
  PLAIT_RETURN_IF_ERROR(t->makeConnectors(options));
  PLAIT_RETURN_IF_ERROR(t->exchangeAndConnect(oob, options, deadline));
  t->proxy_ = std::thread([p = t.get()] { p->proxyLoop(); });
  PLAIT_INFO(kNet, "%s: %zu network connector(s), device %d (%d Mbit/s), proxy started", t->description_.c_str(),
             t->connectors_.size(), t->dev_, props.speed);
  return t;
}

NetTransport::~NetTransport() {
  stop_.store(true, std::memory_order_release);
  if (proxy_.joinable()) proxy_.join();
  for (auto& c : connectors_) c->close(*net_);  // no-op for those the proxy closed
}

void NetTransport::abort() {
  aborting_.store(true, std::memory_order_release);
  for (auto& c : connectors_) c->abortFront();
}

std::string NetTransport::failure() const {
  for (const auto& c : connectors_) {
    std::string why = c->failure();
    if (!why.empty()) return "rank " + std::to_string(c->peer()) + ": " + why;
  }
  return std::string();
}

FifoSender* NetTransport::ringSend(int channel) const {
  return ringSend_[channel] ? ringSend_[channel]->frontSender() : nullptr;
}
FifoReceiver* NetTransport::ringRecv(int channel) const {
  return ringRecv_[channel] ? ringRecv_[channel]->frontReceiver() : nullptr;
}
FifoSender* NetTransport::p2pSend(int peer) const { return p2pSend_[peer] ? p2pSend_[peer]->frontSender() : nullptr; }
FifoReceiver* NetTransport::p2pRecv(int peer) const {
  return p2pRecv_[peer] ? p2pRecv_[peer]->frontReceiver() : nullptr;
}

Result<std::unique_ptr<NetTransport>> connectNetworkEdges(OobExchange& oob, ShmTransportOptions& so,
                                                          const std::vector<uint64_t>& hostOf, Deadline deadline,
                                                          std::shared_ptr<NetGpuMemory> gpu, bool sendFromBuffers) {
  const int nranks = oob.nranks(), rank = oob.rank();
  if (std::all_of(hostOf.begin(), hostOf.end(), [&](uint64_t h) { return h == hostOf[0]; }))
    return std::unique_ptr<NetTransport>();
  NetTransportOptions no;
  no.nChannels = so.nChannels;
  no.ring = so.ring;
  no.p2p = so.netP2p;
  no.ringPrev = so.ringPrev;
  no.ringNext = so.ringNext;
  no.remote.assign(nranks, false);
  for (int r = 0; r < nranks; ++r) {
    no.remote[r] = hostOf[r] != hostOf[rank];
    if (no.remote[r] && r < static_cast<int>(so.pids.size())) so.pids[r] = -1;
  }
  no.localRank = static_cast<int>(std::find(so.localRanks.begin(), so.localRanks.end(), rank) - so.localRanks.begin());
  no.abortFlag = so.abortFlag;
  // Each rank has a proxy thread besides its own: count both for the wait policy.
  const int threads = 2 * static_cast<int>(so.localRanks.size());
  no.oversubscribed = so.oversubscribed || (so.localCpus > 0 ? threads > so.localCpus : hostOversubscribed(threads));
  no.waitTimeoutMs = so.waitTimeoutMs;
  no.gpu = std::move(gpu);
  no.sendFromBuffers = sendFromBuffers;
  PLAIT_ASSIGN_OR_RETURN(std::unique_ptr<NetTransport> net, NetTransport::connect(oob, no, deadline));
  so.remoteRingSend.assign(so.nChannels, nullptr);
  so.remoteRingRecv.assign(so.nChannels, nullptr);
  for (int c = 0; c < so.nChannels; ++c) {
    so.remoteRingSend[c] = net->ringSend(c);
    so.remoteRingRecv[c] = net->ringRecv(c);
  }
  so.remoteP2pSend.assign(nranks, nullptr);
  so.remoteP2pRecv.assign(nranks, nullptr);
  for (int r = 0; r < nranks; ++r) {
    so.remoteP2pSend[r] = net->p2pSend(r);
    so.remoteP2pRecv[r] = net->p2pRecv(r);
  }
  return net;
}

}  // namespace plait
