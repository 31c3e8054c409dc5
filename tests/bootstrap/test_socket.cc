// Sockets: address parsing, interface selection rules, and the blocking
// calls' deadline / abort / closed-peer behaviour over loopback.
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "base/socket.h"

using namespace plait;
using net::InterfaceAddress;
using net::Socket;
using net::SocketAddress;

namespace {

SocketAddress addr(const char* text) {
  auto a = SocketAddress::parse(text);
  REQUIRE(a.isOk());
  return a.value();
}

std::vector<std::string> names(const std::vector<InterfaceAddress>& v) {
  std::vector<std::string> out;
  for (auto& ia : v) out.push_back(ia.name + "/" + (ia.addr.family() == AF_INET ? "4" : "6"));
  return out;
}

int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("SocketAddress parses and prints IPv4, IPv6 and host names", "[socket]") {
  CHECK(addr("1.2.3.4:5678").toString() == "1.2.3.4:5678");
  CHECK(addr("1.2.3.4:5678").port() == 5678);
  CHECK(addr("1.2.3.4:5678").family() == AF_INET);
  CHECK(addr("[::1]:5678").toString() == "[::1]:5678");
  CHECK(addr("[::1]:5678").family() == AF_INET6);
  CHECK(addr("[::1]:0").isLoopback());
  CHECK(addr("127.0.0.1:1").isLoopback());
  CHECK(addr("[fd00::2]:80").toString() == "[fd00::2]:80");
  SocketAddress local = addr("localhost:80");
  CHECK(local.isLoopback());
  CHECK(local.port() == 80);
  CHECK(addr("1.2.3.4:5") == addr("1.2.3.4:5"));
  CHECK_FALSE(addr("1.2.3.4:5") == addr("1.2.3.4:6"));
  CHECK(SocketAddress().toString() == "<invalid>");
  CHECK(SocketAddress::loopback(AF_INET6, 7).toString() == "[::1]:7");
}

// Regression (tests/fuzz, env): the storage was a union whose `{}` zeroed
// only its first, 16-byte member; under clang sin6_scope_id kept whatever
// the memory held, so "[fe80::1]:1" parsed twice compared unequal.
TEST_CASE("SocketAddress: every byte of a new address is zero; IPv6 without a scope has scope 0", "[socket]") {
  alignas(SocketAddress) unsigned char raw[sizeof(SocketAddress)];
  std::memset(raw, 0xa5, sizeof(raw));
  auto* fresh = new (raw) SocketAddress();
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(fresh->sockaddrPtr());
  for (size_t i = 0; i < sizeof(sockaddr_in6); ++i) {
    INFO("byte " << i);
    CHECK(bytes[i] == 0);
  }
  fresh->~SocketAddress();
  for (const char* text : {"[fe80:fe80::1]:1", "[::1]:5678", "[fd00::2]:80"}) {
    INFO(text);
    SocketAddress a = addr(text);
    CHECK(reinterpret_cast<const sockaddr_in6*>(a.sockaddrPtr())->sin6_scope_id == 0);
    CHECK(addr(a.toString().c_str()) == a);
    CHECK(addr(text) == a);
  }
}

TEST_CASE("SocketAddress::parse rejects malformed text with a message", "[socket]") {
  for (const char* bad : {"1.2.3.4", "::1:80", "[::1]", "[::1]80", "host:99999", ":80", "1.2.3.4:", "1.2.3.4:8x",
                          "no-such-host.invalid:80"}) {
    auto a = SocketAddress::parse(bad);
    INFO(bad);
    REQUIRE_FALSE(a.isOk());
    CHECK(a.status().code() == Code::kInvalidArgument);
    CHECK(a.status().message().find(bad) != std::string::npos);
  }
}

TEST_CASE("Interface selection follows NCCL_SOCKET_IFNAME rules", "[socket]") {
  std::vector<InterfaceAddress> all = {
      {"lo", addr("127.0.0.1:0")},       {"docker0", addr("172.17.0.1:0")}, {"eth0", addr("10.0.0.1:0")},
      {"eth1", addr("10.0.1.1:0")},      {"ib0", addr("192.168.0.1:0")},    {"lo", addr("[::1]:0")},
      {"eth0", addr("[fd00::1]:0")},     {"eth10", addr("10.0.10.1:0")},
  };
  using V = std::vector<std::string>;
  // Default: ib first.
  CHECK(names(net::selectInterfaces(all, "", AF_UNSPEC)) == V{"ib0/4"});
  // Without ib: anything but docker and lo, in list order.
  std::vector<InterfaceAddress> noIb;
  for (auto& ia : all)
    if (ia.name != "ib0") noIb.push_back(ia);
  CHECK(names(net::selectInterfaces(noIb, "", AF_UNSPEC)) == V{"eth0/4", "eth1/4", "eth0/6", "eth10/4"});
  CHECK(names(net::selectInterfaces(noIb, "", AF_INET6)) == V{"eth0/6"});
  // Only docker and lo: docker, then lo.
  std::vector<InterfaceAddress> dockerLo = {all[0], all[1], all[5]};
  CHECK(names(net::selectInterfaces(dockerLo, "", AF_UNSPEC)) == V{"docker0/4"});
  std::vector<InterfaceAddress> loOnly = {all[0], all[5]};
  CHECK(names(net::selectInterfaces(loOnly, "", AF_UNSPEC)) == V{"lo/4", "lo/6"});
  CHECK(names(net::selectInterfaces(loOnly, "", AF_INET6)) == V{"lo/6"});
  CHECK(net::selectInterfaces({}, "", AF_UNSPEC).empty());
  // Prefix lists, exclusion, exact names.
  CHECK(names(net::selectInterfaces(all, "eth", AF_INET)) == V{"eth0/4", "eth1/4", "eth10/4"});
  CHECK(names(net::selectInterfaces(all, "eth1,docker", AF_UNSPEC)) == V{"docker0/4", "eth1/4", "eth10/4"});
  CHECK(names(net::selectInterfaces(all, "=eth1", AF_UNSPEC)) == V{"eth1/4"});
  CHECK(net::selectInterfaces(all, "=eth", AF_UNSPEC).empty());
  CHECK(names(net::selectInterfaces(all, "^eth,lo,ib", AF_UNSPEC)) == V{"docker0/4"});
  CHECK(names(net::selectInterfaces(all, "^=eth1", AF_INET)) ==
        V{"lo/4", "docker0/4", "eth0/4", "ib0/4", "eth10/4"});
  // NCCL allows "name:port" items; the port does not affect selection.
  CHECK(names(net::selectInterfaces(all, "=eth0:1234", AF_INET)) == V{"eth0/4"});
  CHECK(net::selectInterfaces(all, "wlan", AF_UNSPEC).empty());
}

TEST_CASE("NCCL_SOCKET_FAMILY parsing", "[socket]") {
  CHECK(net::parseSocketFamily("").value() == AF_UNSPEC);
  CHECK(net::parseSocketFamily("AF_INET").value() == AF_INET);
  CHECK(net::parseSocketFamily("AF_INET6").value() == AF_INET6);
  CHECK(net::parseSocketFamily("inet").status().code() == Code::kInvalidArgument);
}

TEST_CASE("chooseInterfaceAddress finds an address on this host", "[socket]") {
  auto a = net::chooseInterfaceAddress();
  REQUIRE(a.isOk());
  CHECK(a->isValid());
  CHECK(a->port() == 0);
}

TEST_CASE("Sockets connect, exchange data and report closed peers", "[socket]") {
  for (int family : {AF_INET, AF_INET6}) {
    auto l = Socket::listen(SocketAddress::loopback(family, 0), 16);
    REQUIRE(l.isOk());
    REQUIRE(l->localAddress().port() != 0);
    Deadline d = Deadline::afterMs(10000);
    auto c = Socket::connect(l->localAddress(), d, nullptr);
    REQUIRE(c.isOk());
    auto s = l->accept(d, nullptr);
    REQUIRE(s.isOk());
    CHECK(s->peerAddress() == c->localAddress());
    CHECK(c->peerAddress() == l->localAddress());

    std::vector<char> big(8 << 20), got(big.size());
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
    Status sent;
    std::thread sender([&] { sent = c->sendAll(big.data(), big.size(), d, nullptr); });
    REQUIRE(s->recvAll(got.data(), got.size(), d, nullptr).isOk());
    sender.join();
    REQUIRE(sent.isOk());
    CHECK(got == big);

    std::string peer = c->localAddress().toString();
    c->close();
    char byte;
    Status st = s->recvAll(&byte, 1, d, nullptr);
    CHECK(st.code() == Code::kRemoteError);
    CHECK(st.message().find(peer) != std::string::npos);
  }
}

TEST_CASE("connect retries until the listener appears, and times out without one", "[socket]") {
  uint16_t port;
  {
    auto probe = Socket::listen(SocketAddress::loopback(AF_INET, 0), 1);
    REQUIRE(probe.isOk());
    port = probe->localAddress().port();
  }
  SocketAddress target = SocketAddress::loopback(AF_INET, port);
  auto start = Clock::now();
  auto failed = Socket::connect(target, Deadline::afterMs(300), nullptr);
  REQUIRE_FALSE(failed.isOk());
  CHECK(failed.status().code() == Code::kRemoteError);
  CHECK(failed.status().message().find(target.toString()) != std::string::npos);
  CHECK(msSince(start) >= 250);
  CHECK(msSince(start) < 2000);

  Result<Socket> listener = Status(Code::kInternalError, "unset");
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    listener = Socket::listen(target, 4);
  });
  auto c = Socket::connect(target, Deadline::afterMs(10000), nullptr);
  late.join();
  REQUIRE(listener.isOk());
  CHECK(c.isOk());
}

