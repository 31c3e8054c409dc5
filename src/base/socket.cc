#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/config.h"
#include "base/log.h"
#include "base/tls/tls.h"

namespace plait::net {
namespace {

PLAIT_PARAM_STRING(kSocketIfname, "SOCKET_IFNAME", "",
                   "interfaces for out-of-band TCP: prefixes, ^ excludes, = exact names (default: ib*, then not "
                   "docker*/lo*)");
PLAIT_PARAM_STRING(kSocketFamily, "SOCKET_FAMILY", "", "address family for out-of-band TCP: AF_INET or AF_INET6");

// Longest single poll() so abort flags are noticed promptly.
constexpr int kPollSliceMs = 100;

bool aborted(const std::atomic<uint32_t>* flag) {
  return flag != nullptr && flag->load(std::memory_order_acquire) != 0;
}

int sliceMs(Deadline deadline) {
  return static_cast<int>(std::min<int64_t>(deadline.remainingMs(), kPollSliceMs));
}

// Waits until fd is ready for `events`. OK when ready (or in error: the
// following syscall reports it); kRemoteError on timeout or abort.
Status waitReady(int fd, short events, Deadline deadline, const std::atomic<uint32_t>* abortFlag,
                 const std::string& what) {
  for (;;) {
    if (aborted(abortFlag)) return remoteError(what + ": aborted");
    if (deadline.expired()) return remoteError(what + ": timed out");
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, std::max(sliceMs(deadline), 1));
    if (n > 0) return Status::ok();
    if (n < 0 && errno != EINTR) return systemError(what + ": poll");
  }
}

Status setNonBlockingNoDelay(int fd, bool noDelay) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return systemError("fcntl(O_NONBLOCK)");
  int one = 1;
  if (noDelay && ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
    return systemError("setsockopt(TCP_NODELAY)");
  return Status::ok();
}

SocketAddress sockName(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return SocketAddress();
  return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
}

bool isRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EHOSTUNREACH ||
         err == ENETUNREACH || err == ECONNABORTED || err == EAGAIN;
}

Result<uint16_t> parsePort(std::string_view text, std::string_view whole) {
  if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), ::isdigit))
    return invalidArgument("bad port in address \"" + std::string(whole) + "\"");
  int port = std::stoi(std::string(text));
  if (port > 65535) return invalidArgument("port out of range in address \"" + std::string(whole) + "\"");
  return static_cast<uint16_t>(port);
}

Result<SocketAddress> resolve(const std::string& host, uint16_t port, std::string_view whole) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0)
    return invalidArgument("cannot resolve \"" + std::string(whole) + "\": " + ::gai_strerror(rc));
  SocketAddress best;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    SocketAddress a = SocketAddress::fromSockaddr(ai->ai_addr, ai->ai_addrlen);
    if (!a.isValid()) continue;
    if (!best.isValid() || (best.family() == AF_INET6 && a.family() == AF_INET)) best = a;
  }
  ::freeaddrinfo(res);
  if (!best.isValid()) return invalidArgument("no IPv4/IPv6 address for \"" + std::string(whole) + "\"");
  best.setPort(port);
  return best;
}

}  // namespace

// ---- SocketAddress ------------------------------------------------------------

SocketAddress SocketAddress::fromSockaddr(const sockaddr* sa, socklen_t len) {
  SocketAddress a;
  if (sa == nullptr) return a;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    std::memcpy(&a.addr_.v4, sa, sizeof(sockaddr_in));
  } else if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    std::memcpy(&a.addr_.v6, sa, sizeof(sockaddr_in6));
  }
  return a;
}

Result<SocketAddress> SocketAddress::parse(std::string_view text) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalidArgument("expected \"[ipv6]:port\", got \"" + std::string(text) + "\"");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos)
      return invalidArgument("expected \"host:port\", got \"" + std::string(text) + "\" (no port)");
    if (text.find(':') != colon)
      return invalidArgument("IPv6 addresses need brackets, \"[addr]:port\"; got \"" + std::string(text) + "\"");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return invalidArgument("missing host in address \"" + std::string(text) + "\"");
  PLAIT_ASSIGN_OR_RETURN(uint16_t portNumber, parsePort(port, text));

  std::string hostText(host);
  std::string scope;
  if (size_t pct = hostText.find('%'); pct != std::string::npos) {
    scope = hostText.substr(pct + 1);
    hostText.resize(pct);
  }
  SocketAddress a;
  if (::inet_pton(AF_INET, hostText.c_str(), &a.addr_.v4.sin_addr) == 1) {
    a.addr_.v4.sin_family = AF_INET;
  } else if (::inet_pton(AF_INET6, hostText.c_str(), &a.addr_.v6.sin6_addr) == 1) {
    a.addr_.v6.sin6_family = AF_INET6;
    if (!scope.empty()) a.addr_.v6.sin6_scope_id = ::if_nametoindex(scope.c_str());
  } else {
    return resolve(hostText, portNumber, text);
  }
  a.setPort(portNumber);
  return a;
}

