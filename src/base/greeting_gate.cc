#include "base/greeting_gate.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "base/log.h"

namespace plait::net {
namespace {

// Longest single poll(), so abort flags are noticed promptly.
constexpr int64_t kPollSliceMs = 100;
// Connections taken from the listener per wake-up (the rest on the next one).
constexpr int kAcceptBurst = 64;

}  // namespace

GreetingGate::GreetingGate(std::string who, size_t greetingBytes, int64_t perConnectionMs, size_t maxPending)
    : who_(std::move(who)),
      greetingBytes_(greetingBytes),
      perConnectionMs_(perConnectionMs),
      maxPending_(std::max<size_t>(maxPending, 1)) {}

void GreetingGate::acceptAll(Socket& listener) {
  for (int i = 0; i < kAcceptBurst; ++i) {
    auto s = listener.tryAccept();
    if (!s.isOk()) {
      // Out of file descriptors, or the listener was shut down: not this
      // connection's fault; back off briefly instead of spinning.
      PLAIT_WARN(kBootstrap, "%s: %s", who_.c_str(), s.status().toString().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (!s->isValid()) return;
    if (pending_.size() >= maxPending_) {
      PLAIT_WARN(kBootstrap, "%s: %zu connections without a complete greeting; dropping the oldest, from %s",
                 who_.c_str(), pending_.size(), pending_.front().socket.peerAddress().toString().c_str());
      pending_.pop_front();
    }
    Pending p;
    p.socket = std::move(s.value());
    p.buffer.resize(greetingBytes_);
    p.until = Deadline::afterMs(perConnectionMs_);
    pending_.push_back(std::move(p));
  }
}

void GreetingGate::dropExpired() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!it->until.expired()) {
      ++it;
      continue;
    }
    PLAIT_WARN(kBootstrap, "%s: dropped a connection from %s: %zu of %zu greeting bytes within %lld ms",
               who_.c_str(), it->socket.peerAddress().toString().c_str(), it->received, greetingBytes_,
               static_cast<long long>(perConnectionMs_));
    it = pending_.erase(it);
  }
}

int GreetingGate::pollTimeoutMs(Deadline deadline) const {
  int64_t ms = std::min(deadline.remainingMs(), kPollSliceMs);
  for (const Pending& p : pending_) ms = std::min(ms, p.until.remainingMs());
  return static_cast<int>(std::max<int64_t>(ms, 1));
}

Result<GreetingGate::Greeted> GreetingGate::next(Socket& listener, Deadline deadline,
                                                 const std::atomic<uint32_t>* abortFlag) {
  std::vector<pollfd> fds;
  for (;;) {
    if (abortFlag != nullptr && abortFlag->load(std::memory_order_acquire) != 0)
      return remoteError(who_ + ": waiting for connections: aborted");
    if (deadline.expired()) return remoteError(who_ + ": waiting for connections: timed out");
    dropExpired();
    fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back(pollfd{p.socket.fd(), POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), pollTimeoutMs(deadline));
    if (n < 0) {
      if (errno == EINTR) continue;
      return systemError(who_ + ": poll");
    }
    if (n == 0) continue;
    // Read the pending connections first: fds[i + 1] is pending_[i] until
    // the first erase, after which the loop returns or re-polls.
    for (size_t i = 0; i < pending_.size(); ++i) {
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Pending& p = pending_[i];
      auto got = p.socket.recvSome(p.buffer.data() + p.received, greetingBytes_ - p.received);
      if (!got.isOk()) {
        PLAIT_INFO(kBootstrap, "%s: dropped a connection before its greeting: %s", who_.c_str(),
                   got.status().toString().c_str());
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
      p.received += got.value();
      if (p.received == greetingBytes_) {
        Greeted done{std::move(p.socket), std::move(p.buffer)};
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        return done;
      }
    }
    if (fds[0].revents != 0) acceptAll(listener);
  }
}

}  // namespace plait::net
