// ib_data.cc — the verbs module's data path: registration through the
// device's RegCache, isend (RDMA write with immediate data, split over the
// QPs once the receiver's FIFO slot is there), irecv (receive WRs, then the
// FIFO slot written into the sender), test (polls the comm's CQ).
// UNVERIFIED ON HARDWARE (see ib_net.cc).
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "transport/net/ib_net_internal.h"

namespace plait::ib::mod {
namespace {

struct Registration {
  Device* dev;
  ibv_mr* mr;
  bool dmabuf = false;  // its own MR (GPU memory), not one of the cache's
};

Device* deviceOf(void* comm) { return static_cast<Comm*>(comm)->dev; }

int failComm(Comm* c, const std::string& why) {
  if (c->failure.empty()) c->failure = "NET/IB: connection to " + textOf(c->peer) + ": " + why;
  IB_WARN("%s", c->failure.c_str());
  return netr::kRemoteError;
}

// Polls the CQ once; a completion's wr_id is its Request (null for the
// receiver's FIFO writes). An error fails the comm.
int pollCq(Comm* c) {
  ibv_wc wcs[16];
  int n = ibv_poll_cq(c->cq, 16, wcs);
  if (n < 0) return failComm(c, "ibv_poll_cq failed");
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs[i];
    if (wc.status != IBV_WC_SUCCESS)
      return failComm(c, std::string("work completion error: ") + ibv_wc_status_str(wc.status) +
                             " (NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT bound how long the HCA retries)");
    auto* r = reinterpret_cast<Request*>(wc.wr_id);
    if (r == nullptr) continue;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) r->size = static_cast<int>(ntohl(wc.imm_data));
    --r->events;
  }
  return netr::kSuccess;
}

}  // namespace

int ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (type != kNetPtrHost) return netr::kInvalidArgument;
  Device* d = deviceOf(comm);
  std::lock_guard<std::mutex> lock(d->mu);
  void* mr = d->cache->acquire(data, size);
  if (mr == nullptr) {
    IB_WARN("NET/IB: ibv_reg_mr of %zu bytes on %s: %s", size, d->name.c_str(), std::strerror(errno));
    return netr::kSystemError;
  }
  *mhandle = new Registration{d, static_cast<ibv_mr*>(mr)};
  return netr::kSuccess;
}

// GPU memory (GPUDirect RDMA): ibv_reg_dmabuf_mr (rdma-core 34 and later,
// found at run time so that older libibverbs still load the module).
int ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  *mhandle = nullptr;
  if (type != kNetPtrCuda && type != kNetPtrHost) return netr::kInvalidArgument;
  const RegDmaBufMr reg = regDmaBufMr();
  if (reg == nullptr) {
    IB_WARN("NET/IB: this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later has it)");
    return netr::kInvalidUsage;
  }
  Device* d = deviceOf(comm);
  ibv_mr* mr = reg(d->pd, offset, size, reinterpret_cast<uint64_t>(data), fd,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    IB_WARN("NET/IB: ibv_reg_dmabuf_mr of %zu bytes (fd %d, offset %llu) on %s: %s", size, fd,
            static_cast<unsigned long long>(offset), d->name.c_str(), std::strerror(errno));
    return netr::kSystemError;
  }
  *mhandle = new Registration{d, mr, true};
  return netr::kSuccess;
}

int ibDeregMr(void*, void* mhandle) {
  auto* reg = static_cast<Registration*>(mhandle);
  if (reg == nullptr) return netr::kSuccess;
  if (reg->dmabuf) {
    ibv_dereg_mr(reg->mr);
    delete reg;
    return netr::kSuccess;
  }
  {
    std::lock_guard<std::mutex> lock(reg->dev->mu);
    reg->dev->cache->release(reg->mr);
  }
  delete reg;
  return netr::kSuccess;
}

