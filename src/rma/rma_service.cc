// rma_service.cc — the one-sided agent and its connections (rma_service.h).
#include "rma/rma_service.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "base/config.h"
#include "base/log.h"
#include "rma/rma_wire.h"
#include "transport/net/net_plugin.h"

namespace plait::rma {
namespace {

PLAIT_PARAM_INT(kRmaChunkBytes, "RMA_CHUNK_BYTES", 256 << 10,
                "payload bytes per one-sided message (ncclPutSignal): larger puts are split, each connection "
                "stages 4 such messages per direction");

// Waits between empty polls of the agent, doubling up to this (µs): an idle
// agent costs little CPU, a busy one never sleeps.
constexpr int kAgentMaxSleepUs = 200;

// How long the agent stays hot (yields, never sleeps) after a message or a
// local one-sided call.
constexpr int64_t kHotMs = 2;

// How long closing waits for each peer to acknowledge the goodbye.
constexpr int64_t kGoodbyeMs = 10000;

}  // namespace

Result<std::unique_ptr<Service>> Service::create(const ServiceSetup& setup, Deadline deadline) {
  std::unique_ptr<Service> s(new Service());
  s->rank_ = setup.rank;
  s->nranks_ = setup.nranks;
  s->windows_ = setup.windows;
  s->abortFlag_ = setup.abortFlag;
  s->peerNames_ = setup.peerNames;
  s->peerNames_.resize(static_cast<size_t>(setup.nranks));
  for (int r = 0; r < setup.nranks; ++r)
    if (s->peerNames_[r].empty()) s->peerNames_[r] = "rank " + std::to_string(r);
  s->chunkBytes_ = static_cast<size_t>(std::clamp<int64_t>(kRmaChunkBytes.get(), 4096, 64 << 20));
  s->messageBytes_ = kHeaderBytes + s->chunkBytes_;
  s->goodbyeAcked_ = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(setup.nranks));
  s->consumed_.assign(setup.nranks, 0);
  s->failures_.assign(setup.nranks, std::string());
  s->senders_.resize(setup.nranks);
  s->receivers_.resize(setup.nranks);
  PLAIT_ASSIGN_OR_RETURN(s->page_, Page::create(setup.nranks));
  // Published before the pages are exchanged: a peer that can put here has
  // passed that exchange, so it finds every window registered so far.
  setup.windows->attach(&s->page_);
  s->peerPages_.resize(setup.nranks);
  s->pids_.assign(setup.nranks, 0);
  s->peerPageHome_.assign(setup.nranks, 0);
  s->local_.assign(setup.nranks, 0);
  if (setup.nranks > 1) {
    PLAIT_ASSIGN_OR_RETURN(NetChoice choice, chooseNet());
    s->net_ = choice.api;
    s->dev_ = setup.localRank % choice.nDevices;
    PlaitNetProperties props{};
    if (s->net_->getProperties(s->dev_, &props) != 0)
      return systemError("network device properties: " + takeNetError());
    s->description_ = std::string("NET/") + s->net_->name + "/" + (props.name ? props.name : "?");
    PLAIT_RETURN_IF_ERROR(s->connectLocal(setup, deadline));
    PLAIT_RETURN_IF_ERROR(s->connect(setup, deadline));
    s->agent_ = std::thread([p = s.get()] { p->agentLoop(); });
  } else {
    s->description_ = "self";
  }
  int local = 0;
  for (int q = 0; q < setup.nranks; ++q) local += s->local_[q] != 0 ? 1 : 0;
  PLAIT_INFO(kNet, "rank %d: one-sided operations: %d local peer(s) through shared memory, the others via %s "
             "(%zu-byte messages)", setup.rank, local, s->description_.c_str(), s->chunkBytes_);
  return s;
}

Status Service::allocate(Slots& s, void* comm) {
  s.comm = comm;
  s.memory.assign(static_cast<size_t>(depth_) * messageBytes_, 0);
  s.requests.assign(depth_, nullptr);
  if (net_->regMr(comm, s.memory.data(), s.memory.size(), kNetPtrHost, &s.mhandle) != 0)
    return systemError("registering one-sided staging memory: " + takeNetError());
  return Status::ok();
}

void Service::release(Slots& s, bool send) {
  if (s.comm == nullptr) return;
  if (s.mhandle != nullptr) net_->deregMr(s.comm, s.mhandle);
  if (send)
    net_->closeSend(s.comm);
  else
    net_->closeRecv(s.comm);
  s.comm = nullptr;
  s.mhandle = nullptr;
}

