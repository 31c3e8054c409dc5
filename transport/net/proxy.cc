// proxy.cc — the network connectors' progress: what the proxy thread does
// with each connector's FIFO (see net_transport.h for the protocol).
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "transport/net/net_plugin.h"
#include "transport/net/net_transport.h"

namespace plait {
namespace {

// The low bits of a step's size word are the payload bytes; higher bits are
// flags the schedule's protocol may set (transport/fifo.h). Over a network
// only kStepLast may arrive: a single-copy descriptor names memory of a
// process on the sender's host, which means nothing here (and, with a pid
// of this host, would make this process read memory it was never offered).
constexpr uint64_t kPayloadMask = kStepPayloadMask;
constexpr uint64_t kNetFlags = kStepLast;
// Where the trailer words live inside the control page (after FifoControl).
constexpr size_t kWordsOffset = 2048;
static_assert(sizeof(FifoControl) <= kWordsOffset && kWordsOffset + 8 * kMaxFifoSteps <= kFifoControlBytes);

}  // namespace

NetConnector::NetConnector(bool sending, int peer, FifoShape shape, bool trailer, int tag, WaitContext ctx,
                           std::shared_ptr<NetGpuMemory> gpu)
    : sending_(sending), peer_(peer), shape_(shape), trailer_(trailer), tag_(tag), ctx_(ctx), gpu_(std::move(gpu)) {}

NetConnector::~NetConnector() {
  if (gpu_ && gpuSteps_.ptr) gpu_->release(gpuSteps_);
}

Status NetConnector::allocate() {
  const size_t hostBytes = gpu_ ? kFifoControlBytes : shape_.totalBytes();
  memory_.reset(static_cast<char*>(std::aligned_alloc(4096, hostBytes)));
  if (!memory_) return systemError("allocating " + std::to_string(hostBytes) + " bytes of FIFO memory");
  std::memset(memory_.get(), 0, hostBytes);
  ctrl_ = reinterpret_cast<FifoControl*>(memory_.get());
  words_ = reinterpret_cast<uint64_t*>(memory_.get() + kWordsOffset);
  void* steps = nullptr;
  if (gpu_) {
    const size_t stepsBytes = static_cast<size_t>(shape_.nSteps) * shape_.stepBytes;
    auto buffer = gpu_->allocate(stepsBytes);
    if (!buffer.isOk())
      return Status(buffer.status().code(), "GPU memory for the network FIFO steps of rank " + std::to_string(peer_) +
                                                " (" + std::to_string(stepsBytes) + " bytes, GPUDirect RDMA): " +
                                                buffer.status().message());
    gpuSteps_ = *buffer;
    steps = gpuSteps_.ptr;
    data_ = static_cast<char*>(steps);
  } else {
    data_ = memory_.get() + kFifoControlBytes;
  }
  if (sending_) frontSend_ = std::make_unique<FifoSender>(memory_.get(), shape_, &ctx_, steps);
  else frontRecv_ = std::make_unique<FifoReceiver>(memory_.get(), shape_, &ctx_, steps);
  return Status::ok();
}

Status NetConnector::attach(const PlaitNetV8& net, void* comm) {
  comm_ = comm;
  const size_t hostBytes = gpu_ ? kFifoControlBytes : shape_.totalBytes();
  if (net.regMr(comm, memory_.get(), hostBytes, kNetPtrHost, &mhandle_) != 0) {
    std::string why = takeNetError();
    return Status(Code::kSystemError, "registering " + std::to_string(hostBytes) + " bytes of FIFO memory for rank " +
                                          std::to_string(peer_) + (why.empty() ? "" : ": " + why));
  }
  if (gpu_ && net.regMrDmaBuf(comm, gpuSteps_.ptr, gpuSteps_.bytes, kNetPtrCuda, gpuSteps_.offset, gpuSteps_.fd,
                              &stepsHandle_) != 0) {
    std::string why = takeNetError();
    return Status(Code::kSystemError, "registering the " + std::to_string(gpuSteps_.bytes) +
                                          "-byte GPU step buffers for rank " + std::to_string(peer_) +
                                          " as a dmabuf (GPUDirect RDMA; PLAIT_NET_GDR=0 keeps them in host memory)" +
                                          (why.empty() ? "" : ": " + why));
  }
  return Status::ok();
}

void NetConnector::close(const PlaitNetV8& net) {
  if (comm_ == nullptr) return;
  // A schedule waiting for its steps by reference to be let go (FifoSender::
  // abandonReferences) may return now: nothing sends them any more.
  if (sending_) AtomicRef<uint32_t>(ctrl_->receiverAborted).store(1, mo::release);
  if (mhandle_) net.deregMr(comm_, mhandle_);
  if (stepsHandle_) net.deregMr(comm_, stepsHandle_);
  (sending_ ? net.closeSend : net.closeRecv)(comm_);
  comm_ = mhandle_ = stepsHandle_ = nullptr;
}

void NetConnector::abortFront() {
  if (frontSend_) frontSend_->abort();
  if (frontRecv_) frontRecv_->abort();
}

// The proxy is the other end of the schedule's FIFO: it marks that end
// aborted, with the network's reason for the schedule's error message.
void NetConnector::fail(int code) {
  std::string why = takeNetError();
  if (why.empty()) why = "network error " + std::to_string(code);
  failWith(std::move(why));
}

void NetConnector::failWith(std::string why) {
  failure_ = std::move(why);
  ctx_.peerFailure = failure_.c_str();
  AtomicRef<uint32_t>(sending_ ? ctrl_->receiverAborted : ctrl_->senderAborted).store(1, mo::release);
  wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
  wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
  failed_.store(true, std::memory_order_release);
  PLAIT_INFO(kNet, "network connection to rank %d failed: %s", peer_, failure_.c_str());
}

// The schedule's own giving up, not the network's: the connector stops, and
// failure() stays empty so that the first real failure (the peer that
// closed) is the one NetTransport::failure() names.
void NetConnector::letGo() {
  failed_.store(true, std::memory_order_release);
  AtomicRef<uint32_t>(ctrl_->receiverAborted).store(1, mo::release);
  wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
  wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
  PLAIT_INFO(kNet, "the send connector to rank %d stops: this rank gave up its steps", peer_);
}

bool NetConnector::testStep(const PlaitNetV8& net, int slot, int* size) {
  for (int part = 0; part < 2; ++part) {
    void*& req = requests_[slot][part];
    if (req == nullptr) continue;
    int done = 0, got = 0;
    if (int rc = net.test(req, &done, &got); rc != 0) {
      fail(rc);
      return false;
    }
    if (!done) return false;
    req = nullptr;
    if (part == 0) sizes_[slot] = got;  // the trailer may complete in a later call
  }
  *size = sizes_[slot];
  return true;
}

void NetConnector::progressSend(const PlaitNetV8& net, bool* moved) {
  // The schedule gave up with steps by reference posted (FifoSender::
  // abandonReferences): touch none of them again. Only connectors that take
  // references: others still send what was posted (FifoSender::abort).
  if (frontSend_->takesReferences() && AtomicRef<uint32_t>(ctrl_->senderAborted).load(mo::acquire) != 0)
    return letGo();
  const uint64_t tail = AtomicRef<uint64_t>(ctrl_->tail).load(mo::acquire);
  const int n = shape_.nSteps;
  while (posted_ < tail) {
    const int slot = static_cast<int>(posted_ % n);
    const uint64_t word = ctrl_->stepBytes[slot];
    if ((word & kPayloadMask) > shape_.stepBytes)  // never send past the step buffer
      return failWith("this rank posted a step of " + std::to_string(word & kPayloadMask) + " bytes, more than the " +
                      std::to_string(shape_.stepBytes) + "-byte step size");
    const bool byReference = (word & kStepReference) != 0;
    if (byReference && !frontSend_->takesReferences())
      return failWith("this rank posted a step by reference on a connector that takes none");
    if (partsPosted_ == 0) {
      // A step by reference is sent from where the schedule left it (this
      // process's memory, unregistered: only modules that need no
      // registration take references, NetTransport::makeConnectors).
      char* data = byReference ? reinterpret_cast<char*>(static_cast<uintptr_t>(ctrl_->source[slot])) : step(slot);
      int rc = net.isend(comm_, data, static_cast<int>(word & kPayloadMask), tag_,
                         byReference ? nullptr : stepsHandle(), &requests_[slot][0]);
      if (rc != 0) return fail(rc);
      if (requests_[slot][0] == nullptr) break;  // the network is full: test what it has (below)
      partsPosted_ = 1;
    }
    if (trailer_ && partsPosted_ == 1) {
      words_[slot] = word & ~kStepReference;
      int rc = net.isend(comm_, &words_[slot], sizeof(uint64_t), tag_, mhandle_, &requests_[slot][1]);
      if (rc != 0) return fail(rc);
      if (requests_[slot][1] == nullptr) break;
    }
    partsPosted_ = 0;
    ++posted_;
    *moved = true;
  }
  while (done_ < posted_) {
    int size = 0;
    if (!testStep(net, static_cast<int>(done_ % n), &size)) return;
    AtomicRef<uint64_t>(ctrl_->head).store(++done_, mo::release);
    wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
    *moved = true;
  }
}

void NetConnector::progressRecv(const PlaitNetV8& net, bool* moved) {
  const uint64_t head = AtomicRef<uint64_t>(ctrl_->head).load(mo::acquire);
  const int n = shape_.nSteps;
  while (posted_ - head < static_cast<uint64_t>(n)) {
    const int slot = static_cast<int>(posted_ % n);
    if (partsPosted_ == 0) {
      void* data = step(slot);
      int size = static_cast<int>(shape_.stepBytes);
      void* handle = stepsHandle();
      int rc = net.irecv(comm_, 1, &data, &size, &tag_, &handle, &requests_[slot][0]);
      if (rc != 0) return fail(rc);
      if (requests_[slot][0] == nullptr) break;  // the network is full: test what it has (below)
      partsPosted_ = 1;
    }
    if (trailer_ && partsPosted_ == 1) {
      void* data = &words_[slot];
      int size = sizeof(uint64_t);
      int rc = net.irecv(comm_, 1, &data, &size, &tag_, &mhandle_, &requests_[slot][1]);
      if (rc != 0) return fail(rc);
      if (requests_[slot][1] == nullptr) break;
    }
    partsPosted_ = 0;
    ++posted_;
    *moved = true;
  }
  while (done_ < posted_) {
    const int slot = static_cast<int>(done_ % n);
    int size = 0;
    if (!testStep(net, slot, &size)) return;
    uint64_t word = 0;
    if (!checkedWord(slot, size, &word)) return;
    if (gpu_ && size > 0 && !flushed(net, slot)) return;
    ctrl_->stepBytes[slot] = word;
    AtomicRef<uint64_t>(ctrl_->tail).store(++done_, mo::release);
    wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
    *moved = true;
  }
}

// The size word of a received step, checked: what came over the network is
// never trusted. The payload must be what arrived (at most one step) and the
// only flag a network peer may set is kStepLast. A bad word fails the
// connector, naming the peer and the word, so the schedule's receive returns
// kRemoteError instead of acting on it.
bool NetConnector::checkedWord(int slot, int size, uint64_t* word) {
  if (size < 0 || static_cast<uint64_t>(size) > shape_.stepBytes) {
    failWith("received a step of " + std::to_string(size) + " bytes, more than the " +
             std::to_string(shape_.stepBytes) + "-byte step size");
    return false;
  }
  if (!trailer_) {
    *word = static_cast<uint64_t>(size);
    return true;
  }
  const uint64_t w = words_[slot];
  if ((w & ~(kPayloadMask | kNetFlags)) != 0 || (w & kPayloadMask) != static_cast<uint64_t>(size)) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(w));
    failWith(std::string("sent an invalid step size word ") + hex + " for a step of " + std::to_string(size) +
             " bytes (only the payload size and the last-step flag may cross a network)");
    return false;
  }
  *word = w;
  return true;
}