TEST_CASE("An abort flag set from another thread unblocks recv and accept quickly", "[socket]") {
  auto l = Socket::listen(SocketAddress::loopback(AF_INET, 0), 4);
  REQUIRE(l.isOk());
  std::atomic<uint32_t> abortFlag{0};
  std::atomic<int64_t> setAtNs{0};
  auto setLater = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    setAtNs = static_cast<int64_t>(nowNs());
    abortFlag = 7;  // any non-zero value
  };
  std::thread t1(setLater);
  auto a = l->accept(Deadline::afterMs(10000), &abortFlag);
  int64_t acceptLagMs = (static_cast<int64_t>(nowNs()) - setAtNs) / 1000000;
  t1.join();
  REQUIRE_FALSE(a.isOk());
  CHECK(a.status().code() == Code::kRemoteError);
  CHECK(a.status().message().find("aborted") != std::string::npos);
  CHECK(acceptLagMs < 200);

  abortFlag = 0;
  auto c = Socket::connect(l->localAddress(), Deadline::afterMs(10000), &abortFlag);
  REQUIRE(c.isOk());
  auto s = l->accept(Deadline::afterMs(10000), &abortFlag);
  REQUIRE(s.isOk());
  std::thread t2(setLater);
  char buf[16];
  Status st = s->recvAll(buf, sizeof(buf), Deadline::afterMs(10000), &abortFlag);
  int64_t recvLagMs = (static_cast<int64_t>(nowNs()) - setAtNs) / 1000000;
  t2.join();
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.message().find("aborted") != std::string::npos);
  CHECK(recvLagMs < 200);

  // A deadline in the past fails at once.
  Status late = s->recvAll(buf, sizeof(buf), Deadline::afterMs(0), nullptr);
  CHECK(late.code() == Code::kRemoteError);
  CHECK(late.message().find("timed out") != std::string::npos);
}
