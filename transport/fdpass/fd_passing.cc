#include "transport/fdpass/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "base/log.h"

namespace plait::fdpass {
namespace {

constexpr uint32_t kMagic = 0x706c6664;  // "plfd"
constexpr int kSliceMs = 50;             // the longest a poll() blocks before deadline and abort are looked at
constexpr int kMessageWaitMs = 1000;     // for a connected sender's one message
constexpr size_t kKeepRefused = 4;

struct Header {
  uint32_t magic;
  int32_t rank;
  uint64_t tag;
};

// The abstract-namespace address of `rank`'s socket: "\0plait-fd-<token>-<rank>".
socklen_t addressOf(const std::string& token, int rank, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  const std::string name = "plait-fd-" + token + "-" + std::to_string(rank);
  std::memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

bool aborted(const std::atomic<uint32_t>* abort) {
  return abort != nullptr && abort->load(std::memory_order_acquire) != 0;
}

int sliceMs(const Deadline& deadline) {
  return static_cast<int>(std::min<int64_t>(kSliceMs, std::max<int64_t>(deadline.remainingMs(), 1)));
}

std::string peerName(int peer, const std::vector<int>& pids) {
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(pids[peer]) + ")";
}

}  // namespace

Result<std::unique_ptr<FdMailbox>> FdMailbox::open(const std::string& token, int rank, std::vector<int> pids) {
  if (token.empty() || token.size() > 64)
    return invalidArgument("fd passing: the token must have 1 to 64 characters (has " +
                           std::to_string(token.size()) + ")");
  if (rank < 0 || rank >= static_cast<int>(pids.size()) || pids[rank] != ::getpid())
    return invalidArgument("fd passing: rank " + std::to_string(rank) + " is not this process among " +
                           std::to_string(pids.size()) + " ranks");
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return systemError("fd passing: socket(AF_UNIX)");
  sockaddr_un a;
  const socklen_t len = addressOf(token, rank, &a);
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(s, 128) != 0) {
    Status st = errno == EADDRINUSE
                    ? invalidUsage("fd passing: rank " + std::to_string(rank) + "'s socket for token " + token +
                                   " is already taken (another group with the same token on this host?)")
                    : systemError("fd passing: bind/listen as rank " + std::to_string(rank));
    ::close(s);
    return st;
  }
  return std::unique_ptr<FdMailbox>(new FdMailbox(token, rank, std::move(pids), s));
}

FdMailbox::~FdMailbox() {
  ::close(listener_);
  for (auto& [key, fd] : ready_) ::close(fd);
}

Status FdMailbox::send(int peer, uint64_t tag, int fd, const Deadline& deadline,
                       const std::atomic<uint32_t>* abort) {
  if (peer < 0 || peer >= static_cast<int>(pids_.size()) || pids_[peer] < 0)
    return invalidArgument("fd passing: rank " + std::to_string(peer) + " is not a rank of this host");
  if (fd < 0) return invalidArgument("fd passing: no fd to send to rank " + std::to_string(peer));
  sockaddr_un a;
  const socklen_t len = addressOf(token_, peer, &a);
  auto sleep = std::chrono::milliseconds(1);
  int s = -1;
  for (;;) {  // until the peer listens
    s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return systemError("fd passing: socket(AF_UNIX)");
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) == 0) break;
    const int err = errno;
    ::close(s);
    if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN && err != EINTR) {
      errno = err;
      return systemError("fd passing: connecting to " + peerName(peer, pids_));
    }
    if (aborted(abort)) return remoteError("fd passing: aborted while waiting for " + peerName(peer, pids_));
    if (deadline.expired())
      return remoteError("fd passing: " + peerName(peer, pids_) + " did not open its socket before the deadline");
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(kSliceMs));
  }
  Header h{kMagic, rank_, tag};
  iovec iov{&h, sizeof h};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t n;
  do n = ::sendmsg(s, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  Status st = n == static_cast<ssize_t>(sizeof h) ? Status::ok()
                                                   : systemError("fd passing: sending to " + peerName(peer, pids_));
  ::close(s);  // the fd in flight stays valid: the kernel holds it until the peer receives or closes
  return st;
}

