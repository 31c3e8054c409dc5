// fuzz_greeting_gate — base/greeting_gate.h over real loopback connections:
// clients that connect, send their greeting in pieces (short, long, with
// more bytes behind it), go silent or close, in any order, against a gate
// with a small bound on pending connections. Every greeting the gate hands
// over must be exactly the first greetingBytes its client sent, on that
// client's connection, with whatever the client sent after it still unread;
// nothing may block past the per-call deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/greeting_gate.h"
#include "base/socket.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace plait;
using namespace plait::net;

struct Client {
  int fd = -1;
  uint16_t port = 0;  // its local port: how the accepted side is recognised
  std::vector<uint8_t> sent;
  bool greeted = false;
};

using Input = FuzzInput;

int connectTo(const SocketAddress& addr, uint16_t* port) {
  int fd = ::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, addr.sockaddrPtr(), addr.sockaddrLen()) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  *port = ntohs(local.sin_port);
  return fd;
}

// A greeting the gate returned: whose it is, and that it is theirs.
void checkGreeted(GreetingGate::Greeted& g, size_t greetingBytes, std::vector<Client>& clients) {
  PLAIT_FUZZ_CHECK(g.greeting.size() == greetingBytes && g.socket.isValid());
  Client* owner = nullptr;
  for (Client& c : clients)
    if (c.port == g.socket.peerAddress().port()) owner = &c;
  PLAIT_FUZZ_CHECK(owner != nullptr && !owner->greeted);
  owner->greeted = true;
  PLAIT_FUZZ_CHECK(owner->sent.size() >= greetingBytes);
  PLAIT_FUZZ_CHECK(std::memcmp(g.greeting.data(), owner->sent.data(), greetingBytes) == 0);
  // The rest of what the client sent is still on the connection (loopback
  // delivers at once), in order.
  std::vector<uint8_t> rest(owner->sent.size() - greetingBytes + 1);
  size_t got = 0;
  while (got < rest.size()) {
    auto n = g.socket.recvSome(rest.data() + got, rest.size() - got);
    if (!n.isOk() || n.value() == 0) break;
    got += n.value();
  }
  PLAIT_FUZZ_CHECK(got == owner->sent.size() - greetingBytes);
  PLAIT_FUZZ_CHECK(std::memcmp(rest.data(), owner->sent.data() + greetingBytes, got) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const size_t greetingBytes = 1 + in.byte() % 32;
  const size_t maxPending = 1 + in.byte() % 4;
  const int64_t perConnectionMs = in.byte() % 8 == 0 ? 0 : 10000;
  auto listener = Socket::listen(SocketAddress::loopback(AF_INET, 0), 64);
  if (!listener.isOk()) return 0;  // out of ports or fds: not the gate's business
  GreetingGate gate("fuzz", greetingBytes, perConnectionMs, maxPending);
  std::vector<Client> clients;

  while (in.size > 0) {
    const uint8_t op = in.byte();
    Client* c = clients.empty() ? nullptr : &clients[(op >> 2) % clients.size()];
    switch (op & 3) {
      case 0:  // a new connection
        if (clients.size() < 8) {
          Client n;
          n.fd = connectTo(listener->localAddress(), &n.port);
          if (n.fd >= 0) clients.push_back(std::move(n));
        }
        break;
      case 1: {  // a client sends some bytes
        const size_t want = in.byte() % 48;
        const size_t n = want < in.size ? want : in.size;
        if (c != nullptr && c->fd >= 0 && n > 0) {
          ssize_t sent = ::send(c->fd, in.data, n, MSG_NOSIGNAL);
          if (sent > 0) c->sent.insert(c->sent.end(), in.data, in.data + sent);
        }
        in.data += n;
        in.size -= n;
        break;
      }
      case 2:  // a client closes
        if (c != nullptr && c->fd >= 0) {
          ::close(c->fd);
          c->fd = -1;
        }
        break;
      case 3: {  // the server looks
        auto g = gate.next(*listener, Deadline::afterMs(1), nullptr);
        if (g.isOk()) checkGreeted(g.value(), greetingBytes, clients);
        else PLAIT_FUZZ_CHECK(!g.status().message().empty());
        PLAIT_FUZZ_CHECK(gate.pending() <= maxPending);
        break;
      }
    }
  }
  for (Client& c : clients)
    if (c.fd >= 0) ::close(c.fd);
  return 0;
}
