// socket.h — TCP sockets with deadlines and abort flags, and the choice of
// the network interface Plait's out-of-band traffic (bootstrap) uses.
//
// Every blocking call takes a Deadline and an optional abort flag. Sockets are
// non-blocking underneath and wait with poll() in slices of at most 100 ms,
// so an abort flag set from another thread (any non-zero value) is noticed
// within one slice. Failures caused by the other side (closed or reset
// connection, timeout, abort) are Code::kRemoteError and name the peer's
// address; failures of local OS calls are Code::kSystemError.
//
// A Socket is used by one thread at a time; fd()-level shutdown() from
// another thread is the one exception (it wakes a blocked call).
//
// When encryption is on (base/tls/tls.h) accept() and connect() wrap the
// connection in a TLS session taken from the setting of that moment; every
// call below then moves plaintext through it and the handshake happens in
// the first sends and receives. A peer with another key fails there, with
// kRemoteError saying so.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/tls/tls.h"
#include "plait/status.hpp"

namespace plait::net {

// An IPv4 or IPv6 address and port. Plain data (trivially copyable), so it can
// travel inside messages between processes of the same build.
class SocketAddress {
 public:
  SocketAddress() = default;  // invalid: family() == AF_UNSPEC
  // Copies an AF_INET / AF_INET6 sockaddr; anything else gives an invalid address.
  static SocketAddress fromSockaddr(const sockaddr* sa, socklen_t len);
  // Accepts "1.2.3.4:5678", "[::1]:5678", "[fe80::1%eth0]:5678" and
  // "hostname:5678" (resolved with getaddrinfo; IPv4 results preferred).
  // The port is required. Fails with kInvalidArgument naming the text.
  static Result<SocketAddress> parse(std::string_view text);
  // The wildcard address (0.0.0.0 or ::) of a family, with a port.
  static SocketAddress any(int family, uint16_t port);
  // 127.0.0.1 or ::1.
  static SocketAddress loopback(int family, uint16_t port);

  bool isValid() const { return family() == AF_INET || family() == AF_INET6; }
  int family() const { return addr_.sa.sa_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  // "1.2.3.4:5678" or "[::1]:5678"; "<invalid>" if not valid.
  std::string toString() const;
  // The address without the port ("1.2.3.4", "::1").
  std::string hostString() const;

  const sockaddr* sockaddrPtr() const { return &addr_.sa; }
  socklen_t sockaddrLen() const;

  friend bool operator==(const SocketAddress& a, const SocketAddress& b);

 private:
  // `addr_{}` zeroes only the union's first member, so that is the largest:
  // with `sa` first, clang left sin6_scope_id (bytes 24..27) indeterminate,
  // and an IPv6 address without a scope compared unequal to itself parsed
  // again, or connected with a random scope (found by tests/fuzz, env).
  union Storage {
    sockaddr_in6 v6;
    sockaddr sa;
    sockaddr_in v4;
  };
  Storage addr_{};
};

class Socket {
 public:
  Socket() = default;  // invalid (fd() == -1)
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // A listening socket bound to bindAddr (port 0 picks a free port; see
  // localAddress()). SO_REUSEADDR is set so a fixed port (NCCL_COMM_ID) can
  // be reused right after a previous job. Does not block.
  static Result<Socket> listen(const SocketAddress& bindAddr, int backlog);
  // Waits for one incoming connection on a listening socket. Blocks until a
  // connection arrives, the deadline passes or *abortFlag becomes non-zero.
  Result<Socket> accept(Deadline deadline, const std::atomic<uint32_t>* abortFlag);
  // Connects to addr, retrying (with backoff up to 100 ms) while the peer
  // refuses, resets or times out, so a client may start before its server.
  // Blocks until connected, the deadline or abort.
  static Result<Socket> connect(const SocketAddress& addr, Deadline deadline,
                                const std::atomic<uint32_t>* abortFlag);

  // Non-blocking forms for a caller that polls many sockets itself:
  // tryAccept gives an invalid Socket when no connection is pending;
  // recvSome reads what has arrived (0 when nothing has) and fails with
  // kRemoteError once the peer closed or reset the connection.
  Result<Socket> tryAccept();
  Result<size_t> recvSome(void* data, size_t bytes);

  // Sends / receives exactly `bytes` bytes. Block until done, the deadline,
  // abort, or the connection failing. On failure the stream is left in an
  // unknown position and the socket should be closed.
  Status sendAll(const void* data, size_t bytes, Deadline deadline, const std::atomic<uint32_t>* abortFlag);
  Status recvAll(void* data, size_t bytes, Deadline deadline, const std::atomic<uint32_t>* abortFlag);

  // Shuts both directions down without closing the fd: a call blocked on this
  // socket in another thread returns promptly with an error. Thread-safe.
  void shutdown();
  void close();

  bool isValid() const { return fd_ >= 0; }
  bool encrypted() const { return tls_ != nullptr; }
  int fd() const { return fd_; }
  const SocketAddress& localAddress() const { return local_; }
  // For accepted and connected sockets; invalid for listening ones.
  const SocketAddress& peerAddress() const { return peer_; }

 private:
  Socket(int fd, const SocketAddress& local, const SocketAddress& peer);
  // Wraps the connection in TLS when encryption is on.
  Status startTls(bool server);
  // ::send / ::recv, or the TLS session's equivalents.
  ssize_t ioSend(const void* data, size_t bytes);
  ssize_t ioRecv(void* data, size_t bytes);
  // What a would-block waits for: `plain` without TLS, else what TLS asks.
  short waitEvents(short plain) const;
  // The reason behind an EPROTO from the TLS session.
  std::string tlsFailure() const;

  int fd_ = -1;
  std::unique_ptr<tls::Session> tls_;
  SocketAddress local_;
  SocketAddress peer_;
};

// One address of one network interface, as getifaddrs reports it.
struct InterfaceAddress {
  std::string name;  // "eth0"
  SocketAddress addr;
};

// The up interfaces' IPv4 and IPv6 addresses in getifaddrs order (IPv6
// link-local addresses are left out: they need a scope to be reachable).
Result<std::vector<InterfaceAddress>> listInterfaces();

// NCCL_SOCKET_IFNAME semantics, applied to a given list so it can be tested:
//   ifname "eth,ib"   interfaces whose names start with "eth" or "ib";
//   ifname "^docker"  interfaces whose names do NOT start with "docker";
//   ifname "=eth0"    exactly "eth0" ("^=eth0": all but exactly "eth0");
//   ifname ""         NCCL's default: "ib*" first, then anything except
//                     "docker*" and "lo*", then "docker*", then "lo*".
// family is AF_UNSPEC (any), AF_INET or AF_INET6. Returns the matches in list
// order (empty if none).
std::vector<InterfaceAddress> selectInterfaces(const std::vector<InterfaceAddress>& interfaces,
                                               std::string_view ifname, int family);

// Parses NCCL_SOCKET_FAMILY text: "" -> AF_UNSPEC, "AF_INET", "AF_INET6".
Result<int> parseSocketFamily(std::string_view text);

// The address (port 0) that out-of-band traffic should use on this host,
// honouring NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY (PLAIT_ spellings
// first). Fails with kSystemError / kInvalidArgument if nothing matches.
Result<SocketAddress> chooseInterfaceAddress();

}  // namespace plait::net