bool FdMailbox::acceptOne(int waitMs) {
  pollfd p{listener_, POLLIN, 0};
  if (::poll(&p, 1, waitMs) <= 0) return false;
  const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return false;
  auto refuse = [&](std::string why) {
    PLAIT_WARN(kP2p, "fd passing: rank %d refused a connection: %s", rank_, why.c_str());
    if (refused_.size() == kKeepRefused) refused_.erase(refused_.begin());
    refused_.push_back(std::move(why));
  };
  ucred cred{};
  socklen_t credLen = sizeof cred;
  if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0) {
    refuse(std::string("no peer credentials: ") + std::strerror(errno));
    ::close(c);
    return true;
  }
  Header h{};
  iovec iov{&h, sizeof h};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  pollfd q{c, POLLIN, 0};
  ssize_t n = -1;
  if (::poll(&q, 1, kMessageWaitMs) > 0) {
    do n = ::recvmsg(c, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
  }
  ::close(c);
  std::vector<int> fds;
  for (cmsghdr* x = CMSG_FIRSTHDR(&m); n > 0 && x != nullptr; x = CMSG_NXTHDR(&m, x)) {
    if (x->cmsg_level != SOL_SOCKET || x->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (x->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(x) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  const std::string who = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
  std::string why;
  if (n != static_cast<ssize_t>(sizeof h) || h.magic != kMagic) why = "not a Plait fd message";
  else if ((m.msg_flags & MSG_CTRUNC) != 0 || fds.size() != 1) why = std::to_string(fds.size()) + " fds attached";
  else if (h.rank < 0 || h.rank >= static_cast<int>(pids_.size()) || pids_[h.rank] < 0)
    why = "claims rank " + std::to_string(h.rank) + ", not a rank of this host";
  else if (cred.uid != ::geteuid()) why = "another user claiming rank " + std::to_string(h.rank);
  else if (cred.pid != pids_[h.rank])
    why = "claims rank " + std::to_string(h.rank) + ", which is pid " + std::to_string(pids_[h.rank]);
  else if (ready_.count({h.rank, h.tag}) != 0)
    why = "rank " + std::to_string(h.rank) + " sent tag " + std::to_string(h.tag) + " twice";
  if (!why.empty()) {
    for (int fd : fds) ::close(fd);
    refuse(who + ": " + why);
    return true;
  }
  ready_[{h.rank, h.tag}] = fds[0];
  return true;
}

Result<int> FdMailbox::receive(int peer, uint64_t tag, const Deadline& deadline,
                               const std::atomic<uint32_t>* abort) {
  if (peer < 0 || peer >= static_cast<int>(pids_.size()) || pids_[peer] < 0)
    return invalidArgument("fd passing: rank " + std::to_string(peer) + " is not a rank of this host");
  std::lock_guard<std::mutex> lock(mu_);
  for (;;) {
    auto it = ready_.find({peer, tag});
    if (it != ready_.end()) {
      const int fd = it->second;
      ready_.erase(it);
      return fd;
    }
    if (aborted(abort)) return remoteError("fd passing: aborted while waiting for " + peerName(peer, pids_));
    if (deadline.expired()) {
      std::string msg = "fd passing: rank " + std::to_string(rank_) + " got no fd from " + peerName(peer, pids_) +
                        " under tag " + std::to_string(tag) + " before the deadline";
      if (!refused_.empty()) {
        msg += "; refused:";
        for (const std::string& r : refused_) msg += " [" + r + "]";
      }
      return remoteError(msg);
    }
    while (acceptOne(0)) {  // drain what is queued before blocking again
    }
    if (ready_.count({peer, tag}) == 0) (void)acceptOne(sliceMs(deadline));
  }
}

}  // namespace plait::fdpass