// Null request (try again) until the receiver's slot for this message is
// there. Each QP writes its share with immediate data = the message size.
int ibIsend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  *request = nullptr;
  if (!c->failure.empty()) return netr::kRemoteError;
  FifoSlot& slot = c->fifo[c->seq % kFifoSlots];
  const uint64_t want = c->seq + 1;
  if (std::atomic_ref<uint64_t>(slot.seq).load(std::memory_order_acquire) != want) return netr::kSuccess;
  if (slot.tag != tag) return failComm(c, "tag mismatch: sent " + std::to_string(tag) + ", receive posted for " +
                                              std::to_string(slot.tag));
  if (static_cast<uint32_t>(size) > slot.bytes)
    return failComm(c, "message of " + std::to_string(size) + " bytes exceeds the posted receive of " +
                           std::to_string(slot.bytes) + " bytes");
  auto* r = new Request{c, c->nQps, size, false};
  const uint32_t lkey = mhandle ? static_cast<Registration*>(mhandle)->mr->lkey : 0;
  for (int q = 0; q < c->nQps; ++q) {
    const size_t off = qpOffset(static_cast<size_t>(size), q, c->nQps);
    const size_t len = qpShare(static_cast<size_t>(size), q, c->nQps);
    ibv_sge sge{reinterpret_cast<uintptr_t>(data) + off, static_cast<uint32_t>(len), lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = reinterpret_cast<uintptr_t>(r);
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(static_cast<uint32_t>(size));
    wr.wr.rdma.remote_addr = slot.addr + off;
    wr.wr.rdma.rkey = slot.rkey;
    if (ibv_post_send(c->qps[q], &wr, &bad) != 0) {
      delete r;  // QPs already posted would complete into a freed request: the comm is failed for good
      return failComm(c, std::string("ibv_post_send: ") + std::strerror(errno));
    }
  }
  ++c->seq;
  *request = r;
  return netr::kSuccess;
}

// Posts a receive WR on every QP, then writes the FIFO slot into the sender.
int ibIrecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  if (n != 1) return netr::kInvalidUsage;
  if (!c->failure.empty()) return netr::kRemoteError;
  if (c->seq - c->completed >= static_cast<uint64_t>(kFifoSlots)) return netr::kSuccess;  // FIFO full: later
  auto* r = new Request{c, c->nQps, 0, true};
  for (int q = 0; q < c->nQps; ++q) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = reinterpret_cast<uintptr_t>(r);
    if (ibv_post_recv(c->qps[q], &wr, &bad) != 0) {
      delete r;
      return failComm(c, std::string("ibv_post_recv: ") + std::strerror(errno));
    }
  }
  const int index = static_cast<int>(c->seq % kFifoSlots);
  FifoSlot& local = c->fifo[index];
  local.addr = reinterpret_cast<uintptr_t>(data[0]);
  local.rkey = mhandles && mhandles[0] ? static_cast<Registration*>(mhandles[0])->mr->rkey : 0;
  local.bytes = static_cast<uint32_t>(sizes[0]);
  local.tag = tags[0];
  local.seq = c->seq + 1;
  ibv_sge sge{reinterpret_cast<uintptr_t>(&local), sizeof(FifoSlot), c->fifoMr->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = 0;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = c->remoteFifo + static_cast<uint64_t>(index) * sizeof(FifoSlot);
  wr.wr.rdma.rkey = c->remoteRkey;
  if (ibv_post_send(c->qps[0], &wr, &bad) != 0) {
    delete r;
    return failComm(c, std::string("ibv_post_send (FIFO): ") + std::strerror(errno));
  }
  ++c->seq;
  *request = r;
  return netr::kSuccess;
}

int ibTest(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  *done = 0;
  if (r->events > 0 && pollCq(c) != netr::kSuccess) return netr::kRemoteError;
  if (r->events > 0) return c->failure.empty() ? netr::kSuccess : netr::kRemoteError;
  *done = 1;
  if (sizes) *sizes = r->size;
  if (r->recv) ++c->completed;
  delete r;
  return netr::kSuccess;
}

int ibClose(void* comm) {
  destroyComm(static_cast<Comm*>(comm));
  return netr::kSuccess;
}

}  // namespace plait::ib::mod
