// rma_get.cc — the service's reads (plaitGet; rma_service.h): from a local
// peer's window through its page, from any other peer by a request its
// agent answers; and the owner's side of those answers.
#include <algorithm>
#include <cstring>

#include "base/cma.h"
#include "base/log.h"
#include "base/wait.h"
#include "rma/rma_service.h"
#include "rma/rma_wire.h"
#include "transport/net/net_plugin.h"

namespace plait::rma {

Status Service::get(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes, Deadline deadline) {
  if (aborted_.load(std::memory_order_acquire)) return remoteError("the communicator was aborted");
  if (peer == rank_) {
    std::string why = windows_->read(window, offset, dst, bytes);
    if (!why.empty()) return invalidArgument("a get from this rank's own window: " + why);
    return Status::ok();
  }
  if (local_[peer]) return getLocal(peer, window, offset, dst, bytes);
  return getRemote(peer, window, offset, dst, bytes, deadline);
}

Status Service::getLocal(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes) {
  Page& pg = peerPages_[peer];
  auto refuse = [&](const std::string& why) { return invalidUsage("a get from " + peerNames_[peer] + "'s window: " + why); };
  const int i = pg.find(window);
  if (i < 0) return refuse(missingWindow(window));
  // The writers' protocol (rma_page.h) keeps the window mapped while we read.
  WindowSlot& w = pg.window(i);
  w.writers.fetch_add(1, std::memory_order_seq_cst);
  if (w.serial.load(std::memory_order_seq_cst) != window) {
    w.writers.fetch_sub(1, std::memory_order_release);
    return refuse(missingWindow(window));
  }
  const uint64_t size = w.bytes.load(std::memory_order_acquire);
  const uint64_t base = w.base.load(std::memory_order_acquire);
  if (std::string why = rangeError(window, offset, bytes, size); !why.empty()) {
    w.writers.fetch_sub(1, std::memory_order_release);
    return refuse(why);
  }
  int err = 0;
  if (bytes == 0) {
  } else if (pids_[peer] == static_cast<int>(::getpid())) {
    std::memcpy(dst, reinterpret_cast<const char*>(base + offset), bytes);
  } else {
    err = cmaRead(pids_[peer], dst, base + offset, bytes);
  }
  releaseToOwner(peer, &w.writers);
  w.writers.fetch_sub(1, std::memory_order_release);
  if (err != 0)
    return remoteError("reading " + peerNames_[peer] + "'s window: " + cmaErrorText(pids_[peer], err));
  return Status::ok();
}

Status Service::getRemote(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes, Deadline deadline) {
  if (bytes == 0) return Status::ok();
  PendingGet pending;
  pending.dst = static_cast<char*>(dst);
  pending.bytes = bytes;
  pending.peer = peer;
  uint64_t request = 0;
  {
    std::lock_guard<std::mutex> lock(getMu_);
    request = ++nextGet_;
    gets_[request] = &pending;
  }
  auto forget = [&] {  // after this, the agent no longer writes into dst
    std::lock_guard<std::mutex> lock(getMu_);
    gets_.erase(request);
  };
  touch();
  {
    Sender& sender = *senders_[peer];
    std::lock_guard<std::mutex> lock(sender.mu);
    Status s = sender.failure.empty() ? Status::ok() : remoteError(sender.failure);
    Slots& sl = sender.slots;
    if (s.isOk() && sl.posted - sl.done == depth_) s = waitSend(peer, sender, sl.done + 1, deadline);
    if (s.isOk()) {
      Header h;
      h.kind = kGetRequest;
      h.window = window;
      h.offset = offset;
      h.total = bytes;
      h.request = request;
      char* message = slot(sl, sl.posted);
      std::memcpy(message, &h, sizeof h);
      void* req = nullptr;
      int sleepUs = 1;
      while (s.isOk() && req == nullptr) {
        if (net_->isend(sl.comm, message, static_cast<int>(kHeaderBytes), 0, sl.mhandle, &req) != 0) {
          sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
          s = remoteError(sender.failure);
        } else if (req == nullptr) {
          if (Status a = aborted(); !a.isOk()) s = remoteError("aborted during a get from " + peerNames_[peer]);
          else if (deadline.expired()) s = remoteError("timed out during a get from " + peerNames_[peer]);
          std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
          sleepUs = std::min(sleepUs * 2, 200);
        }
      }
      if (s.isOk()) sl.requests[sl.posted++ % depth_] = req;
      if (s.isOk()) s = waitSend(peer, sender, sl.posted, deadline);
    }
    if (!s.isOk()) {
      forget();
      return s;
    }
  }
  auto ready = [&] {
    std::lock_guard<std::mutex> lock(getMu_);
    return pending.done;
  };
  std::function<Status()> blocked = [&]() -> Status {
    PLAIT_RETURN_IF_ERROR(aborted());
    if (ready()) return Status::ok();  // answered in full before the peer closed (in order on its connection)
    std::lock_guard<std::mutex> lock(waitMu_);
    if (!failures_[peer].empty())
      return remoteError("a get of " + std::to_string(bytes) + " bytes from " + peerNames_[peer] +
                         " got no answer: " + failures_[peer]);
    return Status::ok();
  };
  Status s = waitFor("plaitGet", deadline, ready, blocked, {});
  forget();
  PLAIT_RETURN_IF_ERROR(s);
  if (!pending.error.empty()) return invalidUsage("a get from " + peerNames_[peer] + "'s window: " + pending.error);
  return Status::ok();
}

// A peer's read request: answered by progressReplies as the connection back
// to it has room. A read that cannot be served gets one refusal.
void Service::queueReply(int peer, const Header& h) {
  Reply r;
  r.peer = peer;
  r.request = h.request;
  r.window = h.window;
  r.offset = h.offset;
  r.bytes = h.total;
  r.error = windows_->read(h.window, h.offset, nullptr, h.total);
  replies_.push_back(std::move(r));
}

void Service::landReply(int peer, const Header& h, const char* payload) {
  {
    std::lock_guard<std::mutex> lock(getMu_);
    auto it = gets_.find(h.request);
    if (it == gets_.end()) return;  // the reader gave up (deadline, abort): drop it
    PendingGet& g = *it->second;
    if (g.peer != peer || h.offset > g.bytes || h.bytes > g.bytes - h.offset || h.total != g.bytes) {
      g.error = "a malformed answer from that rank";
      g.done = true;
    } else if (h.status != 0) {
      g.error = std::string(payload, static_cast<size_t>(h.bytes));
      g.done = true;
    } else {
      std::memcpy(g.dst + h.offset, payload, h.bytes);
      g.landed += h.bytes;
      g.done = g.landed == g.bytes;
    }
    if (!g.done) return;
  }
  page_.wakeWaiters();
}

// The network completes a send only as it is tested (the socket transport
// writes then): the agent tests its replies' sends until they are done.
bool Service::reapSends(int peer, uint64_t until) {
  Sender& sender = *senders_[peer];
  std::unique_lock<std::mutex> lock(sender.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // a put of this rank's is sending: it progresses them
  Slots& s = sender.slots;
  if (!sender.failure.empty() || s.comm == nullptr) return true;
  while (s.done < s.posted && s.done < until) {
    int done = 0, size = 0;
    if (net_->test(s.requests[s.done % depth_], &done, &size) != 0) {
      sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
      return true;
    }
    if (!done) return false;
    s.requests[s.done++ % depth_] = nullptr;
  }
  return s.done >= until;
}

Service::SendResult Service::trySend(int peer, const Header& h, const std::function<std::string(char*)>& fill,
                                     uint64_t* posted) {
  Sender& sender = *senders_[peer];
  std::unique_lock<std::mutex> lock(sender.mu, std::try_to_lock);
  if (!lock.owns_lock()) return SendResult::kBusy;  // a put of this rank's is sending
  if (!sender.failure.empty() || sender.slots.comm == nullptr) return SendResult::kFailed;
  Slots& s = sender.slots;
  while (s.done < s.posted) {  // reap what completed, without waiting
    int done = 0, size = 0;
    if (net_->test(s.requests[s.done % depth_], &done, &size) != 0) {
      sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
      return SendResult::kFailed;
    }
    if (!done) break;
    s.requests[s.done++ % depth_] = nullptr;
  }
  if (s.posted - s.done == depth_) return SendResult::kBusy;
  char* message = slot(s, s.posted);
  Header header = h;
  if (std::string why = fill(message + kHeaderBytes); !why.empty()) {  // a refusal: why, as the payload
    header.status = 1;
    header.bytes = std::min<uint64_t>(why.size(), chunkBytes_);
    std::memcpy(message + kHeaderBytes, why.data(), header.bytes);
  }
  std::memcpy(message, &header, sizeof header);
  void* request = nullptr;
  if (net_->isend(s.comm, message, static_cast<int>(kHeaderBytes + header.bytes), 0, s.mhandle, &request) != 0) {
    sender.failure = "sending to " + peerNames_[peer] + " failed: " + takeNetError();
    return SendResult::kFailed;
  }
  if (request == nullptr) return SendResult::kBusy;  // the slot is written again next time
  s.requests[s.posted++ % depth_] = request;
  *posted = s.posted;
  return SendResult::kSent;
}

// One message for each queued reply whose connection has room; a reply all
// posted stays until its connection has sent it.
bool Service::progressReplies() {
  bool moved = false;
  for (auto it = replies_.begin(); it != replies_.end();) {
    Reply& r = *it;
    if (r.posted) {
      if (reapSends(r.peer, r.lastSend)) {
        it = replies_.erase(it);
        moved = true;
      } else {
        ++it;
      }
      continue;
    }
    Header h;
    h.kind = kGetReply;
    h.request = r.request;
    h.total = r.bytes;
    h.offset = r.sent;
    SendResult result;
    if (!r.error.empty()) {
      result = trySend(r.peer, h, [&](char*) { return r.error; }, &r.lastSend);
    } else {
      h.bytes = std::min<uint64_t>(r.bytes - r.sent, chunkBytes_);
      result = trySend(r.peer, h, [&](char* payload) {
        r.error = windows_->read(r.window, r.offset + r.sent, payload, h.bytes);  // deregistered meanwhile?
        return r.error;
      }, &r.lastSend);
      if (result == SendResult::kSent) r.sent += h.bytes;
    }
    if (result == SendResult::kBusy) {
      ++it;
      continue;
    }
    moved = true;
    if (result == SendResult::kFailed) {
      it = replies_.erase(it);
      continue;
    }
    r.posted = !r.error.empty() || r.sent == r.bytes;
    ++it;
  }
  return moved;
}

}  // namespace plait::rma
