#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>

#include "base/config.h"
#include "base/greeting_gate.h"
#include "base/tls/tls.h"
#include "base/wait.h"
#include "base/log.h"
#include "base/no_throw.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kTimeoutSec, "TIMEOUT", 300, "seconds any wait may block before failing");
PLAIT_PARAM_STRING(kCommId, "COMM_ID", "",
                   "rendezvous address host:port; rank 0 hosts the bootstrap root there");
PLAIT_PARAM_SECRET(kCommSecret, "COMM_SECRET",
                   "secret shared by a job's ranks, mixed into the NCCL_COMM_ID rendezvous nonce");
PLAIT_PARAM_STRING(kHostId, "HOSTID", "", "overrides this host's identity (tests pretend to be several nodes)");

// Listen backlogs: the kernel clamps them to net.core.somaxconn.
constexpr int kListenBacklog = 16384;
// allGather moves slots in chunks this size so the ring cannot deadlock on
// full socket buffers (every hop holds at most one chunk in flight).
constexpr size_t kRingChunkBytes = 16 << 10;
// Longest wait for the hello that follows a connect.
constexpr int64_t kHelloTimeoutMs = 5000;
// Slice for waits that must also notice abort() when the caller supplied its own flag.
constexpr int64_t kAbortSliceMs = 100;
// Timeouts sent over the wire are capped so Deadline arithmetic cannot overflow.
constexpr int64_t kMaxWireTimeoutMs = int64_t(1) << 30;

using namespace bootstrap_wire;

static_assert(std::is_trivially_copyable_v<PeerInfo>);
static_assert(std::is_trivially_copyable_v<net::SocketAddress>);

uint64_t fnv1a(std::string_view text, uint64_t h = 14695981039346656037ULL) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

Deadline earlier(Deadline a, Deadline b) { return a.at() < b.at() ? a : b; }

uint64_t randomNonce() {
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) {
    std::random_device rd;
    nonce = (uint64_t(rd()) << 32) ^ rd() ^ nowNs() ^ uint64_t(::getpid());
  }
  return nonce == 0 ? 1 : nonce;
}