// Every rank listens once per peer; slot [r][q] of the exchange is rank r's
// handle for peer q. Connects and accepts progress in one loop, so the
// order peers get here in does not matter.
Status Service::connect(const ServiceSetup& setup, Deadline deadline) {
  const size_t slotBytes = static_cast<size_t>(nranks_) * kNetHandleBytes;
  std::vector<char> all(slotBytes * nranks_, 0);
  std::vector<void*> listens(nranks_, nullptr);
  auto closeListens = [&] {
    for (void*& l : listens)
      if (l != nullptr) net_->closeListen(l), l = nullptr;
  };
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    if (net_->listen(dev_, &all[slotBytes * rank_ + q * kNetHandleBytes], &listens[q]) != 0) {
      closeListens();
      return systemError("one-sided operations: listening for " + peerNames_[q] + ": " + takeNetError());
    }
  }
  if (Status s = setup.oob->allGather(all.data(), slotBytes, deadline); !s.isOk()) {
    closeListens();
    return s;
  }
  std::vector<std::array<char, kNetHandleBytes>> handles(nranks_);
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    std::memcpy(handles[q].data(), &all[slotBytes * q + rank_ * kNetHandleBytes], kNetHandleBytes);
    senders_[q] = std::make_unique<Sender>();
  }
  int left = 2 * (nranks_ - 1);
  Status s;
  while (left > 0 && s.isOk()) {
    bool moved = false;
    for (int q = 0; q < nranks_ && s.isOk(); ++q) {
      if (q == rank_) continue;
      PlaitNetDeviceHandle* devHandle = nullptr;
      if (senders_[q]->slots.comm == nullptr) {
        void* comm = nullptr;
        if (net_->connect(dev_, handles[q].data(), &comm, &devHandle) != 0)
          s = remoteError("one-sided operations: connecting to " + peerNames_[q] + ": " + takeNetError());
        else if (comm != nullptr && (s = allocate(senders_[q]->slots, comm)).isOk())
          --left, moved = true;
      }
      if (s.isOk() && listens[q] != nullptr) {
        void* comm = nullptr;
        if (net_->accept(listens[q], &comm, &devHandle) != 0) {
          s = remoteError("one-sided operations: accepting the connection of " + peerNames_[q] + ": " +
                          takeNetError());
        } else if (comm != nullptr) {
          net_->closeListen(listens[q]);
          listens[q] = nullptr;
          if ((s = allocate(receivers_[q], comm)).isOk()) --left, moved = true;
        }
      }
    }
    if (!s.isOk() || moved) continue;
    if (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire) != 0)
      s = remoteError("one-sided operations: aborted while connecting");
    else if (deadline.expired())
      s = remoteError("one-sided operations: timed out connecting to every peer");
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  closeListens();
  return s;
}

