// Encrypted sockets (ncclSetEncryption's TLS 1.3 PSK, base/tls/tls.h): data
// crosses intact and unreadable on the wire (a relay records the bytes),
// and a peer with another key, or none, is refused with an error saying so.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "base/tls/tls.h"

using namespace plait;
using net::Socket;
using net::SocketAddress;

namespace {

const std::string kMarker = "PLAINTEXT-MARKER-";

// A loopback TCP relay between one client and a target port that records
// what the client sends, so a test can look at the wire.
class Relay {
 public:
  explicit Relay(uint16_t targetPort) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(lfd_, 1) == 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, targetPort] { run(targetPort); });
  }
  ~Relay() {
    if (thread_.joinable()) thread_.join();
    ::close(lfd_);
  }
  uint16_t port() const { return port_; }
  // What the client sent, once both directions closed.
  const std::string& clientBytes() {
    thread_.join();
    return fromClient_;
  }

 private:
  void run(uint16_t target) {
    int c = ::accept(lfd_, nullptr, nullptr);
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target);
    if (c < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    pollfd fds[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
      if (::poll(fds, 2, 10000) <= 0) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buf[65536];
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        const int to = i == 0 ? s : c;
        if (n <= 0) {
          ::shutdown(to, SHUT_WR);
          fds[i].fd = -1;
          continue;
        }
        if (i == 0) fromClient_.append(buf, static_cast<size_t>(n));
        for (ssize_t done = 0; done < n;) {
          ssize_t w = ::write(to, buf + done, static_cast<size_t>(n - done));
          if (w <= 0) break;
          done += w;
        }
      }
    }
    ::close(c);
    ::close(s);
  }

  int lfd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::string fromClient_;
};

std::string payload(size_t bytes) {
  std::string p;
  while (p.size() < bytes) p += kMarker + std::to_string(p.size());
  p.resize(bytes);
  return p;
}

Socket listenLoopback() {
  auto l = Socket::listen(SocketAddress::loopback(AF_INET, 0), 4);
  REQUIRE(l.isOk());
  return std::move(l.value());
}

// Client (through the relay) sends `out` and reads the reply; the server
// echoes it reversed. Returns what the relay saw from the client.
std::string exchangeThroughRelay(const std::string& out) {
  Socket listener = listenLoopback();
  Relay relay(listener.localAddress().port());
  const Deadline d = Deadline::afterMs(10000);
  Status clientStatus;
  std::string reply(out.size(), '\0');
  std::thread client([&] {
    auto s = Socket::connect(SocketAddress::loopback(AF_INET, relay.port()), d, nullptr);
    if (!s.isOk()) { clientStatus = s.status(); return; }
    clientStatus = s->sendAll(out.data(), out.size(), d, nullptr);
    if (clientStatus.isOk()) clientStatus = s->recvAll(reply.data(), reply.size(), d, nullptr);
  });
  auto server = listener.accept(d, nullptr);
  REQUIRE(server.isOk());
  std::string in(out.size(), '\0');
  Status st = server->recvAll(in.data(), in.size(), d, nullptr);
  INFO(st.toString());
  REQUIRE(st.isOk());
  CHECK(in == out);
  std::string back(in.rbegin(), in.rend());
  REQUIRE(server->sendAll(back.data(), back.size(), d, nullptr).isOk());
  client.join();
  INFO(clientStatus.toString());
  REQUIRE(clientStatus.isOk());
  CHECK(reply == back);
  server->close();
  return relay.clientBytes();
}

