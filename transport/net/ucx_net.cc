// ucx_net.cc — UCX behind the net interface (net.h), built as the module
// libplait-net-ucx.so so libplait never links UCX (DESIGN.md §7). Chosen with
// NCCL_NET=UCX.
//
// One UCP context and worker per process (tag feature), serialised by one
// mutex: the communicators' init threads connect and their proxy threads
// progress through it. Connections use UCP's client-server mode: listen()
// opens a ucp_listener on the interface NCCL_SOCKET_IFNAME selects (prefix
// list, ^ excludes, = exact; default: the first up interface that is not lo
// or docker*), and its handle carries that address and a random connection
// id; connect() creates an endpoint to it; accept() answers the connection
// request. Messages use the tag API with tag = connection id << 32 | tag, so
// the connections sharing the worker never match each other's receives.
// regMr maps the memory with ucp_mem_map (UCX keeps its own registration
// cache as well). Errors (an endpoint's peer failing, a request failing)
// name the peer address and go to the logger at WARN.
// Transports: whatever UCX picks (UCX_TLS); verified here over tcp and over
// shared memory (posix/cma/sysv) between namespaces of one machine.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <ucp/api/ucp.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>

#include "transport/net/net.h"

namespace {

namespace netr = plait::netresult;

constexpr uint64_t kMagic = 0x504c414954554358ULL;  // "PLAITUCX"

PlaitNetLogger gLog = nullptr;
std::mutex gMu;
ucp_context_h gContext = nullptr;
ucp_worker_h gWorker = nullptr;
std::string gIfName;
int gSpeed = 10000;

union Address {
  sockaddr sa;
  sockaddr_in v4;
  sockaddr_in6 v6;
};
Address gAddr{};

#define UCX_WARN(...) \
  do {                \
    if (gLog) gLog(2, 0x10, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

socklen_t lengthOf(const Address& a) { return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }

std::string textOf(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  const void* ip = a.sa.sa_family == AF_INET6 ? static_cast<const void*>(&a.v6.sin6_addr) : &a.v4.sin_addr;
  inet_ntop(a.sa.sa_family, ip, buf, sizeof buf);
  const int port = ntohs(a.sa.sa_family == AF_INET6 ? a.v6.sin6_port : a.v4.sin_port);
  return a.sa.sa_family == AF_INET6 ? "[" + std::string(buf) + "]:" + std::to_string(port)
                                    : std::string(buf) + ":" + std::to_string(port);
}

// NCCL_SOCKET_IFNAME's rules for one interface name.
bool ifnameMatches(const std::string& spec, const std::string& name) {
  if (spec.empty()) return name.rfind("lo", 0) != 0 && name.rfind("docker", 0) != 0;
  std::string s = spec;
  const bool exclude = s[0] == '^';
  if (exclude) s.erase(0, 1);
  const bool exact = !s.empty() && s[0] == '=';
  if (exact) s.erase(0, 1);
  bool hit = false;
  for (size_t pos = 0; pos <= s.size();) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) hit = hit || (exact ? name == item : name.rfind(item, 0) == 0);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

bool pickInterface() {
  const char* spec = std::getenv("PLAIT_SOCKET_IFNAME");
  if (!spec) spec = std::getenv("NCCL_SOCKET_IFNAME");
  const char* fam = std::getenv("NCCL_SOCKET_FAMILY");
  const int family = fam && std::strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : fam ? AF_INET : AF_UNSPEC;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int f = i->ifa_addr->sa_family;
    if ((f != AF_INET && f != AF_INET6) || (family != AF_UNSPEC && f != family)) continue;
    if (f == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr)) continue;
    if (!ifnameMatches(spec ? spec : "", i->ifa_name)) continue;
    std::memcpy(&gAddr, i->ifa_addr, f == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    gIfName = i->ifa_name;
    found = true;
  }
  freeifaddrs(list);
  std::ifstream speed("/sys/class/net/" + gIfName + "/speed");
  if (!(speed >> gSpeed) || gSpeed <= 0) gSpeed = 10000;
  return found;
}

int ucxInit(PlaitNetLogger logger) {
  std::lock_guard<std::mutex> lock(gMu);
  gLog = logger;
  if (gWorker) return netr::kSuccess;
  if (!pickInterface()) {
    UCX_WARN("UCX: no interface matches NCCL_SOCKET_IFNAME");
    return netr::kSystemError;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG;
  params.mt_workers_shared = 0;
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return netr::kSystemError;
  ucs_status_t st = ucp_init(&params, config, &gContext);
  ucp_config_release(config);
  if (st != UCS_OK) {
    UCX_WARN("UCX: ucp_init: %s", ucs_status_string(st));
    return netr::kSystemError;
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // gMu serialises
  if ((st = ucp_worker_create(gContext, &wp, &gWorker)) != UCS_OK) {
    UCX_WARN("UCX: ucp_worker_create: %s", ucs_status_string(st));
    ucp_cleanup(gContext);
    gContext = nullptr;
    return netr::kSystemError;
  }
  return netr::kSuccess;
}

int ucxDevices(int* ndev) {
  *ndev = gWorker ? 1 : 0;
  return netr::kSuccess;
}

int ucxGetProperties(int dev, PlaitNetProperties* props) {
  if (dev != 0) return netr::kInvalidArgument;
  std::memset(props, 0, sizeof *props);
  props->name = const_cast<char*>(gIfName.c_str());
  props->ptrSupport = kNetPtrHost;
  props->speed = gSpeed;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  return netr::kSuccess;
}

struct Handle {
  uint64_t magic;
  uint32_t connId;
  uint32_t pad;
  Address addr;
};
static_assert(sizeof(Handle) <= kNetHandleBytes);

struct Comm {
  ucp_ep_h ep = nullptr;
  uint32_t connId = 0;
  Address peer{};
  bool failed = false;
  std::string failure;
};

struct ListenComm {
  ucp_listener_h listener = nullptr;
  uint32_t connId = 0;
  ucp_conn_request_h pending = nullptr;
};

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  Comm* c = static_cast<Comm*>(arg);
  c->failed = true;
  c->failure = "UCX: connection to " + textOf(c->peer) + " failed: " + ucs_status_string(status);
}

ucp_ep_params_t endpointParams(Comm* c) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = onEndpointError;
  p.err_handler.arg = c;
  return p;
}

void onConnRequest(ucp_conn_request_h request, void* arg) {
  auto* l = static_cast<ListenComm*>(arg);
  if (l->pending) ucp_listener_reject(l->listener, request);  // one connection per listen()
  else l->pending = request;
}

int ucxListen(int dev, void* handleBytes, void** listenComm) {
  std::lock_guard<std::mutex> lock(gMu);
  auto* l = new ListenComm();
  l->connId = std::random_device{}();
  Address bindAddr = gAddr;
  if (bindAddr.sa.sa_family == AF_INET6) bindAddr.v6.sin6_port = 0;
  else bindAddr.v4.sin_port = 0;
  ucp_listener_params_t p{};
  p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  p.sockaddr.addr = &bindAddr.sa;
  p.sockaddr.addrlen = lengthOf(bindAddr);
  p.conn_handler.cb = onConnRequest;
  p.conn_handler.arg = l;
  ucs_status_t st = ucp_listener_create(gWorker, &p, &l->listener);
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (st == UCS_OK) st = ucp_listener_query(l->listener, &attr);
  if (st != UCS_OK) {
    UCX_WARN("UCX: listening on %s: %s", textOf(bindAddr).c_str(), ucs_status_string(st));
    if (l->listener) ucp_listener_destroy(l->listener);
    delete l;
    return netr::kSystemError;
  }
  Handle h{kMagic, l->connId, 0, {}};
  std::memcpy(&h.addr, &attr.sockaddr, lengthOf(bindAddr));
  std::memset(handleBytes, 0, kNetHandleBytes);
  std::memcpy(handleBytes, &h, sizeof h);
  *listenComm = l;
  return netr::kSuccess;
}

int ucxConnect(int, void* handleBytes, void** sendComm, PlaitNetDeviceHandle**) {
  std::lock_guard<std::mutex> lock(gMu);
  Handle h;
  std::memcpy(&h, handleBytes, sizeof h);
  if (h.magic != kMagic) return netr::kInvalidArgument;
  auto* c = new Comm();
  c->connId = h.connId;
  c->peer = h.addr;
  ucp_ep_params_t p = endpointParams(c);
  p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = &c->peer.sa;
  p.sockaddr.addrlen = lengthOf(c->peer);
  ucs_status_t st = ucp_ep_create(gWorker, &p, &c->ep);
  if (st != UCS_OK) {
    UCX_WARN("UCX: connecting to %s: %s", textOf(c->peer).c_str(), ucs_status_string(st));
    delete c;
    return netr::kRemoteError;
  }
  *sendComm = c;  // usable at once: UCX queues sends until the endpoint is up
  return netr::kSuccess;
}

int ucxAccept(void* listenComm, void** recvComm, PlaitNetDeviceHandle**) {
  std::lock_guard<std::mutex> lock(gMu);
  auto* l = static_cast<ListenComm*>(listenComm);
  *recvComm = nullptr;
  ucp_worker_progress(gWorker);
  if (!l->pending) return netr::kSuccess;
  auto* c = new Comm();
  c->connId = l->connId;
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(l->pending, &attr) == UCS_OK)
    std::memcpy(&c->peer, &attr.client_address, sizeof(Address));
  ucp_ep_params_t p = endpointParams(c);
  p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
  p.conn_request = l->pending;
  l->pending = nullptr;
  if (ucs_status_t st = ucp_ep_create(gWorker, &p, &c->ep); st != UCS_OK) {
    UCX_WARN("UCX: accepting %s: %s", textOf(c->peer).c_str(), ucs_status_string(st));
    delete c;
    return netr::kRemoteError;
  }
  *recvComm = c;
  return netr::kSuccess;
}

int ucxCloseListen(void* listenComm) {
  std::lock_guard<std::mutex> lock(gMu);
  auto* l = static_cast<ListenComm*>(listenComm);
  if (l->pending) ucp_listener_reject(l->listener, l->pending);
  ucp_listener_destroy(l->listener);
  delete l;
  return netr::kSuccess;
}

struct Request {
  Comm* comm;
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;
  void* ucx = nullptr;
};

void onSend(void*, ucs_status_t status, void* user) {
  auto* r = static_cast<Request*>(user);
  r->status = status;
  r->done = true;
}

void onRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* r = static_cast<Request*>(user);
  r->status = status;
  if (status == UCS_OK) r->length = info->length;
  r->done = true;
}