// A bare header on peer's connection (the sender's lock taken; callers of
// this service are done or make progress without the agent).
bool Service::sendControl(int peer, const Header& h) {
  Sender& sender = *senders_[peer];
  std::lock_guard<std::mutex> lock(sender.mu);
  if (!sender.failure.empty() || sender.slots.comm == nullptr) return false;
  Slots& s = sender.slots;
  if (s.posted - s.done == depth_ && !waitSend(peer, sender, s.done + 1, Deadline::afterMs(kGoodbyeMs)).isOk())
    return false;
  char* message = slot(s, s.posted);
  std::memcpy(message, &h, sizeof h);
  void* request = nullptr;
  const Deadline deadline = Deadline::afterMs(kGoodbyeMs);
  while (request == nullptr && !deadline.expired()) {
    if (net_->isend(s.comm, message, static_cast<int>(kHeaderBytes), 0, s.mhandle, &request) != 0) return false;
    if (request == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (request == nullptr) return false;
  s.requests[s.posted++ % depth_] = request;
  return waitSend(peer, sender, s.posted, deadline).isOk();
}

// Closing without losing what peers still read: each peer's agent lands
// everything this rank sent before the goodbye, then acknowledges it; only
// then do the connections close (a socket closed early would take unread
// messages with it). Bounded: a dead or aborted peer is not waited for.
void Service::sayGoodbye() {
  std::vector<bool> waiting(nranks_, false);
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_ || !senders_[q]) continue;
    Header h;
    h.kind = kGoodbye;
    waiting[q] = sendControl(q, h);
  }
  const Deadline deadline = Deadline::afterMs(kGoodbyeMs);
  for (int q = 0; q < nranks_; ++q) {
    while (waiting[q] && !goodbyeAcked_[q].load(std::memory_order_acquire) && !deadline.expired() &&
           !aborted_.load(std::memory_order_acquire)) {
      {
        std::lock_guard<std::mutex> lock(waitMu_);
        // The peer's connection failed, or it is closing too (its own
        // goodbye came): it no longer needs what this rank sent.
        if (!failures_[q].empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

Service::~Service() {
  windows_->attach(nullptr);  // waits for local writers inside a window
  if (agent_.joinable() && !aborted_.load(std::memory_order_acquire) &&
      (abortFlag_ == nullptr || abortFlag_->load(std::memory_order_acquire) == 0))
    sayGoodbye();
  stop_.store(true, std::memory_order_release);
  if (agent_.joinable()) agent_.join();
  for (int q = 0; q < nranks_; ++q) {
    if (senders_[q]) {
      std::lock_guard<std::mutex> lock(senders_[q]->mu);
      release(senders_[q]->slots, true);
    }
    release(receivers_[q], false);
  }
}

void Service::abort() {
  aborted_.store(true, std::memory_order_release);
  page_.wakeWaiters();
}

// Completes sends until `until` of them are done (the sender's lock held).
Status Service::waitSend(int peer, Sender& sender, uint64_t until, Deadline deadline) {
  Slots& s = sender.slots;
  int sleepUs = 1;
  while (s.done < until) {
    int done = 0, size = 0;
    if (net_->test(s.requests[s.done % depth_], &done, &size) != 0) {
      sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
      return remoteError(sender.failure);
    }
    if (done) {
      s.requests[s.done++ % depth_] = nullptr;
      sleepUs = 1;
      continue;
    }
    if (aborted_.load(std::memory_order_acquire) ||
        (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire) != 0))
      return remoteError("aborted during a one-sided put to " + peerNames_[peer]);
    if (deadline.expired()) return remoteError("timed out during a one-sided put to " + peerNames_[peer]);
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
    sleepUs = std::min(sleepUs * 2, kAgentMaxSleepUs);
  }
  return Status::ok();
}

void Service::touch() {
  lastLocal_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

Status Service::put(int peer, uint64_t window, uint64_t offset, const void* src, uint64_t bytes, bool signal,
                    Deadline deadline) {
  if (aborted_.load(std::memory_order_acquire)) return remoteError("the communicator was aborted");
  if (peer == rank_) {
    std::string why = bytes > 0 || window != 0 ? windows_->write(window, offset, src, bytes) : std::string();
    if (!why.empty()) return invalidArgument("a put into this rank's own window: " + why);
    if (signal) page_.raise(rank_);
    return Status::ok();
  }
  if (local_[peer]) return putLocal(peer, window, offset, src, bytes, signal);
  touch();
  Sender& sender = *senders_[peer];
  std::lock_guard<std::mutex> lock(sender.mu);
  if (!sender.failure.empty()) return remoteError(sender.failure);
  Slots& s = sender.slots;
  uint64_t sent = 0;
  do {
    const uint64_t part = std::min<uint64_t>(bytes - sent, chunkBytes_);
    if (s.posted - s.done == depth_) PLAIT_RETURN_IF_ERROR(waitSend(peer, sender, s.done + 1, deadline));
    char* message = slot(s, s.posted);
    Header h;
    h.window = window;
    h.offset = offset + sent;
    h.bytes = part;
    h.total = bytes;
    h.signal = signal && sent + part == bytes ? 1 : 0;
    std::memcpy(message, &h, sizeof h);
    if (part > 0) std::memcpy(message + kHeaderBytes, static_cast<const char*>(src) + sent, part);
    void* request = nullptr;
    int sleepUs = 1;
    while (request == nullptr) {
      if (net_->isend(s.comm, message, static_cast<int>(kHeaderBytes + part), 0, s.mhandle, &request) != 0) {
        sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
        return remoteError(sender.failure);
      }
      if (request != nullptr) break;
      if (Status a = aborted(); !a.isOk()) return remoteError("aborted during a one-sided put to " + peerNames_[peer]);
      if (deadline.expired()) return remoteError("timed out during a one-sided put to " + peerNames_[peer]);
      std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
      sleepUs = std::min(sleepUs * 2, kAgentMaxSleepUs);
    }
    s.requests[s.posted++ % depth_] = request;
    sent += part;
  } while (sent < bytes);
  return waitSend(peer, sender, s.posted, deadline);
}

void Service::failReceiver(int peer, const std::string& why) {
  Slots& r = receivers_[peer];
  release(r, false);
  {
    std::lock_guard<std::mutex> lock(waitMu_);
    if (failures_[peer].empty()) failures_[peer] = why;
  }
  page_.wakeWaiters();
  PLAIT_INFO(kNet, "rank %d: one-sided connection from %s: %s", rank_, peerNames_[peer].c_str(), why.c_str());
}

void Service::land(int peer, const char* message, int size) {
  Header h;
  if (size < static_cast<int>(kHeaderBytes)) return failReceiver(peer, "a message too short for its header");
  std::memcpy(&h, message, sizeof h);
  if (h.magic != kMagic || h.kind < kPut || h.kind > kLastKind || h.bytes != static_cast<uint64_t>(size) - kHeaderBytes)
    return failReceiver(peer, "a malformed one-sided message (magic, kind or length wrong)");
  if (h.kind == kGoodbye) {
    // Messages arrive in order: all of the peer's landed. Say so, then
    // its connection closing is no failure (a wait for it still fails).
    Header ack;
    ack.kind = kGoodbyeAck;
    sendControl(peer, ack);
    return failReceiver(peer, "it destroyed its communicator");
  }
  if (h.kind == kGoodbyeAck) {
    goodbyeAcked_[peer].store(true, std::memory_order_release);
    return;
  }
  if (h.kind == kGetRequest) {
    if (h.bytes != 0) return failReceiver(peer, "a malformed read request (it carries a payload)");
    return queueReply(peer, h);
  }
  if (h.kind == kGetReply) return landReply(peer, h, message + kHeaderBytes);
  if (h.bytes > 0 || h.window != 0) {
    std::string why = windows_->write(h.window, h.offset, message + kHeaderBytes, h.bytes);
    if (!why.empty())
      return failReceiver(peer, "its put of " + std::to_string(h.total) + " bytes could not land: " + why);
  }
  if (h.signal) page_.raise(peer);
}

bool Service::pumpReceiver(int peer) {
  Slots& r = receivers_[peer];
  if (r.comm == nullptr) return false;
  while (r.posted - r.done < depth_) {
    void* buffer = slot(r, r.posted);
    int capacity = static_cast<int>(messageBytes_), tag = 0;
    void* request = nullptr;
    if (net_->irecv(r.comm, 1, &buffer, &capacity, &tag, &r.mhandle, &request) != 0) {
      failReceiver(peer, "its connection failed: " + takeNetError());
      return false;
    }
    if (request == nullptr) break;
    r.requests[r.posted++ % depth_] = request;
  }
  if (r.posted == r.done) return false;
  int done = 0, size = 0;
  if (net_->test(r.requests[r.done % depth_], &done, &size) != 0) {
    failReceiver(peer, "its connection closed or failed: " + takeNetError());
    return false;
  }
  if (!done) return false;
  r.requests[r.done % depth_] = nullptr;
  land(peer, slot(r, r.done), size);
  ++r.done;
  return true;
}

// Polls every receiving connection. Busy, it never sleeps; for kHotMs after
// the last message, or after a put or wait began on this rank, it only yields (a reply to what just landed usually
// comes within a round trip); idle longer, it sleeps in doubling steps up
// to kAgentMaxSleepUs, so an idle communicator costs little CPU.
void Service::agentLoop() {
  int sleepUs = 1;
  auto lastActive = std::chrono::steady_clock::now();
  while (!stop_.load(std::memory_order_acquire) && !aborted_.load(std::memory_order_acquire)) {
    if (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire) != 0) {
      abort();
      break;
    }
    bool moved = false;
    for (int q = 0; q < nranks_; ++q)
      if (q != rank_) moved = pumpReceiver(q) || moved;
    moved = progressReplies() || moved;
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      lastActive = now;
      sleepUs = 1;
      continue;
    }
    const auto local = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(lastLocal_.load(std::memory_order_relaxed)));
    if (now - std::max(lastActive, local) < std::chrono::milliseconds(kHotMs)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
    sleepUs = std::min(sleepUs * 2, kAgentMaxSleepUs);
  }
}

}  // namespace plait::rma