SocketAddress SocketAddress::any(int family, uint16_t port) {
  SocketAddress a;
  a.addr_.sa.sa_family = static_cast<sa_family_t>(family == AF_INET6 ? AF_INET6 : AF_INET);
  if (family == AF_INET6) a.addr_.v6.sin6_addr = in6addr_any;
  else a.addr_.v4.sin_addr.s_addr = htonl(INADDR_ANY);
  a.setPort(port);
  return a;
}

SocketAddress SocketAddress::loopback(int family, uint16_t port) {
  SocketAddress a = any(family, port);
  if (family == AF_INET6) a.addr_.v6.sin6_addr = in6addr_loopback;
  else a.addr_.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(addr_.v4.sin_port);
  if (family() == AF_INET6) return ntohs(addr_.v6.sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) addr_.v4.sin_port = htons(port);
  if (family() == AF_INET6) addr_.v6.sin6_port = htons(port);
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET) return (ntohl(addr_.v4.sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&addr_.v6.sin6_addr);
  return false;
}

socklen_t SocketAddress::sockaddrLen() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string SocketAddress::hostString() const {
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2] = {0};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &addr_.v4.sin_addr, buf, sizeof(buf));
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &addr_.v6.sin6_addr, buf, sizeof(buf));
    char ifname[IF_NAMESIZE] = {0};
    if (addr_.v6.sin6_scope_id != 0 && ::if_indextoname(addr_.v6.sin6_scope_id, ifname) != nullptr)
      return std::string(buf) + "%" + ifname;
  } else {
    return "<invalid>";
  }
  return buf;
}

std::string SocketAddress::toString() const {
  if (family() == AF_INET) return hostString() + ":" + std::to_string(port());
  if (family() == AF_INET6) return "[" + hostString() + "]:" + std::to_string(port());
  return "<invalid>";
}

bool operator==(const SocketAddress& a, const SocketAddress& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET)
    return a.addr_.v4.sin_port == b.addr_.v4.sin_port && a.addr_.v4.sin_addr.s_addr == b.addr_.v4.sin_addr.s_addr;
  if (a.family() == AF_INET6)
    return a.addr_.v6.sin6_port == b.addr_.v6.sin6_port &&
           std::memcmp(&a.addr_.v6.sin6_addr, &b.addr_.v6.sin6_addr, sizeof(in6_addr)) == 0 &&
           a.addr_.v6.sin6_scope_id == b.addr_.v6.sin6_scope_id;
  return true;
}

// ---- Socket -------------------------------------------------------------------

Socket::Socket(int fd, const SocketAddress& local, const SocketAddress& peer) : fd_(fd), local_(local), peer_(peer) {}

Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept
    : fd_(other.fd_), tls_(std::move(other.tls_)), local_(other.local_), peer_(other.peer_) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    tls_ = std::move(other.tls_);
    local_ = other.local_;
    peer_ = other.peer_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  tls_.reset();  // before the fd: it may still say close_notify
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Socket::startTls(bool server) {
  PLAIT_ASSIGN_OR_RETURN(tls_, tls::openIfEnabled(fd_, peer_.toString(), server));
  return Status::ok();
}

ssize_t Socket::ioSend(const void* data, size_t bytes) {
  return tls_ ? tls_->send(data, bytes) : ::send(fd_, data, bytes, MSG_NOSIGNAL);
}

ssize_t Socket::ioRecv(void* data, size_t bytes) { return tls_ ? tls_->recv(data, bytes) : ::recv(fd_, data, bytes, 0); }

short Socket::waitEvents(short plain) const { return tls_ ? tls_->waitEvents() : plain; }

std::string Socket::tlsFailure() const { return tls_ ? tls_->failure() : std::string(); }

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Result<Socket> Socket::listen(const SocketAddress& bindAddr, int backlog) {
  if (!bindAddr.isValid()) return invalidArgument("cannot listen on an invalid address");
  int fd = ::socket(bindAddr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return systemError("socket() for listening on " + bindAddr.toString());
  Socket s(fd, bindAddr, SocketAddress());
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) return systemError("setsockopt(SO_REUSEADDR)");
  PLAIT_RETURN_IF_ERROR(setNonBlockingNoDelay(fd, false));
  if (::bind(fd, bindAddr.sockaddrPtr(), bindAddr.sockaddrLen()) < 0)
    return systemError("bind to " + bindAddr.toString());
  if (::listen(fd, backlog) < 0) return systemError("listen on " + bindAddr.toString());
  s.local_ = sockName(fd, false);
  return s;
}