std::string describe(const PeerInfo& p) {
  return "rank " + std::to_string(p.rank) + " (host " + p.hostname + ", pid " + std::to_string(p.pid) + ")";
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

// ---- root threads ---------------------------------------------------------------

// Tracks the root threads of this process (detached) so exit() can ask them
// to stop and wait for them instead of tearing down state they still use.
// Constructed after the logger, so destroyed before it.
class RootRegistry {
 public:
  static RootRegistry& instance() {
    (void)log::level();
    static RootRegistry registry;
    return registry;
  }

  // Runs body(stopFlag) on a new detached thread. Fails only if no thread can be made.
  Status start(std::function<void(const std::atomic<uint32_t>*)> body) {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      std::thread([this, body = std::move(body)]() mutable {
        body(&stop_);
        body = nullptr;  // release everything it holds before saying we are done
        std::lock_guard<std::mutex> doneLock(mu_);
        --running_;
        done_.notify_all();  // under the lock: the registry may be destroyed once it is released
      }).detach();
    } catch (const std::system_error& e) {
      return Status(Code::kSystemError, std::string("cannot start the bootstrap root thread: ") + e.what());
    }
    ++running_;
    return Status::ok();
  }

  ~RootRegistry() {
    stop_.store(1, std::memory_order_release);
    // A forked child inherited the count but not the threads.
    if (::getpid() != pid_) return;
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return running_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  int running_ = 0;
  std::atomic<uint32_t> stop_{0};
  pid_t pid_ = ::getpid();
};

// The rendezvous: collects one RootHello per rank, then answers everyone with
// the PeerInfo table, or everyone with the one error that dooms the job.
// Hellos are read from all connections at once (GreetingGate), so idle or
// slow connections cannot delay real ranks; hellos without the job's nonce
// are answered and dropped without affecting the job.
class Root {
 public:
  Root(net::Socket listener, uint64_t nonce, Deadline deadline, const std::atomic<uint32_t>* stop)
      : listener_(std::move(listener)),
        nonce_(nonce),
        deadline_(deadline),
        stop_(stop),
        gate_("bootstrap root " + listener_.localAddress().toString(), sizeof(RootHello), kHelloTimeoutMs) {}

  void run() {
    PLAIT_INFO(kBootstrap, "bootstrap root listening on %s", listener_.localAddress().toString().c_str());
    for (;;) {
      if (!failed() && nranks_ > 0 && static_cast<int>(joined_.size()) == nranks_) return answerAll();
      if (failed() && nranks_ > 0 && static_cast<int>(told_.size()) >= nranks_) return;
      if (stop_->load(std::memory_order_acquire) != 0) return failAll(Code::kRemoteError, "bootstrap root shut down");
      Deadline cut = cutoff();
      if (cut.expired()) return failed() ? void() : timeOut();
      auto g = gate_.next(listener_, earlier(cut, Deadline::afterMs(kAbortSliceMs)), stop_);
      if (g.isOk()) {
        admit(std::move(g.value()));
      } else if (g.status().code() != Code::kRemoteError) {
        PLAIT_WARN(kBootstrap, "bootstrap root: %s", g.status().toString().c_str());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // do not spin on a failing poll
      }
    }
  }

 private:
  struct Joined {
    net::Socket socket;
    PeerInfo info;
  };

  bool failed() const { return failureCode_ != Code::kOk; }

  // When the root gives up: its own deadline, or just before the earliest
  // rank's deadline (so that rank hears why instead of timing out blind).
  // Once failed it lingers until every rank has been told, at most as long
  // as joined ranks would have waited.
  Deadline cutoff() const {
    Deadline cut = deadline_;
    if (rankCutoff_) cut = earlier(cut, *rankCutoff_);
    return cut;
  }

  void noteRankTimeout(int64_t timeoutMs) {
    timeoutMs = std::clamp<int64_t>(timeoutMs, 0, kMaxWireTimeoutMs);
    int64_t margin = std::clamp<int64_t>(timeoutMs / 10, 50, 1000);
    Deadline d = Deadline::afterMs(std::max<int64_t>(timeoutMs - margin, 0));
    if (!rankCutoff_ || d.at() < rankCutoff_->at()) rankCutoff_ = d;
  }

  void reply(net::Socket& s, Code code, std::string message) {
    if (message.size() > kMaxRootMessageBytes) message.resize(kMaxRootMessageBytes);
    RootReply r{static_cast<int32_t>(code), static_cast<uint32_t>(message.size())};
    Deadline d = Deadline::afterMs(kHelloTimeoutMs);
    Status st = s.sendAll(&r, sizeof(r), d, stop_);
    if (st.isOk()) st = s.sendAll(message.data(), message.size(), d, stop_);
    if (!st.isOk()) PLAIT_INFO(kBootstrap, "bootstrap root: could not tell %s: %s", s.peerAddress().toString().c_str(),
                               st.toString().c_str());
  }

  void failAll(Code code, const std::string& message) {
    failureCode_ = code;
    failure_ = message;
    for (auto& [rank, j] : joined_) {
      reply(j.socket, code, message);
      told_.insert(rank);
    }
    joined_.clear();
  }

  void timeOut() {
    std::vector<int> missing;
    for (int r = 0; r < nranks_; ++r)
      if (!joined_.count(r)) missing.push_back(r);
    std::string msg = std::string("bootstrap timed out: ") + (missing.size() == 1 ? "rank " : "ranks ") +
                      rankList(missing) + " never joined (" +
                      std::to_string(joined_.size()) + " of " + std::to_string(nranks_) + " arrived at the root " +
                      listener_.localAddress().toString() + ")";
    if (nranks_ < 0) msg = "bootstrap timed out: no rank joined the root at " + listener_.localAddress().toString();
    PLAIT_WARN(kBootstrap, "%s", msg.c_str());
    failAll(Code::kRemoteError, msg);
  }

  // Why this hello (with the job's nonce) cannot join, or "".
  std::string rejection(const RootHello& h) const {
    if (std::string why = rootHelloRejection(h, nranks_, firstInfo_); !why.empty()) return why;
    if (auto it = joined_.find(h.rank); it != joined_.end())
      return "rank " + std::to_string(h.rank) + " joined twice: " + describe(h.info) + " and " +
             describe(it->second.info);
    return "";
  }

  void admit(net::GreetingGate::Greeted g) {
    const RootHello h = decodeRootHello(g.greeting.data());
    net::Socket& s = g.socket;
    if (h.magic != kUniqueIdMagic) return reply(s, Code::kInvalidArgument, "not a Plait bootstrap hello");
    if (h.nonce != nonce_) {
      PLAIT_WARN(kBootstrap, "bootstrap root: rejected a hello from %s with another job's id (nonce)",
                 s.peerAddress().toString().c_str());
      return reply(s, Code::kInvalidArgument,
                   "this rank's ncclUniqueId does not match the root's (were ids from different "
                   "ncclGetUniqueId calls mixed, or PLAIT_COMM_SECRET values that differ?)");
    }
    noteRankTimeout(h.timeoutMs);
    if (failed()) {
      if (h.rank >= 0 && h.rank < nranks_) told_.insert(h.rank);
      return reply(s, failureCode_, failure_);
    }
    if (nranks_ < 0 && h.nranks >= 1 && h.nranks <= kMaxRanks) {
      nranks_ = h.nranks;
      firstInfo_ = h.info;
    }
    if (std::string err = rejection(h); !err.empty()) {
      PLAIT_WARN(kBootstrap, "bootstrap root: %s", err.c_str());
      reply(s, Code::kInvalidArgument, err);
      if (h.rank >= 0 && h.rank < nranks_) told_.insert(h.rank);
      return failAll(Code::kInvalidArgument, err);
    }
    joined_.emplace(h.rank, Joined{std::move(s), h.info});
  }

  void answerAll() {
    std::vector<PeerInfo> table;
    table.reserve(joined_.size());
    for (auto& [rank, j] : joined_) table.push_back(j.info);
    RootReply ok{0, 0};
    for (auto& [rank, j] : joined_) {
      Deadline d = Deadline::afterMs(kHelloTimeoutMs);
      Status st = j.socket.sendAll(&ok, sizeof(ok), d, stop_);
      if (st.isOk()) st = j.socket.sendAll(table.data(), table.size() * sizeof(PeerInfo), d, stop_);
      if (!st.isOk())
        PLAIT_WARN(kBootstrap, "bootstrap root: could not send the peer table to %s: %s", describe(j.info).c_str(),
                   st.toString().c_str());
    }
    PLAIT_INFO(kBootstrap, "bootstrap root %s: all %d ranks joined", listener_.localAddress().toString().c_str(),
               nranks_);
  }

  net::Socket listener_;
  uint64_t nonce_;
  Deadline deadline_;
  const std::atomic<uint32_t>* stop_;
  net::GreetingGate gate_;
  int nranks_ = -1;
  PeerInfo firstInfo_;
  std::map<int, Joined> joined_;  // by rank: memory grows with connections, not with a claimed nranks
  std::set<int> told_;            // ranks that heard the failure
  std::optional<Deadline> rankCutoff_;
  Code failureCode_ = Code::kOk;
  std::string failure_;
};

Status startRoot(net::Socket listener, uint64_t nonce) {
  Deadline deadline = Deadline::afterMs(secondsToWaitMs(bootstrapTimeoutSec()));
  auto shared = std::make_shared<net::Socket>(std::move(listener));
  return RootRegistry::instance().start([shared, nonce, deadline](const std::atomic<uint32_t>* stop) {
    // Nothing may escape a thread: an exception would be std::terminate in
    // the user's process. The ranks then time out naming the root.
    Status st = noThrow([&] {
      Root(std::move(*shared), nonce, deadline, stop).run();
      return Status::ok();
    });
    if (!st.isOk()) PLAIT_WARN(kBootstrap, "bootstrap root failed: %s", st.toString().c_str());
  });
}

// The nonce of an NCCL_COMM_ID job. Every process derives it alone, so it
// can only be secret if the processes share a secret: PLAIT_COMM_SECRET
// (plait-run makes a random one per job). Without it the nonce follows from
// the address, and anyone who can reach the address can join the rendezvous.
uint64_t commIdNonce(const net::SocketAddress& addr) {
  const std::string& secret = kCommSecret.get();
  if (secret.empty()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      PLAIT_WARN(kBootstrap | ::plait::log::kEnv,
                 "NCCL_COMM_ID=%s without PLAIT_COMM_SECRET: anyone who can reach that address can join or "
                 "disrupt this job's rendezvous; export the same random PLAIT_COMM_SECRET on every rank",
                 addr.toString().c_str());
    });
    return fnv1a("plait-comm-id:" + addr.toString());
  }
  return fnv1a(secret, fnv1a("plait-comm-id-secret:" + addr.toString()));
}