// A step received into GPU memory is posted to the kernel only once the
// NIC's writes are visible to it: the network's iflush (NCCL's RDMA read
// through the NIC) when the plugin has one for this buffer, else the GPU's
// own flush of GPUDirect writes. testStep() already saw the receive
// complete; its size stays in sizes_[slot] while the flush is in flight.
bool NetConnector::flushed(const PlaitNetV8& net, int slot) {
  if (!flushing_) {
    void* data = step(slot);
    int size = sizes_[slot];
    void* handle = stepsHandle_;
    if (int rc = net.iflush(comm_, 1, &data, &size, &handle, &flush_); rc != 0) {
      fail(rc);
      return false;
    }
    flushing_ = true;
    if (flush_ == nullptr) {  // the network has nothing to flush: the GPU does it
      if (Status s = gpu_->flush(); !s.isOk()) {
        failWith("flushing GPUDirect RDMA writes: " + s.message());
        return false;
      }
    }
  }
  if (flush_ != nullptr) {
    int done = 0;
    if (int rc = net.test(flush_, &done, nullptr); rc != 0) {
      fail(rc);
      return false;
    }
    if (!done) return false;
    flush_ = nullptr;
  }
  flushing_ = false;
  return true;
}

bool NetConnector::drained() const {
  if (!sending_ || failed() || comm_ == nullptr) return true;
  return done_ == AtomicRef<uint64_t>(ctrl_->tail).load(mo::acquire);
}