Result<Socket> Socket::accept(Deadline deadline, const std::atomic<uint32_t>* abortFlag) {
  const std::string what = "accept on " + local_.toString();
  for (;;) {
    PLAIT_RETURN_IF_ERROR(waitReady(fd_, POLLIN, deadline, abortFlag, what));
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      return systemError(what);
    }
    Socket s(fd, sockName(fd, false), sockName(fd, true));
    PLAIT_RETURN_IF_ERROR(setNonBlockingNoDelay(fd, true));
    PLAIT_RETURN_IF_ERROR(s.startTls(true));
    return s;
  }
}

Result<Socket> Socket::tryAccept() {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
      return systemError("accept on " + local_.toString());
    }
    Socket s(fd, sockName(fd, false), sockName(fd, true));
    PLAIT_RETURN_IF_ERROR(setNonBlockingNoDelay(fd, true));
    PLAIT_RETURN_IF_ERROR(s.startTls(true));
    return s;
  }
}

Result<size_t> Socket::recvSome(void* data, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ioRecv(static_cast<char*>(data) + done, bytes - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      // TLS may hold more decrypted bytes than the socket shows to poll():
      // take them now. A plain socket returns after one read, as before.
      if (tls_) continue;
      return done;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return done;
    if (done > 0) return done;  // the failure shows on the next call
    if (n < 0 && errno == EPROTO && tls_) return remoteError(tlsFailure());
    return remoteError(n == 0 ? "connection closed by peer " + peer_.toString()
                              : "connection to " + peer_.toString() + " failed: " + std::strerror(errno));
  }
  return done;
}

Result<Socket> Socket::connect(const SocketAddress& addr, Deadline deadline,
                               const std::atomic<uint32_t>* abortFlag) {
  if (!addr.isValid()) return invalidArgument("cannot connect to an invalid address");
  const std::string what = "connect to " + addr.toString();
  int backoffMs = 1;
  int lastErr = 0;
  for (;;) {
    if (aborted(abortFlag)) return remoteError(what + ": aborted");
    if (deadline.expired())
      return remoteError(what + ": timed out" +
                         (lastErr ? std::string(" (last error: ") + std::strerror(lastErr) + ")" : ""));
    int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return systemError("socket() for " + what);
    Socket s(fd, SocketAddress(), addr);
    int err = 0;
    if (::connect(fd, addr.sockaddrPtr(), addr.sockaddrLen()) < 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      Status ready = waitReady(fd, POLLOUT, deadline, abortFlag, what);
      if (!ready.isOk()) return ready;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return systemError("getsockopt(SO_ERROR)");
    }
    if (err == 0) {
      PLAIT_RETURN_IF_ERROR(setNonBlockingNoDelay(fd, true));
      s.local_ = sockName(fd, false);
      PLAIT_RETURN_IF_ERROR(s.startTls(false));
      return s;
    }
    if (!isRetryableConnectError(err)) {
      errno = err;
      return systemError(what);
    }
    lastErr = err;
    s.close();
    // Back off, but in slices so abort and the deadline stay responsive.
    int sleepMs = static_cast<int>(std::min<int64_t>(backoffMs, deadline.remainingMs()));
    if (sleepMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
    backoffMs = std::min(backoffMs * 2, kPollSliceMs);
  }
}

Status Socket::sendAll(const void* data, size_t bytes, Deadline deadline, const std::atomic<uint32_t>* abortFlag) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ioSend(p + done, bytes - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      PLAIT_RETURN_IF_ERROR(waitReady(fd_, waitEvents(POLLOUT), deadline, abortFlag,
                                      "send to " + peer_.toString() + " (" + std::to_string(done) + " of " +
                                          std::to_string(bytes) + " bytes sent)"));
      continue;
    }
    if (aborted(abortFlag)) return remoteError("send to " + peer_.toString() + ": aborted");
    if (n < 0 && errno == EPROTO && tls_) return remoteError(tlsFailure());
    return remoteError("connection to " + peer_.toString() + " failed while sending: " +
                       std::strerror(n < 0 ? errno : EPIPE));
  }
  return Status::ok();
}

