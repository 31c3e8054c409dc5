// socket_net.cc — the built-in TCP transport behind the net interface (net.h).
//
// Devices are the interfaces NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY select
// (base/socket.h, the same rules the bootstrap uses), one device per
// interface name. A connection is PLAIT_SOCKET_NSTREAMS TCP streams
// (NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS is accepted as the NCCL
// spelling of the same count). Each message is cut into one contiguous part
// per stream (at least kMinPartBytes each, so small messages use stream 0
// only); stream 0 carries an 8-byte size header before its part, so the
// receiver learns the size first and splits the same way.
//
// Progress is made by whoever calls test() (Plait's proxy thread): every
// stream of the comm is driven with non-blocking sendmsg/recv until it would
// block. Connection setup is non-blocking too: connect() keeps its state in
// the handle (as NCCL's socket plugin does) and each stream opens with a
// 24-byte hello {magic, connection id, stream index, stream count} that the
// listener uses to assemble the streams of one connection.
//
// With encryption on (ncclSetEncryption, base/tls/tls.h) every stream is a
// TLS 1.3 session, the hello included: the handshake runs inside the first
// non-blocking sends and receives, and a peer with another key fails it.
//
// Errors name the peer's address ("connection to 10.0.0.2:41000 closed by
// the peer"), go to the logger at WARN and make the comm fail for good.
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/socket.h"
#include "base/tls/tls.h"
#include "transport/net/connect_stages.h"
#include "transport/net/net.h"
#include "transport/net/net_plugin.h"
#include "transport/net/socket_dmabuf.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kSocketStreams, "SOCKET_NSTREAMS", 0,
                "TCP streams per network connection (0: NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS, default 1)");
PLAIT_PARAM_INT(kNsocksPerThread, "NSOCKS_PERTHREAD", 1, "NCCL spelling: streams per connection per thread");
PLAIT_PARAM_INT(kSocketThreads, "SOCKET_NTHREADS", 1,
                "NCCL spelling: threads per connection (Plait drives all streams from its proxy thread)");
PLAIT_PARAM_INT(kMinPartBytes, "SOCKET_MIN_PART_BYTES", 64 << 10, "smallest part of a message given to one stream");

constexpr uint64_t kHelloMagic = 0x504c4149544e4554ULL;  // "PLAITNET"
constexpr int kMaxStreams = 16;
constexpr int kMaxRequests = 32;
constexpr int kMaxDevices = 16;

namespace netr = plait::netresult;

PlaitNetLogger gLogger = nullptr;

#define SOCK_WARN(...)                                                  \
  do {                                                                  \
    if (gLogger) gLogger(2, 0x10, __FILE__, __LINE__, __VA_ARGS__);     \
  } while (0)

struct Device {
  std::string ifname;
  net::SocketAddress addr;
  int speedMbps = 10000;
};

std::once_flag gDevicesOnce;
std::vector<Device> gDevices;

int readSpeedMbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int speed = 0;
  if (f >> speed && speed > 0) return speed;
  return 10000;  // virtual links (veth, lo) report nothing useful
}

void findDevices() {
  auto all = net::listInterfaces();
  if (!all.isOk()) return;
  auto family = net::parseSocketFamily(std::getenv("PLAIT_SOCKET_FAMILY")   ? std::getenv("PLAIT_SOCKET_FAMILY")
                                       : std::getenv("NCCL_SOCKET_FAMILY") ? std::getenv("NCCL_SOCKET_FAMILY")
                                                                            : "");
  const char* ifname = std::getenv("PLAIT_SOCKET_IFNAME");
  if (ifname == nullptr) ifname = std::getenv("NCCL_SOCKET_IFNAME");
  for (const net::InterfaceAddress& ia :
       net::selectInterfaces(all.value(), ifname ? ifname : "", family.isOk() ? family.value() : AF_UNSPEC)) {
    bool seen = std::any_of(gDevices.begin(), gDevices.end(), [&](const Device& d) { return d.ifname == ia.name; });
    if (seen || gDevices.size() >= kMaxDevices) continue;
    gDevices.push_back(Device{ia.name, ia.addr, readSpeedMbps(ia.name)});
  }
}

int streamsPerConnection() {
  int64_t n = kSocketStreams.get();
  if (n <= 0) n = kNsocksPerThread.get() * kSocketThreads.get();
  return static_cast<int>(std::clamp<int64_t>(n, 1, kMaxStreams));
}