uint64_t fullTag(const Comm* c, int tag) { return (uint64_t(c->connId) << 32) | static_cast<uint32_t>(tag); }

int finishPost(Request* r, ucs_status_ptr_t p, void** request) {
  if (UCS_PTR_IS_ERR(p)) {
    UCX_WARN("UCX: posting to %s: %s", textOf(r->comm->peer).c_str(), ucs_status_string(UCS_PTR_STATUS(p)));
    delete r;
    return netr::kRemoteError;
  }
  if (p == nullptr) r->done = true;  // a send completed in place (callbacks are not called then)
  r->ucx = p;
  *request = r;
  return netr::kSuccess;
}

int ucxIsend(void* comm, void* data, int size, int tag, void*, void** request) {
  std::lock_guard<std::mutex> lock(gMu);
  Comm* c = static_cast<Comm*>(comm);
  auto* r = new Request{c};
  r->length = static_cast<size_t>(size);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = onSend;
  p.user_data = r;
  return finishPost(r, ucp_tag_send_nbx(c->ep, data, static_cast<size_t>(size), fullTag(c, tag), &p), request);
}

int ucxIrecv(void* comm, int n, void** data, int* sizes, int* tags, void**, void** request) {
  if (n != 1) return netr::kInvalidUsage;
  std::lock_guard<std::mutex> lock(gMu);
  Comm* c = static_cast<Comm*>(comm);
  auto* r = new Request{c};
  // No immediate completion: UCX 1.13 completes a receive that matches an
  // already-arrived (unexpected) eager message in place and returns NULL
  // without filling recv_info's length, so the step would look empty ("FIFO
  // step holds 0 bytes"). With NO_IMM_CMPL the callback always reports the
  // length (it may run before ucp_tag_recv_nbx returns: r is ready for it).
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = onRecv;
  p.user_data = r;
  return finishPost(r,
                    ucp_tag_recv_nbx(gWorker, data[0], static_cast<size_t>(sizes[0]), fullTag(c, tags[0]), ~uint64_t(0), &p),
                    request);
}