Status Socket::recvAll(void* data, size_t bytes, Deadline deadline, const std::atomic<uint32_t>* abortFlag) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = ioRecv(p + done, bytes - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      PLAIT_RETURN_IF_ERROR(waitReady(fd_, waitEvents(POLLIN), deadline, abortFlag,
                                      "receive from " + peer_.toString() + " (" + std::to_string(done) + " of " +
                                          std::to_string(bytes) + " bytes received)"));
      continue;
    }
    if (aborted(abortFlag)) return remoteError("receive from " + peer_.toString() + ": aborted");
    if (n < 0 && errno == EPROTO && tls_) return remoteError(tlsFailure());
    std::string why = n == 0 ? "connection closed by peer " + peer_.toString()
                             : "connection to " + peer_.toString() + " failed: " + std::strerror(errno);
    return remoteError(why + " (" + std::to_string(done) + " of " + std::to_string(bytes) + " bytes received)");
  }
  return Status::ok();
}

// ---- Interfaces ---------------------------------------------------------------

Result<std::vector<InterfaceAddress>> listInterfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return systemError("getifaddrs");
  std::vector<InterfaceAddress> out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP)) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    SocketAddress a = SocketAddress::fromSockaddr(ifa->ifa_addr, len);
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
      continue;
    a.setPort(0);
    out.push_back({ifa->ifa_name, a});
  }
  ::freeifaddrs(list);
  return out;
}

namespace {

// One NCCL_SOCKET_IFNAME-style filter: "eth,ib", "^docker", "=eth0", "^=eth0".
bool matchesFilter(const std::string& name, std::string_view filter) {
  bool exclude = !filter.empty() && filter.front() == '^';
  if (exclude) filter.remove_prefix(1);
  bool exact = !filter.empty() && filter.front() == '=';
  if (exact) filter.remove_prefix(1);
  bool matched = false;
  while (!filter.empty() && !matched) {
    size_t comma = filter.find(',');
    std::string_view item = filter.substr(0, comma);
    // NCCL allows "eth0:port" items; the port is not used for selection.
    item = item.substr(0, item.find(':'));
    if (!item.empty()) matched = exact ? name == item : name.compare(0, item.size(), item) == 0;
    filter = comma == std::string_view::npos ? std::string_view() : filter.substr(comma + 1);
  }
  return exclude ? !matched : matched;
}

std::vector<InterfaceAddress> filterInterfaces(const std::vector<InterfaceAddress>& interfaces,
                                               std::string_view filter, int family) {
  std::vector<InterfaceAddress> out;
  for (const InterfaceAddress& ia : interfaces) {
    if (family != AF_UNSPEC && ia.addr.family() != family) continue;
    if (matchesFilter(ia.name, filter)) out.push_back(ia);
  }
  return out;
}

}  // namespace

std::vector<InterfaceAddress> selectInterfaces(const std::vector<InterfaceAddress>& interfaces,
                                               std::string_view ifname, int family) {
  if (!ifname.empty()) return filterInterfaces(interfaces, ifname, family);
  for (std::string_view filter : {"ib", "^docker,lo", "docker", "lo"}) {
    std::vector<InterfaceAddress> out = filterInterfaces(interfaces, filter, family);
    if (!out.empty()) return out;
  }
  return {};
}

Result<int> parseSocketFamily(std::string_view text) {
  if (text.empty()) return AF_UNSPEC;
  if (text == "AF_INET") return AF_INET;
  if (text == "AF_INET6") return AF_INET6;
  return invalidArgument("NCCL_SOCKET_FAMILY=\"" + std::string(text) + "\" is not AF_INET or AF_INET6");
}

Result<SocketAddress> chooseInterfaceAddress() {
  PLAIT_ASSIGN_OR_RETURN(int family, parseSocketFamily(kSocketFamily.get()));
  PLAIT_ASSIGN_OR_RETURN(std::vector<InterfaceAddress> all, listInterfaces());
  const std::string& ifname = kSocketIfname.get();
  std::vector<InterfaceAddress> chosen = selectInterfaces(all, ifname, family);
  if (chosen.empty()) {
    std::string names;
    for (const InterfaceAddress& ia : all) names += (names.empty() ? "" : ", ") + ia.name + " " + ia.addr.hostString();
    return invalidArgument("no network interface matches NCCL_SOCKET_IFNAME=\"" + ifname +
                           "\" NCCL_SOCKET_FAMILY=\"" + kSocketFamily.get() + "\" (up: " + names + ")");
  }
  // Said once per process: every communicator asks, and the answer rarely changes.
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    PLAIT_INFO(kNet, "out-of-band interface %s %s (NCCL_SOCKET_IFNAME=\"%s\")", chosen.front().name.c_str(),
               chosen.front().addr.hostString().c_str(), ifname.c_str());
  return chosen.front().addr;
}

}  // namespace plait::net