// Where a rank listens for its peers: on loopback when the job's root is on
// loopback (every rank is on this host, and nothing off the host should be
// able to reach the listener), else on the interface NCCL_SOCKET_IFNAME and
// NCCL_SOCKET_FAMILY select.
Result<net::SocketAddress> listenAddressFor(const net::SocketAddress& root) {
  if (root.isLoopback()) return net::SocketAddress::loopback(root.family(), 0);
  return net::chooseInterfaceAddress();
}

bool isErrorCode(int32_t code) { return code > 0 && code <= static_cast<int32_t>(Code::kRemoteError); }

}  // namespace

// ---- checks of what arrives (bootstrap_wire.h) --------------------------------------

namespace bootstrap_wire {

RootHello decodeRootHello(const void* bytes) {
  RootHello h{};
  std::memcpy(&h, bytes, sizeof(h));
  h.info.hostname[sizeof(h.info.hostname) - 1] = 0;
  return h;
}

std::string rootHelloRejection(const RootHello& h, int nranks, const PeerInfo& first) {
  const std::string who = describe(h.info);
  if (h.nranks < 1 || h.nranks > kMaxRanks)
    return who + " says nranks=" + std::to_string(h.nranks) + ", outside 1.." + std::to_string(kMaxRanks);
  if (h.nranks != nranks)
    return "nranks mismatch: " + who + " says nranks=" + std::to_string(h.nranks) + " but " + describe(first) +
           " said nranks=" + std::to_string(nranks);
  if (h.rank < 0 || h.rank >= nranks) return who + " is out of range for nranks=" + std::to_string(nranks);
  if (h.info.rank != h.rank || !h.info.listenAddr.isValid())
    return who + " sent a malformed hello (peer record for rank " + std::to_string(h.info.rank) + ")";
  return "";
}

Status checkRootReply(const RootReply& reply) {
  if (reply.code != 0 && (!isErrorCode(reply.code) || reply.messageBytes > kMaxRootMessageBytes))
    return remoteError("malformed reply from the root (code " + std::to_string(reply.code) + ", " +
                       std::to_string(reply.messageBytes) + " message bytes)");
  return Status::ok();
}

Status checkPeerTable(PeerInfo* peers, int nranks) {
  for (int r = 0; r < nranks; ++r) peers[r].hostname[sizeof(peers[r].hostname) - 1] = 0;
  for (int r = 0; r < nranks; ++r)
    if (peers[r].rank != r || !peers[r].listenAddr.isValid())
      return remoteError("the root sent a malformed peer table (entry " + std::to_string(r) + ")");
  return Status::ok();
}

bool peerHelloValid(const PeerHello& hello, uint64_t magic, uint64_t nonce, int nranks) {
  return hello.magic == magic && hello.nonce == nonce && hello.rank >= 0 && hello.rank < nranks;
}

FrameAction classifyFrame(const MessageHeader& header, uint32_t kind, uint32_t tag, uint64_t bytes,
                          uint64_t unexpectedBytes) {
  if (header.kind == kind && header.tag == tag && header.bytes == bytes) return FrameAction::kDeliver;
  // Anything else is read into memory first: a header no build of Plait
  // sends (an unknown kind, or more bytes than a message may carry) means
  // the stream is corrupt or forged, and nothing of it can be trusted.
  if (header.kind > kLastMessageKind || header.bytes > kMaxUnexpectedBytes) return FrameAction::kMalformed;
  if (header.kind == kind && header.tag == tag) return FrameAction::kSizeMismatch;
  if (header.bytes > kMaxUnexpectedBytes - unexpectedBytes) return FrameAction::kOverBudget;
  return FrameAction::kBuffer;
}

}  // namespace bootstrap_wire