// What travels out of band from the listener to the connector.
struct Handle {
  uint64_t magic;
  uint64_t id;  // random: matches the streams of one connection
  net::SocketAddress addr;
  int32_t nStreams;
  int32_t pad;
  struct ConnectStage* stage;  // the connector's own progress (null when it arrives)
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

struct Hello {
  uint64_t magic;
  uint64_t id;
  uint32_t stream;
  uint32_t nStreams;
};

Status setSocketOptions(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return systemError("fcntl(O_NONBLOCK)");
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) return systemError("TCP_NODELAY");
  return Status::ok();
}

int failWith(const Status& s, int code) {
  SOCK_WARN("%s", s.message().c_str());
  return code;
}

// ---- Data path ------------------------------------------------------------------

struct Comm;

struct Request {
  Comm* comm = nullptr;
  bool used = false;
  bool tested = false;
  char* data = nullptr;
  size_t capacity = 0;  // send: the size; receive: the posted size
  uint64_t header = 0;  // the message size as sent on stream 0
  bool sizeKnown = false;
  uint64_t seq = 0;  // posting order on its comm
  size_t done[kMaxStreams] = {};  // bytes moved per stream (stream 0 counts its header)
};

struct Comm {
  bool sending = false;
  int nStreams = 1;
  int fds[kMaxStreams];
  std::unique_ptr<tls::Session> tls[kMaxStreams];  // null without encryption
  net::SocketAddress peer;
  Request reqs[kMaxRequests];
  uint64_t posted = 0;  // requests posted (sequence numbers)
  uint64_t freed = 0;   // requests completed and handed back, in order
  uint64_t cursor[kMaxStreams] = {};  // per stream: the request it works on
  std::string failure;                // non-empty: the comm is dead
};

// The byte range of a message of `bytes` that stream s carries.
void partOf(size_t bytes, int nStreams, int s, size_t* begin, size_t* end) {
  const size_t minPart = static_cast<size_t>(std::max<int64_t>(kMinPartBytes.get(), 4096));
  size_t part = (bytes + nStreams - 1) / nStreams;
  part = std::max(minPart, (part + 4095) / 4096 * 4096);
  *begin = std::min(bytes, part * s);
  *end = std::min(bytes, part * (s + 1));
}

