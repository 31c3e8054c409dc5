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
        // A peer with another encryption key is a misconfiguration worth a WARN.
        if (got.status().message().find("TLS handshake") != std::string::npos)
          PLAIT_WARN(kBootstrap, "%s: refused a connection: %s", who_.c_str(), got.status().message().c_str());
        else
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

// ---- GreetingThread -----------------------------------------------------------------

GreetingThread::GreetingThread(std::string who, Socket& listener, size_t greetingBytes, int64_t perConnectionMs,
                               size_t maxQueued)
    : who_(who), listener_(listener), gate_(std::move(who), greetingBytes, perConnectionMs),
      maxQueued_(std::max<size_t>(maxQueued, 1)) {
  thread_ = std::thread([this] { run(); });
}

void GreetingThread::run() {
  while (stop_.load(std::memory_order_acquire) == 0) {
    auto g = gate_.next(listener_, Deadline::afterMs(kPollSliceMs), &stop_);
    if (!g.isOk()) continue;  // a quiet slice, or stop (next() already backs off on accept failures)
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_.size() >= maxQueued_) {
      PLAIT_WARN(kBootstrap, "%s: %zu greeted connections nobody has taken; dropping the oldest, from %s",
                 who_.c_str(), ready_.size(), ready_.front().socket.peerAddress().toString().c_str());
      ready_.pop_front();
    }
    ready_.push_back(std::move(g.value()));
    cv_.notify_all();
  }
}

void GreetingThread::stop() {
  stop_.store(1, std::memory_order_release);
  std::lock_guard<std::mutex> lock(joinMu_);  // two aborters must not join at once
  if (thread_.joinable()) thread_.join();
}

Result<GreetingGate::Greeted> GreetingThread::next(Deadline deadline, const std::atomic<uint32_t>* abortFlag) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!ready_.empty()) {
      GreetingGate::Greeted g = std::move(ready_.front());
      ready_.pop_front();
      return g;
    }
    if (abortFlag != nullptr && abortFlag->load(std::memory_order_acquire) != 0)
      return remoteError(who_ + ": waiting for connections: aborted");
    if (deadline.expired()) return remoteError(who_ + ": waiting for connections: timed out");
    const int64_t ms = std::max<int64_t>(std::min(deadline.remainingMs(), kPollSliceMs), 1);
    cv_.wait_for(lock, std::chrono::milliseconds(ms));
  }
}

}  // namespace plait::net