// ---- unique ids -------------------------------------------------------------------

namespace {
// Byte layout inside ncclUniqueId::internal.
constexpr size_t kMagicOffset = 0, kNonceOffset = 8, kFlagsOffset = 16, kAddrOffset = 24;
static_assert(kAddrOffset + sizeof(net::SocketAddress) <= NCCL_UNIQUE_ID_BYTES);
}  // namespace

void encodeUniqueId(const UniqueIdContents& contents, ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  uint64_t flags = contents.hostedByRank0 ? 1 : 0;
  std::memcpy(id->internal + kMagicOffset, &contents.magic, 8);
  std::memcpy(id->internal + kNonceOffset, &contents.nonce, 8);
  std::memcpy(id->internal + kFlagsOffset, &flags, 8);
  std::memcpy(id->internal + kAddrOffset, &contents.root, sizeof(contents.root));
}

Result<UniqueIdContents> decodeUniqueId(const ncclUniqueId& id) {
  UniqueIdContents c;
  uint64_t flags = 0;
  std::memcpy(&c.magic, id.internal + kMagicOffset, 8);
  std::memcpy(&c.nonce, id.internal + kNonceOffset, 8);
  std::memcpy(&flags, id.internal + kFlagsOffset, 8);
  std::memcpy(&c.root, id.internal + kAddrOffset, sizeof(c.root));
  if (c.magic != kUniqueIdMagic)
    return invalidArgument("ncclUniqueId is not a Plait id (was it initialised with ncclGetUniqueId?)");
  if (!c.root.isValid()) return invalidArgument("ncclUniqueId holds no valid root address (corrupted id?)");
  c.hostedByRank0 = (flags & 1) != 0;
  return c;
}