// One stream's I/O, like sendmsg / recvmsg with MSG_DONTWAIT: through its
// TLS session when it has one.
ssize_t streamSend(int fd, tls::Session* t, iovec* iov, int n) {
  if (t != nullptr) return t->sendv(iov, n);
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<size_t>(n);
  return ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t streamRecv(int fd, tls::Session* t, iovec* iov, int n) {
  if (t != nullptr) return t->recvv(iov, n);
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<size_t>(n);
  return ::recvmsg(fd, &m, MSG_DONTWAIT);
}

// Why a stream's last call failed: the peer closed (rc 0), TLS refused, or errno.
std::string streamWhy(tls::Session* t, const char* what, ssize_t rc) {
  if (rc == 0) return "closed by the peer";
  if (errno == EPROTO && t != nullptr) return t->failure();
  return std::string(what) + ": " + std::strerror(errno);
}

Status streamError(Comm& c, int s, const char* what, ssize_t rc) {
  c.failure = "connection to " + c.peer.toString() + " " + streamWhy(c.tls[s].get(), what, rc);
  return remoteError(c.failure);
}

// Moves bytes of one request on one stream; false once it would block.
// Fills *error when the stream failed.
bool moveOnStream(Comm& c, Request& r, int s, Status* error) {
  if (!c.sending && s == 0 && !r.sizeKnown) {
    while (r.done[0] < sizeof r.header) {
      iovec iov{reinterpret_cast<char*>(&r.header) + r.done[0], sizeof r.header - r.done[0]};
      ssize_t n = streamRecv(c.fds[0], c.tls[0].get(), &iov, 1);
      if (n > 0) { r.done[0] += static_cast<size_t>(n); continue; }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
      *error = streamError(c, 0, "recv", n);
      return false;
    }
    if (r.header > r.capacity) {
      c.failure = "message of " + std::to_string(r.header) + " bytes from " + c.peer.toString() +
                  " exceeds the posted receive of " + std::to_string(r.capacity) + " bytes";
      *error = remoteError(c.failure);
      return false;
    }
    r.sizeKnown = true;
  }
  if (!c.sending && !r.sizeKnown) return false;  // stream s > 0 waits for stream 0's header
  size_t begin, end;
  partOf(r.header, c.nStreams, s, &begin, &end);
  const size_t hdr = s == 0 ? sizeof r.header : 0;
  const size_t total = hdr + (end - begin);
  while (r.done[s] < total) {
    iovec iov[2];
    int nIov = 0;
    if (r.done[s] < hdr) iov[nIov++] = {reinterpret_cast<char*>(&r.header) + r.done[s], hdr - r.done[s]};
    const size_t dataDone = r.done[s] > hdr ? r.done[s] - hdr : 0;
    if (end - begin > dataDone) iov[nIov++] = {r.data + begin + dataDone, end - begin - dataDone};
    ssize_t n = c.sending ? streamSend(c.fds[s], c.tls[s].get(), iov, nIov)
                          : streamRecv(c.fds[s], c.tls[s].get(), iov, nIov);
    if (n > 0) { r.done[s] += static_cast<size_t>(n); continue; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    *error = streamError(c, s, c.sending ? "send" : "recv", n);
    return false;
  }
  return true;
}

Status progress(Comm& c) {
  if (!c.failure.empty()) return remoteError(c.failure);
  for (int s = 0; s < c.nStreams; ++s) {
    Status error;
    while (c.cursor[s] < c.posted) {
      Request& r = c.reqs[c.cursor[s] % kMaxRequests];
      if (!moveOnStream(c, r, s, &error)) break;
      ++c.cursor[s];
    }
    if (!error.isOk()) return error;
  }
  return Status::ok();
}

int post(Comm& c, void* data, size_t bytes, void** request) {
  *request = nullptr;
  if (!c.failure.empty()) return failWith(remoteError(c.failure), netr::kRemoteError);
  if (c.posted - c.freed >= kMaxRequests) return netr::kSuccess;  // full: try again later
  Request& r = c.reqs[c.posted % kMaxRequests];
  r = Request{};
  r.comm = &c;
  r.used = true;
  r.data = static_cast<char*>(data);
  r.capacity = bytes;
  r.header = c.sending ? bytes : 0;
  r.sizeKnown = c.sending;
  r.seq = c.posted++;
  *request = &r;
  return netr::kSuccess;
}

// Where the bytes of [data, data + bytes) are: through the dmabuf's mapping
// when registered as one (socket_dmabuf.h), else at data itself.
Result<void*> reach(void* mhandle, void* data, size_t bytes) {
  if (mhandle == nullptr) return data;
  char* at = socket_dmabuf::translate(mhandle, data, bytes);
  if (at == nullptr) return invalidArgument(std::to_string(bytes) + " bytes outside their dmabuf registration");
  return static_cast<void*>(at);
}

int sockIsend(void* comm, void* data, int size, int /*tag*/, void* mhandle, void** request) {
  auto at = reach(mhandle, data, static_cast<size_t>(size));
  if (!at.isOk()) return failWith(at.status(), netr::kInvalidArgument);
  return post(*static_cast<Comm*>(comm), *at, static_cast<size_t>(size), request);
}

int sockIrecv(void* comm, int n, void** data, int* sizes, int* /*tags*/, void** mhandles, void** request) {
  if (n != 1) return failWith(invalidUsage("grouped receives are not supported (n=" + std::to_string(n) + ")"),
                              netr::kInvalidUsage);
  auto at = reach(mhandles ? mhandles[0] : nullptr, data[0], static_cast<size_t>(sizes[0]));
  if (!at.isOk()) return failWith(at.status(), netr::kInvalidArgument);
  return post(*static_cast<Comm*>(comm), *at, static_cast<size_t>(sizes[0]), request);
}

int sockTest(void* request, int* done, int* sizes) {
  Request& r = *static_cast<Request*>(request);
  Comm& c = *r.comm;
  *done = 0;
  Status s = progress(c);
  bool complete = true;
  for (int st = 0; st < c.nStreams; ++st) complete = complete && c.cursor[st] > r.seq;
  // A failure after this request's bytes (the peer closed once it had sent
  // them all) is reported by the requests it hit, not by this one.
  if (!complete) return s.isOk() ? netr::kSuccess : failWith(s, netr::kRemoteError);
  *done = 1;
  if (sizes) *sizes = static_cast<int>(r.header);
  r.used = false;
  while (c.freed < c.posted && !c.reqs[c.freed % kMaxRequests].used) ++c.freed;
  return netr::kSuccess;
}

int closeComm(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return netr::kSuccess;
  for (int s = 0; s < c->nStreams; ++s) {
    c->tls[s].reset();  // before its fd: the number may be reused at once
    if (c->fds[s] >= 0) ::close(c->fds[s]);
  }
  delete c;
  return netr::kSuccess;
}

// ---- Connection setup -------------------------------------------------------------

struct ListenComm {
  int fd = -1;
  uint64_t id = 0;
  int nStreams = 1;
  struct Pending {
    int fd;
    Hello hello;
    size_t got;
    net::SocketAddress peer;
    std::unique_ptr<tls::Session> tls;
  };
  std::vector<Pending> pending;
  int fds[kMaxStreams];
  std::unique_ptr<tls::Session> tls[kMaxStreams];
  int have = 0;
  net::SocketAddress peer;
};

struct ConnectStage {
  uint64_t id = 0;    // the handle's: a stage only ever advances the connection it was made for
  int nStreams = 0;
  int fds[kMaxStreams];
  bool connected[kMaxStreams] = {};
  size_t helloSent[kMaxStreams] = {};
  std::unique_ptr<tls::Session> tls[kMaxStreams];

  void closeAll(int n) {
    for (int k = 0; k < n; ++k) {
      tls[k].reset();
      if (fds[k] >= 0) ::close(fds[k]);
    }
  }
};

// The connector's stages this process made and has not finished
// (connect_stages.h: the handle that holds one is a copy of a peer's bytes).
// Never destroyed: a non-blocking init may still be connecting at exit.
net::StageRegistry<ConnectStage>& gStages = *new net::StageRegistry<ConnectStage>();

int sockListen(int dev, void* handleBytes, void** listenComm) {
  *listenComm = nullptr;
  if (dev < 0 || dev >= static_cast<int>(gDevices.size())) return netr::kInvalidArgument;
  net::SocketAddress bindAddr = gDevices[dev].addr;
  bindAddr.setPort(0);
  int fd = ::socket(bindAddr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return failWith(systemError("socket()"), netr::kSystemError);
  if (::bind(fd, bindAddr.sockaddrPtr(), bindAddr.sockaddrLen()) != 0 || ::listen(fd, 64) != 0) {
    Status s = systemError("bind/listen on " + bindAddr.toString());
    ::close(fd);
    return failWith(s, netr::kSystemError);
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  auto* l = new ListenComm();
  l->fd = fd;
  l->id = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  l->nStreams = streamsPerConnection();
  std::fill(std::begin(l->fds), std::end(l->fds), -1);
  Handle h;
  std::memset(static_cast<void*>(&h), 0, sizeof h);  // padding travels to the peer too: zero it
  h.magic = kHelloMagic;
  h.id = l->id;
  h.addr = net::SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  h.nStreams = l->nStreams;
  std::memset(handleBytes, 0, kNetHandleBytes);
  std::memcpy(handleBytes, &h, sizeof h);
  *listenComm = l;
  return netr::kSuccess;
}

Comm* newComm(bool sending, int nStreams, const int* fds, std::unique_ptr<tls::Session>* sessions,
              const net::SocketAddress& peer) {
  auto* c = new Comm();
  c->sending = sending;
  c->nStreams = nStreams;
  std::copy(fds, fds + nStreams, c->fds);
  for (int s = 0; s < nStreams; ++s) c->tls[s] = std::move(sessions[s]);
  c->peer = peer;
  return c;
}

// Starts or continues one stream's connection; true once its hello is sent.
Result<bool> advanceConnect(ConnectStage& st, const Handle& h, int s) {
  if (!st.connected[s]) {
    pollfd p{st.fds[s], POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(st.fds[s], SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return remoteError("connecting to " + h.addr.toString() + ": " + std::strerror(err));
    }
    st.connected[s] = true;
    PLAIT_ASSIGN_OR_RETURN(st.tls[s], tls::openIfEnabled(st.fds[s], h.addr.toString(), false));
  }
  Hello hello{kHelloMagic, h.id, static_cast<uint32_t>(s), static_cast<uint32_t>(h.nStreams)};
  while (st.helloSent[s] < sizeof hello) {
    iovec iov{reinterpret_cast<char*>(&hello) + st.helloSent[s], sizeof hello - st.helloSent[s]};
    ssize_t n = streamSend(st.fds[s], st.tls[s].get(), &iov, 1);
    if (n > 0) { st.helloSent[s] += static_cast<size_t>(n); continue; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    return remoteError("sending the hello to " + h.addr.toString() + ": " + streamWhy(st.tls[s].get(), "send", n));
  }
  return true;
}

int sockConnect(int /*dev*/, void* handleBytes, void** sendComm, PlaitNetDeviceHandle** /*devComm*/) {
  *sendComm = nullptr;
  Handle* h = static_cast<Handle*>(handleBytes);
  if (h->magic != kHelloMagic || h->nStreams < 1 || h->nStreams > kMaxStreams)
    return failWith(invalidArgument("not a socket transport handle"), netr::kInvalidArgument);
  if (h->stage != nullptr &&
      !gStages.owns(h->stage, [&](const ConnectStage& st) { return st.id == h->id && st.nStreams == h->nStreams; }))
    return failWith(invalidArgument("socket transport handle carries connector state this process did not make "
                                    "(a listener's handle arrives with it zeroed)"),
                    netr::kInvalidArgument);
  if (h->stage == nullptr) {
    auto* st = new ConnectStage();
    st->id = h->id;
    st->nStreams = h->nStreams;
    for (int s = 0; s < h->nStreams; ++s) {
      st->fds[s] = ::socket(h->addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
      Status opts = st->fds[s] < 0 ? systemError("socket()") : setSocketOptions(st->fds[s]);
      if (opts.isOk() && ::connect(st->fds[s], h->addr.sockaddrPtr(), h->addr.sockaddrLen()) != 0 &&
          errno != EINPROGRESS)
        opts = remoteError("connecting to " + h->addr.toString() + ": " + std::strerror(errno));
      if (!opts.isOk()) {
        st->closeAll(s + 1);
        delete st;
        return failWith(opts, netr::kRemoteError);
      }
    }
    h->stage = gStages.adopt(st);
  }
  ConnectStage* st = h->stage;
  bool all = true;
  for (int s = 0; s < h->nStreams; ++s) {
    Result<bool> r = advanceConnect(*st, *h, s);
    if (!r.isOk()) {
      st->closeAll(h->nStreams);
      gStages.drop(st);
      h->stage = nullptr;
      return failWith(r.takeStatus(), netr::kRemoteError);
    }
    all = all && r.value();
  }
  if (!all) return netr::kSuccess;
  *sendComm = newComm(true, h->nStreams, st->fds, st->tls, h->addr);
  gStages.drop(st);
  h->stage = nullptr;
  return netr::kSuccess;
}

// Reads what is there of one pending stream's hello; true when it is complete.
bool readHello(ListenComm::Pending& p) {
  while (p.got < sizeof p.hello) {
    iovec iov{reinterpret_cast<char*>(&p.hello) + p.got, sizeof p.hello - p.got};
    ssize_t n = streamRecv(p.fd, p.tls.get(), &iov, 1);
    if (n > 0) { p.got += static_cast<size_t>(n); continue; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    // A stranger, a peer with another key, or a connection that died: forget it.
    if (n < 0 && errno == EPROTO && p.tls) SOCK_WARN("%s", p.tls->failure().c_str());
    p.tls.reset();
    ::close(p.fd);
    p.fd = -1;
    return false;
  }
  return true;
}

int sockAccept(void* listenComm, void** recvComm, PlaitNetDeviceHandle** /*devComm*/) {
  *recvComm = nullptr;
  ListenComm& l = *static_cast<ListenComm*>(listenComm);
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(l.fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) break;
    if (!setSocketOptions(fd).isOk()) { ::close(fd); continue; }
    net::SocketAddress peer = net::SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
    auto session = tls::openIfEnabled(fd, peer.toString(), true);
    if (!session.isOk()) {
      ::close(fd);
      return failWith(session.status(), netr::kSystemError);
    }
    l.pending.push_back({fd, {}, 0, peer, std::move(session.value())});
  }
  for (ListenComm::Pending& p : l.pending) {
    if (p.fd < 0 || !readHello(p)) continue;
    const Hello& h = p.hello;
    if (h.magic != kHelloMagic || h.id != l.id || h.stream >= static_cast<uint32_t>(l.nStreams) ||
        l.fds[h.stream] >= 0) {
      p.tls.reset();
      ::close(p.fd);
    } else {
      l.fds[h.stream] = p.fd;
      l.tls[h.stream] = std::move(p.tls);
      l.peer = p.peer;
      ++l.have;
    }
    p.fd = -1;
  }
  std::erase_if(l.pending, [](const ListenComm::Pending& p) { return p.fd < 0; });
  if (l.have < l.nStreams) return netr::kSuccess;
  *recvComm = newComm(false, l.nStreams, l.fds, l.tls, l.peer);
  std::fill(std::begin(l.fds), std::end(l.fds), -1);
  l.have = 0;
  return netr::kSuccess;
}

int sockCloseListen(void* listenComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (l == nullptr) return netr::kSuccess;
  for (auto& p : l->pending) {
    p.tls.reset();
    if (p.fd >= 0) ::close(p.fd);
  }
  for (int s = 0; s < kMaxStreams; ++s) {
    l->tls[s].reset();
    if (l->fds[s] >= 0) ::close(l->fds[s]);
  }
  ::close(l->fd);
  delete l;
  return netr::kSuccess;
}

// ---- Devices and the table ----------------------------------------------------------

int sockInit(PlaitNetLogger logger) {
  gLogger = logger;
  std::call_once(gDevicesOnce, findDevices);
  return netr::kSuccess;
}

int sockDevices(int* ndev) {
  *ndev = static_cast<int>(gDevices.size());
  return netr::kSuccess;
}

int sockGetProperties(int dev, PlaitNetProperties* props) {
  if (dev < 0 || dev >= static_cast<int>(gDevices.size())) return netr::kInvalidArgument;
  std::memset(props, 0, sizeof *props);
  props->name = const_cast<char*>(gDevices[dev].ifname.c_str());
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = kNetPtrHost | (socket_dmabuf::enabled() ? kNetPtrCuda | kNetPtrDmaBuf : 0);
  props->regIsGlobal = 1;
  props->speed = gDevices[dev].speedMbps;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = kNetDeviceHost;
  return netr::kSuccess;
}

int sockRegMr(void*, void*, size_t, int type, void** mhandle) {
  *mhandle = nullptr;
  return type == kNetPtrHost ? netr::kSuccess : netr::kInvalidArgument;  // sockets need no registration
}
// GPU memory only as a dmabuf, and only when standing in for a GPUDirect
// NIC (PLAIT_NET_SOCKET_DMABUF=1, socket_dmabuf.h).
int sockRegMrDmaBuf(void*, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  *mhandle = nullptr;
  if (!socket_dmabuf::enabled())
    return failWith(invalidUsage("the socket transport registers no dmabufs (PLAIT_NET_SOCKET_DMABUF=1 emulates it)"),
                    netr::kInvalidUsage);
  if (type != kNetPtrCuda && type != kNetPtrHost)
    return failWith(invalidArgument("dmabuf registration of pointer type " + std::to_string(type)),
                    netr::kInvalidArgument);
  Status s = socket_dmabuf::registerDmaBuf(data, size, offset, fd, mhandle);
  if (s.isOk()) return netr::kSuccess;
  return failWith(s, s.code() == Code::kInvalidArgument ? netr::kInvalidArgument : netr::kSystemError);
}
int sockDeregMr(void*, void* mhandle) {
  if (mhandle != nullptr) socket_dmabuf::deregister(mhandle);
  return netr::kSuccess;
}
int sockIflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return netr::kSuccess;
}
int sockGetDeviceMr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return netr::kSuccess;
}
int sockIrecvConsumed(void*, int, void*) { return netr::kSuccess; }

const PlaitNetV8 kSocketNet = {
    "Socket",        sockInit,  sockDevices,    sockGetProperties, sockListen,     sockConnect,    sockAccept,
    sockRegMr,       sockRegMrDmaBuf, sockDeregMr, sockIsend,      sockIrecv,      sockIflush,     sockTest,
    closeComm,       closeComm, sockCloseListen, sockGetDeviceMr,  sockIrecvConsumed,
};

}  // namespace

const PlaitNetV8* socketNet() { return &kSocketNet; }

}  // namespace plait
