// reserved_port.h — a loopback port reserved for a bootstrap root while a test
// runs: bound with SO_REUSEADDR but never listening, so the root (which sets
// SO_REUSEADDR too) can bind it and no other socket can take it meanwhile.
// plait-run does the same; a port found by binding port 0 and closing could be
// taken by anything before the root bound it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

namespace plait::test {

// A socket bound to loopback port `port` (0: any) with SO_REUSEADDR, or -1.
inline int bindLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (fd >= 0 && (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
                  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)) {
    ::close(fd);
    fd = -1;
  }
  return fd;
}

struct ReservedPort {
  int fd = -1;
  uint16_t port = 0;
  ReservedPort() {
    fd = bindLoopback(0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
  }
  ~ReservedPort() { ::close(fd); }
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  // Waits up to `ms` until a root could bind the port again: a root that
  // timed out closes its listener on its own (detached) thread, which can
  // still hold it when the rank that started it has returned. True once free.
  bool waitUntilFree(int ms = 5000) const {
    for (int waited = 0;; waited += 10) {
      const int probe = bindLoopback(port);
      if (probe >= 0) {
        ::close(probe);
        return true;
      }
      if (waited >= ms) return false;
      ::usleep(10000);
    }
  }

  // "127.0.0.1:<port>", the form NCCL_COMM_ID takes.
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

}  // namespace plait::test