int64_t bootstrapTimeoutSec() { return std::max<int64_t>(kTimeoutSec.get(), 1); }

namespace {
Result<ncclUniqueId> makeUniqueId(bool fromEnvironment) {
  UniqueIdContents c;
  c.magic = kUniqueIdMagic;
  if (const std::string& commId = kCommId.get(); fromEnvironment && !commId.empty()) {
    PLAIT_ASSIGN_OR_RETURN(c.root, net::SocketAddress::parse(commId));
    c.nonce = commIdNonce(c.root);
    c.hostedByRank0 = true;
    PLAIT_INFO(kEnv, "%s set by environment to %s", kCommId.source().c_str(), commId.c_str());
  } else {
    PLAIT_ASSIGN_OR_RETURN(net::SocketAddress addr, net::chooseInterfaceAddress());
    PLAIT_ASSIGN_OR_RETURN(net::Socket listener, net::Socket::listen(addr, kListenBacklog));
    c.root = listener.localAddress();
    c.nonce = randomNonce();
    PLAIT_RETURN_IF_ERROR(startRoot(std::move(listener), c.nonce));
  }
  ncclUniqueId id;
  encodeUniqueId(c, &id);
  return id;
}
}  // namespace

Result<ncclUniqueId> createUniqueId() { return makeUniqueId(true); }
Result<ncclUniqueId> createPrivateUniqueId() { return makeUniqueId(false); }

uint64_t hostHash() {
  if (const std::string& id = kHostId.get(); !id.empty()) return fnv1a(id);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  return fnv1a(std::string(host) + bootId);
}

// ---- Bootstrap ----------------------------------------------------------------------

Bootstrap::Bootstrap(int rank, int nranks, uint64_t magic, uint64_t nonce, const std::atomic<uint32_t>* abortFlag)
    : rank_(rank),
      nranks_(nranks),
      magic_(magic),
      nonce_(nonce),
      peers_(static_cast<size_t>(nranks)),
      sendSockets_(static_cast<size_t>(nranks)),
      recvSockets_(static_cast<size_t>(nranks)),
      userAbort_(abortFlag) {}

Bootstrap::~Bootstrap() = default;

Result<std::unique_ptr<Bootstrap>> Bootstrap::create(const ncclUniqueId& id, int rank, int nranks,
                                                     const BootstrapOptions& options) {
  if (nranks < 1 || nranks > kMaxRanks)
    return invalidArgument("nranks must be in 1.." + std::to_string(kMaxRanks) + ", got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank " + std::to_string(rank) + " is out of range for nranks=" + std::to_string(nranks));
  PLAIT_ASSIGN_OR_RETURN(UniqueIdContents contents, decodeUniqueId(id));
  std::unique_ptr<Bootstrap> bs(new Bootstrap(rank, nranks, contents.magic, contents.nonce, options.abortFlag));
  Deadline deadline = options.deadline;
  const std::atomic<uint32_t>* flag = bs->socketAbortFlag();

  if (contents.hostedByRank0 && rank == 0) {
    auto listener = net::Socket::listen(contents.root, kListenBacklog);
    if (!listener.isOk())
      return listener.takeStatus().withContext("rank 0 cannot host the bootstrap root at " +
                                               contents.root.toString() + " (NCCL_COMM_ID)");
    PLAIT_RETURN_IF_ERROR(startRoot(std::move(listener.value()), contents.nonce));
  }

  PLAIT_ASSIGN_OR_RETURN(net::SocketAddress myAddr, listenAddressFor(contents.root));
  PLAIT_ASSIGN_OR_RETURN(bs->listener_, net::Socket::listen(myAddr, kListenBacklog));
  PLAIT_ASSIGN_OR_RETURN(std::shared_ptr<const tls::Context> encryption, tls::current());
  if (encryption != nullptr)
    bs->peerThread_ = std::make_unique<net::GreetingThread>("rank " + std::to_string(rank) + " bootstrap listener",
                                                            bs->listener_, sizeof(PeerHello), kHelloTimeoutMs);

  RootHello hello{};
  hello.magic = contents.magic;
  hello.nonce = contents.nonce;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.timeoutMs = std::min(deadline.remainingMs(), kMaxWireTimeoutMs);
  hello.info.rank = rank;
  hello.info.hostHash = hostHash();
  hello.info.pid = static_cast<int>(::getpid());
  hello.info.cpus = currentCpuMask();
  ::gethostname(hello.info.hostname, sizeof(hello.info.hostname) - 1);
  hello.info.listenAddr = bs->listener_.localAddress();

  const std::string rootName = "the bootstrap root at " + contents.root.toString();
  auto fail = [&](Status st) {
    return st.withContext("rank " + std::to_string(rank) + " joining " + rootName);
  };
  // In slices, so a root whose process died is noticed (options.rootPid).
  Result<net::Socket> root = remoteError("not connected");
  for (;;) {
    root = net::Socket::connect(contents.root, earlier(deadline, Deadline::afterMs(kAbortSliceMs)), flag);
    if (root.isOk() || deadline.expired() || flag->load() != 0) break;
    if (options.rootPid > 0 && !processAlive(options.rootPid))
      return fail(remoteError("its process (pid " + std::to_string(options.rootPid) + ") is gone (died)"));
  }
  if (!root.isOk()) return fail(root.takeStatus());
  Status st = root->sendAll(&hello, sizeof(hello), deadline, flag);
  RootReply reply{};
  if (st.isOk()) st = root->recvAll(&reply, sizeof(reply), deadline, flag);
  if (!st.isOk()) return fail(std::move(st));
  if (Status bad = checkRootReply(reply); !bad.isOk()) return fail(std::move(bad));
  if (reply.code != 0) {
    std::string message(reply.messageBytes, '\0');
    st = root->recvAll(message.data(), message.size(), deadline, flag);
    if (!st.isOk()) return fail(std::move(st));
    return fail(Status(static_cast<Code>(reply.code), message));
  }
  st = root->recvAll(bs->peers_.data(), bs->peers_.size() * sizeof(PeerInfo), deadline, flag);
  if (!st.isOk()) return fail(std::move(st));
  if (Status bad = checkPeerTable(bs->peers_.data(), nranks); !bad.isOk()) return fail(std::move(bad));
  root->close();

  PLAIT_RETURN_IF_ERROR(bs->connectRing(deadline));
  PLAIT_INFO(kBootstrap, "bootstrap: rank %d of %d ready, listening on %s", rank, nranks,
             bs->listener_.localAddress().toString().c_str());
  return bs;
}