int ucxTest(void* request, int* done, int* sizes) {
  std::lock_guard<std::mutex> lock(gMu);
  auto* r = static_cast<Request*>(request);
  *done = 0;
  if (!r->done) ucp_worker_progress(gWorker);
  if (!r->done) {
    if (!r->comm->failed) return netr::kSuccess;
    UCX_WARN("%s", r->comm->failure.c_str());
    return netr::kRemoteError;
  }
  if (r->status != UCS_OK) {
    UCX_WARN("UCX: transfer with %s failed: %s", textOf(r->comm->peer).c_str(), ucs_status_string(r->status));
    return netr::kRemoteError;
  }
  *done = 1;
  if (sizes) *sizes = static_cast<int>(r->length);
  if (r->ucx) ucp_request_free(r->ucx);
  delete r;
  return netr::kSuccess;
}

int ucxClose(void* comm) {
  std::lock_guard<std::mutex> lock(gMu);
  Comm* c = static_cast<Comm*>(comm);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t s = ucp_ep_close_nbx(c->ep, &p);
  for (int i = 0; i < 100000 && UCS_PTR_IS_PTR(s) && ucp_request_check_status(s) == UCS_INPROGRESS; ++i)
    ucp_worker_progress(gWorker);
  if (UCS_PTR_IS_PTR(s)) ucp_request_free(s);
  delete c;
  return netr::kSuccess;
}