// Runs a client and a server whose keys were fixed at connect / accept time
// and returns both sides' statuses.
std::pair<Status, Status> handshakeStatuses(const char* clientKey, const char* serverKey) {
  Socket listener = listenLoopback();
  const Deadline d = Deadline::afterMs(10000);
  if (clientKey) REQUIRE(tls::enablePsk(clientKey).isOk());
  else tls::disable();
  auto c = Socket::connect(listener.localAddress(), d, nullptr);
  REQUIRE(c.isOk());
  if (serverKey) REQUIRE(tls::enablePsk(serverKey).isOk());
  else tls::disable();
  auto s = listener.accept(d, nullptr);
  REQUIRE(s.isOk());
  tls::disable();
  Status clientStatus;
  std::thread client([&] {
    const std::string hello(64, 'h');
    clientStatus = c->sendAll(hello.data(), hello.size(), d, nullptr);
    char reply = 0;
    if (clientStatus.isOk()) clientStatus = c->recvAll(&reply, 1, d, nullptr);
  });
  char in[64];
  Status serverStatus = s->recvAll(in, sizeof in, d, nullptr);
  s->close();  // the client learns it from the alert, or from the close
  client.join();
  return {clientStatus, serverStatus};
}

}  // namespace

TEST_CASE("encrypted sockets carry data intact and unreadable on the wire", "[tls]") {
  const std::string out = payload(200 << 10);
  SECTION("plaintext: the relay sees the data (the check can fail)") {
    tls::disable();
    std::string wire = exchangeThroughRelay(out);
    CHECK(wire.find(kMarker) != std::string::npos);
  }
  SECTION("PSK: only TLS records cross") {
    REQUIRE(tls::enablePsk("correct horse battery staple").isOk());
    const uint64_t handshakes = tls::counters().handshakes.load();
    const uint64_t sealed = tls::counters().sealedBytes.load();
    std::string wire = exchangeThroughRelay(out);
    tls::disable();
    CHECK(wire.find(kMarker) == std::string::npos);
    REQUIRE(wire.size() > out.size());  // records add headers and tags
    CHECK(static_cast<unsigned char>(wire[0]) == 0x16);  // a handshake record: the ClientHello
    CHECK(tls::counters().handshakes.load() - handshakes == 2);
    CHECK(tls::counters().sealedBytes.load() - sealed == 2 * out.size());
  }
}

TEST_CASE("a peer with another key, or without encryption, is refused saying why", "[tls]") {
  SECTION("different keys") {
    auto [client, server] = handshakeStatuses("key-A", "key-B");
    INFO(client.toString() << " | " << server.toString());
    CHECK(server.code() == Code::kRemoteError);
    CHECK_THAT(server.message(), Catch::Contains("TLS handshake with 127.0.0.1:") && Catch::Contains("same key"));
    CHECK(client.code() == Code::kRemoteError);
    CHECK_THAT(client.message(), Catch::Contains("TLS handshake with 127.0.0.1:") && Catch::Contains("same key"));
  }
  SECTION("a plaintext client against an encrypted server") {
    auto [client, server] = handshakeStatuses(nullptr, "key-A");
    INFO(client.toString() << " | " << server.toString());
    CHECK(server.code() == Code::kRemoteError);
    CHECK_THAT(server.message(), Catch::Contains("TLS handshake") && Catch::Contains("same key"));
    CHECK_FALSE(client.isOk());
  }
  SECTION("an encrypted client against a plaintext server that closes") {
    auto [client, server] = handshakeStatuses("key-A", nullptr);
    INFO(client.toString() << " | " << server.toString());
    CHECK(server.isOk());  // a plaintext server reads the ClientHello as bytes
    CHECK(client.code() == Code::kRemoteError);
    CHECK_THAT(client.message(), Catch::Contains("TLS handshake") && Catch::Contains("same key"));
  }
}

TEST_CASE("encryption settings are checked before they change anything", "[tls]") {
  tls::disable();
  CHECK(tls::enablePsk("").code() == Code::kInvalidArgument);
  CHECK(tls::enablePsk(std::string(5000, 'k')).code() == Code::kInvalidArgument);
  auto ctx = tls::current();
  REQUIRE(ctx.isOk());
  CHECK(ctx.value() == nullptr);  // still off
  REQUIRE(tls::enablePsk(std::string(4096, 'k')).isOk());
  ctx = tls::current();
  REQUIRE(ctx.isOk());
  CHECK(ctx.value() != nullptr);
  tls::disable();
}