bool Bootstrap::aborted() const {
  const std::atomic<uint32_t>* user = userAbort_.load(std::memory_order_acquire);
  return abort_.load(std::memory_order_acquire) != 0 || (user != nullptr && user->load(std::memory_order_acquire) != 0);
}

void Bootstrap::abort() {
  abort_.store(1, std::memory_order_release);
  if (peerThread_) peerThread_->stop();  // before the listener goes, or it would complain of it
  std::lock_guard<std::mutex> lock(socketsMu_);
  listener_.shutdown();
  for (net::Socket& s : sendSockets_) s.shutdown();
  for (net::Socket& s : recvSockets_) s.shutdown();
}

void Bootstrap::installSocket(std::vector<net::Socket>& table, int peer, net::Socket socket) {
  std::lock_guard<std::mutex> lock(socketsMu_);
  table[static_cast<size_t>(peer)] = std::move(socket);
  if (aborted()) table[static_cast<size_t>(peer)].shutdown();
}

Status Bootstrap::peerFailure(int peer, const char* op, Status cause) const {
  if (aborted())
    return remoteError("bootstrap aborted (rank " + std::to_string(rank_) + ", during " + op + " rank " +
                       std::to_string(peer) + ")");
  return Status(cause.code(), std::string(op) + " " + describe(peers_[static_cast<size_t>(peer)]) +
                                  " failed: " + cause.message());
}

bool Bootstrap::peerGone(int peer) const {
  const PeerInfo& p = peers_[static_cast<size_t>(peer)];
  return p.hostHash == peers_[static_cast<size_t>(rank_)].hostHash && p.pid > 0 && !processAlive(p.pid);
}

Status Bootstrap::connectRing(Deadline deadline) {
  if (nranks_ == 1) return Status::ok();
  int next = (rank_ + 1) % nranks_;
  int prev = (rank_ + nranks_ - 1) % nranks_;
  auto s = sendSocket(next, deadline);
  if (!s.isOk()) return s.takeStatus();
  return acceptFrom(prev, deadline);
}