int ucxRegMr(void*, void* data, size_t size, int type, void** mhandle) {
  if (type != kNetPtrHost) return netr::kInvalidArgument;
  std::lock_guard<std::mutex> lock(gMu);
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = data;
  p.length = size;
  ucp_mem_h memh = nullptr;
  if (ucs_status_t st = ucp_mem_map(gContext, &p, &memh); st != UCS_OK) {
    UCX_WARN("UCX: ucp_mem_map of %zu bytes: %s", size, ucs_status_string(st));
    return netr::kSystemError;
  }
  *mhandle = memh;
  return netr::kSuccess;
}

int ucxDeregMr(void*, void* mhandle) {
  std::lock_guard<std::mutex> lock(gMu);
  if (mhandle) ucp_mem_unmap(gContext, static_cast<ucp_mem_h>(mhandle));
  return netr::kSuccess;
}

int ucxRegMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void**) { return netr::kInvalidUsage; }
int ucxIflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;
  return netr::kSuccess;
}
int ucxGetDeviceMr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return netr::kSuccess;
}
int ucxIrecvConsumed(void*, int, void*) { return netr::kSuccess; }

}  // namespace

extern "C" __attribute__((visibility("default"))) const PlaitNetV8 ncclNetPlugin_v8 = {
    "UCX",    ucxInit,        ucxDevices, ucxGetProperties, ucxListen,   ucxConnect, ucxAccept,
    ucxRegMr, ucxRegMrDmaBuf, ucxDeregMr, ucxIsend,         ucxIrecv,    ucxIflush,  ucxTest,
    ucxClose, ucxClose,       ucxCloseListen, ucxGetDeviceMr, ucxIrecvConsumed,
};