void NetConnector::progress(const PlaitNetV8& net, bool* moved) {
  if (failed() || comm_ == nullptr) return;
  if (sending_) progressSend(net, moved);
  else progressRecv(net, moved);
}

// The proxy thread. Busy while anything moves; when nothing has moved for a
// while it yields, then sleeps in growing naps (up to kMaxNapUs), so an idle
// communicator costs almost no CPU and the first step after a long idle
// period waits at most one nap.
void NetTransport::proxyLoop() {
  constexpr int64_t kBusyNs = 200'000;  // keep polling this long after the last progress
  constexpr long kMinNapUs = 20, kMaxNapUs = 500;
  constexpr uint64_t kDrainNs = 10'000'000'000;  // longest wait for unsent steps at destruction
  log::ScopedLogRank logRank(rank_);
  uint64_t lastMove = nowNs();
  long napUs = kMinNapUs;
  uint64_t drainUntil = 0;
  for (;;) {
    if (aborting_.load(std::memory_order_acquire) ||
        (abortFlag_ && abortFlag_->load(std::memory_order_acquire) != 0))
      break;
    // Stopping (the communicator is destroyed): steps the schedule already
    // posted must still leave, or the peer would wait for them forever.
    if (stop_.load(std::memory_order_acquire)) {
      if (drainUntil == 0) drainUntil = nowNs() + kDrainNs;
      bool sent = std::all_of(connectors_.begin(), connectors_.end(), [](auto& c) { return c->drained(); });
      if (sent || nowNs() > drainUntil) break;
    }
    bool moved = false;
    for (auto& c : connectors_) c->progress(*net_, &moved);
    if (moved) {
      lastMove = nowNs();
      napUs = kMinNapUs;
      continue;
    }
    if (static_cast<int64_t>(nowNs() - lastMove) < kBusyNs) {
      sched_yield();
      continue;
    }
    timespec ts{0, napUs * 1000};
    nanosleep(&ts, nullptr);
    napUs = std::min(kMaxNapUs, napUs * 2);
  }
  // Aborting or stopping: close here, so peers see the connections go now.
  for (auto& c : connectors_) c->close(*net_);
}

}  // namespace plait