Result<net::Socket*> Bootstrap::sendSocket(int peer, Deadline deadline) {
  net::Socket& slot = sendSockets_[static_cast<size_t>(peer)];
  if (slot.isValid()) return &slot;
  // Connect in slices so abort() is noticed even when the caller's flag is the one polled.
  for (;;) {
    if (aborted()) return peerFailure(peer, "connect to", remoteError("aborted"));
    auto s = net::Socket::connect(peers_[static_cast<size_t>(peer)].listenAddr,
                                  earlier(deadline, Deadline::afterMs(kAbortSliceMs)), socketAbortFlag());
    if (!s.isOk()) {
      if (peerGone(peer)) return peerFailure(peer, "connect to", remoteError("its process is gone (died)"));
      if (s.status().code() == Code::kRemoteError && !deadline.expired() && !aborted()) continue;
      return peerFailure(peer, "connect to", s.takeStatus());
    }
    PeerHello hello{magic_, nonce_, rank_, 0};
    Status st = s->sendAll(&hello, sizeof(hello), deadline, socketAbortFlag());
    if (!st.isOk()) return peerFailure(peer, "connect to", std::move(st));
    installSocket(sendSockets_, peer, std::move(s.value()));
    return &slot;
  }
}

Status Bootstrap::acceptFrom(int peer, Deadline deadline) {
  if (!peerGate_ && !peerThread_)
    peerGate_ = std::make_unique<net::GreetingGate>("rank " + std::to_string(rank_) + " bootstrap listener",
                                                    sizeof(PeerHello), kHelloTimeoutMs);
  while (!recvSockets_[static_cast<size_t>(peer)].isValid()) {
    if (aborted()) return peerFailure(peer, "waiting for a connection from", remoteError("aborted"));
    const Deadline slice = earlier(deadline, Deadline::afterMs(kAbortSliceMs));
    auto g = peerThread_ ? peerThread_->next(slice, socketAbortFlag())
                         : peerGate_->next(listener_, slice, socketAbortFlag());
    if (!g.isOk()) {
      if (peerGone(peer))
        return peerFailure(peer, "waiting for a connection from", remoteError("its process is gone (died)"));
      if (g.status().code() == Code::kRemoteError && !deadline.expired() && !aborted()) continue;
      return peerFailure(peer, "waiting for a connection from", g.takeStatus());
    }
    PeerHello hello{};
    std::memcpy(&hello, g->greeting.data(), sizeof(hello));
    if (!peerHelloValid(hello, magic_, nonce_, nranks_) || recvSockets_[static_cast<size_t>(hello.rank)].isValid()) {
      PLAIT_WARN(kBootstrap, "rank %d: ignoring a bootstrap connection from %s: not a peer of this communicator, "
                 "or a duplicate connection", rank_, g->socket.peerAddress().toString().c_str());
      continue;
    }
    installSocket(recvSockets_, hello.rank, std::move(g->socket));
  }
  return Status::ok();
}

Status Bootstrap::sendMessage(int peer, Kind kind, uint32_t tag, const void* data, size_t bytes, Deadline deadline) {
  if (peer < 0 || peer >= nranks_) return invalidArgument("bootstrap send to rank " + std::to_string(peer) +
                                                          " out of range for nranks=" + std::to_string(nranks_));
  if (aborted()) return peerFailure(peer, "send to", remoteError("aborted"));
  PLAIT_ASSIGN_OR_RETURN(net::Socket * s, sendSocket(peer, deadline));
  MessageHeader h{static_cast<uint32_t>(kind), tag, bytes};
  // Small messages go out in one write: header and payload in one segment.
  constexpr size_t kCoalesceBytes = 4096;
  Status st;
  if (bytes <= kCoalesceBytes) {
    char buf[sizeof(MessageHeader) + kCoalesceBytes];
    std::memcpy(buf, &h, sizeof(h));
    if (bytes > 0) std::memcpy(buf + sizeof(h), data, bytes);
    st = s->sendAll(buf, sizeof(h) + bytes, deadline, socketAbortFlag());
  } else {
    st = s->sendAll(&h, sizeof(h), deadline, socketAbortFlag());
    if (st.isOk()) st = s->sendAll(data, bytes, deadline, socketAbortFlag());
  }
  return st.isOk() ? st : peerFailure(peer, "send to", std::move(st));
}

Status Bootstrap::recvMessage(int peer, Kind kind, uint32_t tag, void* data, size_t bytes, Deadline deadline) {
  if (peer < 0 || peer >= nranks_) return invalidArgument("bootstrap recv from rank " + std::to_string(peer) +
                                                          " out of range for nranks=" + std::to_string(nranks_));
  if (aborted()) return peerFailure(peer, "receive from", remoteError("aborted"));
  auto sizeMismatch = [&](size_t got) {
    return invalidUsage("bootstrap recv from rank " + std::to_string(peer) + " tag " + std::to_string(tag) +
                        " expected " + std::to_string(bytes) + " bytes but the message has " + std::to_string(got));
  };
  static_assert(static_cast<uint32_t>(Kind::kBarrier) == kLastMessageKind, "classifyFrame knows every kind");
  MessageKey key{peer, kind, tag};
  if (auto it = unexpected_.find(key); it != unexpected_.end() && !it->second.empty()) {
    std::vector<char> msg = std::move(it->second.front());
    it->second.pop_front();
    unexpectedBytes_ -= msg.size();
    if (it->second.empty()) unexpected_.erase(it);
    if (msg.size() != bytes) return sizeMismatch(msg.size());
    if (bytes > 0) std::memcpy(data, msg.data(), bytes);
    return Status::ok();
  }
  PLAIT_RETURN_IF_ERROR(acceptFrom(peer, deadline));
  net::Socket& s = recvSockets_[static_cast<size_t>(peer)];
  for (;;) {
    MessageHeader h{};
    Status st = s.recvAll(&h, sizeof(h), deadline, socketAbortFlag());
    if (!st.isOk()) return peerFailure(peer, "receive from", std::move(st));
    switch (classifyFrame(h, static_cast<uint32_t>(kind), tag, bytes, unexpectedBytes_)) {
      case FrameAction::kDeliver:
        st = s.recvAll(data, bytes, deadline, socketAbortFlag());
        return st.isOk() ? st : peerFailure(peer, "receive from", std::move(st));
      case FrameAction::kMalformed:
        s.shutdown();
        return peerFailure(peer, "receive from",
                           remoteError("malformed message header (kind " + std::to_string(h.kind) + ", " +
                                       std::to_string(h.bytes) + " bytes); connection closed"));
      case FrameAction::kSizeMismatch: {
        std::vector<char> drop(h.bytes);  // keep the stream aligned for later messages
        st = s.recvAll(drop.data(), drop.size(), deadline, socketAbortFlag());
        return st.isOk() ? sizeMismatch(h.bytes) : peerFailure(peer, "receive from", std::move(st));
      }
      case FrameAction::kOverBudget:
        s.shutdown();
        return peerFailure(peer, "receive from",
                           remoteError("more than " + std::to_string(kMaxUnexpectedBytes) +
                                       " bytes of messages nobody has asked for yet; connection closed"));
      case FrameAction::kBuffer: break;
    }
    unexpectedBytes_ += h.bytes;
    std::vector<char> early(h.bytes);
    st = s.recvAll(early.data(), early.size(), deadline, socketAbortFlag());
    if (!st.isOk()) return peerFailure(peer, "receive from", std::move(st));
    unexpected_[MessageKey{peer, static_cast<Kind>(h.kind), h.tag}].push_back(std::move(early));
  }
}

Status Bootstrap::send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) {
  return sendMessage(peer, Kind::kUser, tag, data, bytes, deadline);
}

Status Bootstrap::recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) {
  return recvMessage(peer, Kind::kUser, tag, data, bytes, deadline);
}

// Ring allgather: in step s every rank forwards the slot it received in step
// s-1 (its own in step 0) to the next rank and receives the slot of rank
// (rank - s - 1) from the previous one; after nranks-1 steps all slots are full.
Status Bootstrap::ringAllGather(Kind kind, void* data, size_t bytesPerRank, Deadline deadline) {
  if (nranks_ == 1 || bytesPerRank == 0) return aborted() ? remoteError("bootstrap aborted") : Status::ok();
  char* base = static_cast<char*>(data);
  int next = (rank_ + 1) % nranks_;
  int prev = (rank_ + nranks_ - 1) % nranks_;
  for (int step = 0; step < nranks_ - 1; ++step) {
    size_t sendSlot = static_cast<size_t>((rank_ - step + nranks_) % nranks_);
    size_t recvSlot = static_cast<size_t>((rank_ - step - 1 + 2 * nranks_) % nranks_);
    for (size_t off = 0; off < bytesPerRank; off += kRingChunkBytes) {
      size_t len = std::min(kRingChunkBytes, bytesPerRank - off);
      PLAIT_RETURN_IF_ERROR(sendMessage(next, kind, 0, base + sendSlot * bytesPerRank + off, len, deadline));
      PLAIT_RETURN_IF_ERROR(recvMessage(prev, kind, 0, base + recvSlot * bytesPerRank + off, len, deadline));
    }
  }
  return Status::ok();
}

Status Bootstrap::allGather(void* data, size_t bytesPerRank, Deadline deadline) {
  return ringAllGather(Kind::kAllGather, data, bytesPerRank, deadline);
}

Status Bootstrap::barrier(Deadline deadline) {
  std::vector<char> slots(static_cast<size_t>(nranks_), 1);
  return ringAllGather(Kind::kBarrier, slots.data(), 1, deadline);
}

}  // namespace plait
