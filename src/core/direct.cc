// direct.cc — the direct (zero-copy) path: probe, agreement on which buffers
// every rank touches, completion handshake (the algorithms:
// direct_algorithms.cc).
#include "core/direct.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/types.h"
#include "base/cma.h"
#include "base/config.h"
#include "base/log.h"
#include "core/host_memory.h"
#include "core/reproducible.h"
#include "plait/clock.hpp"

namespace plait {
namespace {

PLAIT_PARAM_INT(kDirect, "DIRECT", 1, "zero-copy collectives on registered ncclMemAlloc buffers of local ranks (0: off)");
// Registered 2-rank AllReduce measured 4-5x faster direct than through the
// FIFOs from 8 KiB up (2x at 4 KiB), while every operation from this size
// on, registered or not, pays one line-message round to agree (not
// measurable here from 16 KiB up; 10-30% of a 4-8 KiB operation).
PLAIT_PARAM_INT(kDirectMinBytes, "DIRECT_MIN_BYTES", 16 << 10,
                "smallest collective (bytes of its largest buffer) that tries the direct path on registered buffers");
PLAIT_PARAM_INT(kDirectUnsyncedMinBytes, "DIRECT_UNSYNCED_MIN_BYTES", 1 << 20,
                "the same for Broadcast, Reduce, Gather, Scatter and AlltoAll, whose FIFO paths let ranks run ahead");
// Two ranks with a core each (Intel host, 2026-11-29, 5 interleaved rounds,
// unregistered heap buffers, perf/results/host/rooted_pair.md): Broadcast
// took 0.59x / 0.52x the time at 64 / 256 KiB on the direct path (one copy
// by cross-memory attach, the measured choice against the FIFOs). Gather and
// Scatter gained too (0.45-0.95x) but keep the threshold above: in a group
// with sends or receives they stay in the point-to-point batch, and a peer
// calling them alone on the direct path would wait for the batch until the
// timeout (docs/ARCHITECTURE.md), which 64 KiB would make common. Reduce and
// AlltoAll lost at 64 KiB (1.39x, 1.10x), and Broadcast with 4 ranks on the
// 2 cores (1.16-1.39x). On the AMD host where the 1 MiB threshold was set,
// agreeing had cost 3-4 us per call at 64-256 KiB: unmeasured there since.
PLAIT_PARAM_INT(kDirectPairBroadcastMinBytes, "DIRECT_PAIR_BROADCAST_MIN_BYTES", 64 << 10,
                "Broadcast at 2 ranks with a core each that can attach to each other's memory tries the direct "
                "path from this many bytes (the smaller of it and PLAIT_DIRECT_UNSYNCED_MIN_BYTES)");
// Skipping the agreement where only registered buffers could go direct and
// no rank has registered one: ReduceScatter at 4 ranks took 0.59-0.79x the
// time at 64 KiB-1 MiB; AllGather, AllReduce and ReduceScatter at 16-32 KiB
// 0.62-0.86x at 4 ranks, 0.86-0.99x at 2 (unregistered buffers, 5
// interleaved rounds outside the slow windows, perf/results/host/agreement_skip.md).
PLAIT_PARAM_INT(kDirectAgree, "DIRECT_AGREE", 0,
                "0: calls that only registered buffers could make direct skip the direct path's agreement until "
                "some local rank has registered a buffer (a first registration counts from the second collective "
                "after it); 1: every call from PLAIT_DIRECT_MIN_BYTES agrees, so registrations count at once");
PLAIT_PARAM_INT(kDirectChunkBytes, "DIRECT_CHUNK_BYTES", 64 << 10,
                "bytes a direct reduction reduces at a time, and the size of each staging slot of one by "
                "cross-memory attach (all inputs of a chunk stay in cache)");
PLAIT_PARAM_INT(kDirectStreamBytes, "DIRECT_STREAM_BYTES", 32 << 20,
                "direct out-of-place outputs of at least this many bytes are written with streaming stores");
PLAIT_PARAM_INT(kDirectGatherPush, "DIRECT_ALLGATHER_PUSH", 0,
                "direct AllGather: 0 each rank pulls peers' inputs, 1 each rank pushes its input to peers");
PLAIT_PARAM_INT(kDirectCma, "DIRECT_CMA", 1,
                "direct collectives on unregistered buffers of local processes, by cross-memory attach where "
                "PLAIT_P2P_CMA agreed it: the data movers, and the reductions as PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES "
                "and PLAIT_DIRECT_CMA_ADAPT say (0: registered buffers only)");
// perf/host/direct_cma.sh (perf/results/host/direct_cma.md): at 2 ranks
// AllGather takes 0.5-0.75x the ring's time at 64-256 KiB in every run, and
// from 1 MiB the same as the ring's fast runs (the ring's time there varies 2x
// from run to run; this path's does not); Broadcast 0.8x at 1-4 MiB, Scatter
// 0.75-0.9x from 4 MiB. With no size limit, AllGather and Broadcast took up to
// 1.5x the ring's time from 16 MiB: their rings read each input from memory
// once and pass it on through the caches, every rank copying, where each
// reader here fetches it from memory again. Below 32 KiB per copy a system
// call per peer is not worth it (not resolved by measurement: the figures
// there swing by 40% between identical runs).
PLAIT_PARAM_INT(kDirectCmaMinBytes, "DIRECT_CMA_MIN_BYTES", 32 << 10,
                "cross-memory attach on unregistered buffers where each copy (one rank's block) is at least this large");
PLAIT_PARAM_INT(kDirectCmaMaxBytes, "DIRECT_CMA_MAX_BYTES", 8 << 20,
                "and for AllGather and Broadcast only while their largest buffer is at most this large");
PLAIT_PARAM_INT(kDirectCmaReduceMinBytes, "DIRECT_CMA_REDUCE_MIN_BYTES", int64_t{1} << 62,
                "AllReduce, Reduce and ReduceScatter on unregistered buffers by cross-memory attach from this many "
                "bytes (their largest buffer; each rank stages its peers' inputs chunk by chunk); at 2 ranks "
                "PLAIT_DIRECT_CMA_ADAPT chooses by measurement instead");
PLAIT_PARAM_INT(kDirectCmaAdapt, "DIRECT_CMA_ADAPT", 1,
                "choose between the FIFOs and cross-memory attach call by call from what each recently cost "
                "(core/path_choice.h; 0: the static thresholds only)");
PLAIT_PARAM_INT(kDirectCmaExploreMs, "DIRECT_CMA_EXPLORE_MS", 100,
                "PLAIT_DIRECT_CMA_ADAPT: how long a path's estimate stands before the path is tried again");
PLAIT_PARAM_INT(kDirectMaxMappings, "DIRECT_MAX_MAPPINGS", 256, "peer allocations a communicator keeps mapped");

constexpr int32_t kNone = -1;     // BufferRef::fd: not usable by peers
constexpr int32_t kPointer = -2;  // BufferRef::fd: `where` is an address (every rank is in this process)
constexpr int32_t kCma = -3;      // BufferRef::fd: `where` is an address in the describing rank's process
constexpr size_t kProbeBytes = 4096;

static_assert(sizeof(DirectPath::Descriptor) <= kLinePayloadBytes, "a descriptor must fit one line");
static_assert(kNumRedOpKinds <= 128, "Descriptor::shape keeps 7 bits for the op kind, then the vote bit");

// What each rank tells the others at creation.
struct ProbeInfo {
  uint64_t identity = 0;
  uint64_t token = 0;
  uint64_t minBytes = 0;
  uint64_t minBytesUnsynced = 0;
  uint64_t pairBroadcastMinBytes = 0;
  uint64_t cmaMinBytes = 0;
  uint64_t cmaMaxBytes = 0;
  uint64_t cmaReduceMinBytes = 0;
  int32_t pid = 0;
  int32_t fd = -1;
  int32_t want = 0;  // PLAIT_DIRECT on here
  int32_t push = 0;  // PLAIT_DIRECT_ALLGATHER_PUSH here
  int32_t ok = 0;    // round 2: this rank mapped every peer's probe
  int32_t cma = 0;   // PLAIT_DIRECT_CMA here
  int32_t agree = 0;  // PLAIT_DIRECT_AGREE here
};

// Maps peer `p`'s probe and checks its token; returns "" or why not.
std::string checkProbe(const ProbeInfo& p) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", p.pid, p.fd);
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return std::string("open ") + path + ": " + std::strerror(errno);
  // A probe is sealed at its size (probe()); any other file could be short,
  // or cut short under the mapping: SIGBUS here.
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || fstat(fd, &st) != 0 ||
      st.st_size < static_cast<off_t>(kProbeBytes)) {
    ::close(fd);
    return std::string(path) + " is not a sealed probe of " + std::to_string(kProbeBytes) + " bytes";
  }
  void* m = mmap(nullptr, kProbeBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) return std::string("mmap ") + path + ": " + std::strerror(err);
  uint64_t token = 0;
  std::memcpy(&token, m, sizeof token);
  munmap(m, kProbeBytes);
  if (token != p.token) return std::string(path) + " is not the peer's probe (another pid namespace?)";
  return "";
}

// The probe tokens of this process's ranks whose probe is under way, with
// their ranks. A peer that claims to be a thread of this process (its
// identity) is believed only when its token is here under its own rank:
// identities are reported by each rank itself, and a rank in another process
// that copied ours would otherwise have this rank follow its addresses as
// its own (kPointer). Entries live from before the first exchange to after
// the second, so every rank of the job finds its peers' while it checks.
// Kept per communicator (its bootstrap's job key): a token noted for one
// communicator does not vouch for a rank of another initialising at once.
struct ProbeNote {
  uint64_t comm, token;
  int rank;
  bool operator==(const ProbeNote&) const = default;
};
struct ProbeNotes {
  std::mutex mu;
  std::vector<ProbeNote> notes;
};
ProbeNotes& probeNotes() {
  static auto* notes = new ProbeNotes();  // never destroyed: an init thread may still probe at exit
  return *notes;
}

class ProbeTokenNote {
 public:
  explicit ProbeTokenNote(ProbeNote note) : note_(note) {
    std::lock_guard<std::mutex> lock(probeNotes().mu);
    probeNotes().notes.push_back(note_);
  }
  ~ProbeTokenNote() {
    ProbeNotes& all = probeNotes();
    std::lock_guard<std::mutex> lock(all.mu);
    auto it = std::find(all.notes.begin(), all.notes.end(), note_);
    if (it != all.notes.end()) all.notes.erase(it);
  }
  ProbeTokenNote(const ProbeTokenNote&) = delete;
  ProbeTokenNote& operator=(const ProbeTokenNote&) = delete;

 private:
  ProbeNote note_;
};

bool probeOfThisProcess(const ProbeNote& note) {
  ProbeNotes& all = probeNotes();
  std::lock_guard<std::mutex> lock(all.mu);
  return std::find(all.notes.begin(), all.notes.end(), note) != all.notes.end();
}

// Closes the probe's memfd on every way out of probe().
struct ProbeFd {
  int fd = -1;
  ~ProbeFd() {
    if (fd >= 0) ::close(fd);
  }
};

uint64_t randomToken() {
  uint64_t t = 0;
  if (getrandom(&t, sizeof t, 0) != static_cast<ssize_t>(sizeof t)) t = reinterpret_cast<uintptr_t>(&t) ^ getpid();
  return t | 1;
}

const char* bufferName(bool send) { return send ? "sendbuff" : "recvbuff"; }

}  // namespace

// ---- creation ---------------------------------------------------------------------

Result<std::unique_ptr<DirectPath>> DirectPath::create(OobExchange& oob, ShmTransport* shm, bool cma,
                                                       const std::vector<int>& pids, uint64_t commKey,
                                                       Deadline deadline) {
  std::unique_ptr<DirectPath> d(new DirectPath());
  d->rank_ = oob.rank();
  d->bootstrapPids_ = pids;
  d->commKey_ = commKey;
  d->nranks_ = oob.nranks();
  d->shm_ = shm;
  bool allLocal = shm != nullptr;
  for (int r = 0; allLocal && r < d->nranks_; ++r) allLocal = r == d->rank_ || shm->isLocal(r);
  if (d->nranks_ < 2 || !allLocal) return d;
  PLAIT_RETURN_IF_ERROR(d->probe(oob, deadline));
  if (!d->enabled_) return d;
  if (cma && d->cmaWanted_ && !d->oneProcess_)
    PLAIT_INFO(kInit, "direct collectives on unregistered buffers too, by cross-memory attach (%s)",
               kDirectCmaAdapt.get() != 0 ? "chosen over the FIFOs by measurement" : "by size thresholds");
  constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;
  constexpr int64_t kMaxMappings = int64_t{1} << 16;
  if (kDirectChunkBytes.get() < 0 || kDirectChunkBytes.get() > kMaxChunkBytes)
    return invalidArgument("PLAIT_DIRECT_CHUNK_BYTES is " + std::to_string(kDirectChunkBytes.get()) +
                           "; must be in [0, 1G] (values below 4K mean 4K)");
  for (const auto* p : {&kDirectCmaMinBytes, &kDirectCmaMaxBytes, &kDirectCmaReduceMinBytes, &kDirectCmaExploreMs})
    if (p->get() < 0)
      return invalidArgument("PLAIT_" + std::string(p->name()) + " is " + std::to_string(p->get()) +
                             "; must be at least 0");
  constexpr int64_t kMaxExploreMs = int64_t{1} << 30;  // 12 days: the product in ns stays far from overflow
  if (kDirectCmaExploreMs.get() > kMaxExploreMs)
    return invalidArgument("PLAIT_DIRECT_CMA_EXPLORE_MS is " + std::to_string(kDirectCmaExploreMs.get()) +
                           "; must be at most " + std::to_string(kMaxExploreMs));
  if (kDirectMaxMappings.get() > kMaxMappings)
    return invalidArgument("PLAIT_DIRECT_MAX_MAPPINGS is " + std::to_string(kDirectMaxMappings.get()) +
                           "; must be at most " + std::to_string(kMaxMappings));
  d->chunkBytes_ = std::max<size_t>(4096, static_cast<size_t>(kDirectChunkBytes.get()) / 64 * 64);
  d->streamBytes_ = static_cast<size_t>(std::max<int64_t>(0, kDirectStreamBytes.get()));
  d->scratch_.resize(d->chunkBytes_);
  d->mappings_ = std::make_unique<PeerMappings>(
      std::max<size_t>(static_cast<size_t>(std::max<int64_t>(0, kDirectMaxMappings.get())), 2 * d->nranks_ + 2));
  d->cma_ = cma && d->cmaWanted_ && !d->oneProcess_;
  d->adapt_ = d->cma_ && kDirectCmaAdapt.get() != 0;
  d->exploreNs_ = static_cast<uint64_t>(kDirectCmaExploreMs.get()) * 1'000'000;
  d->descs_.resize(d->nranks_);
  d->sendCma_.resize(d->nranks_);
  d->recvCma_.resize(d->nranks_);
  d->sends_.resize(d->nranks_);
  d->recvs_.resize(d->nranks_);
  d->dsts_.resize(d->nranks_);
  d->srcs_.resize(d->nranks_);
  return d;
}

// Two exchanges: everyone's probe (a small memfd with a random token), then
// whether everyone could map every other process's probe. The settings that
// the protocol depends on are agreed here too, so ranks with different
// environments cannot disagree later.
Status DirectPath::probe(OobExchange& oob, Deadline deadline) {
  std::vector<ProbeInfo> info(nranks_);
  ProbeInfo& mine = info[rank_];
  mine.identity = host_memory::processIdentity();
  mine.pid = static_cast<int32_t>(getpid());
  mine.want = kDirect.get() != 0;
  mine.push = kDirectGatherPush.get() != 0;
  mine.cma = kDirectCma.get() != 0;
  mine.agree = kDirectAgree.get() != 0;
  mine.cmaMinBytes = static_cast<uint64_t>(std::max<int64_t>(0, kDirectCmaMinBytes.get()));
  mine.cmaMaxBytes = static_cast<uint64_t>(std::max<int64_t>(0, kDirectCmaMaxBytes.get()));
  mine.cmaReduceMinBytes = static_cast<uint64_t>(std::max<int64_t>(0, kDirectCmaReduceMinBytes.get()));
  mine.minBytes = static_cast<uint64_t>(std::max<int64_t>(1, kDirectMinBytes.get()));
  mine.minBytesUnsynced = static_cast<uint64_t>(std::max<int64_t>(1, kDirectUnsyncedMinBytes.get()));
  mine.pairBroadcastMinBytes = static_cast<uint64_t>(std::max<int64_t>(1, kDirectPairBroadcastMinBytes.get()));
  mine.token = randomToken();
  const ProbeTokenNote note(ProbeNote{commKey_, mine.token, rank_});
  ProbeFd probeFd;
  int& fd = probeFd.fd;
  fd = mine.want ? memfd_create("plait-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
  if (fd >= 0 && ftruncate(fd, kProbeBytes) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0) {
    if (void* m = mmap(nullptr, kProbeBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); m != MAP_FAILED) {
      std::memcpy(m, &mine.token, sizeof mine.token);
      munmap(m, kProbeBytes);
      mine.fd = fd;
    }
  }
  PLAIT_RETURN_IF_ERROR(oob.allGather(info.data(), sizeof(ProbeInfo), deadline));
  // What is checked is what is used: the first exchange's descriptions (a
  // peer's second one could say anything), the second only for `ok`.
  const std::vector<ProbeInfo> heard = info;
  // The bootstrap's pid of each local rank (0: on another host, where the
  // probe fails anyway): the probe must name the same.
  auto pidOf = [&](int r) {
    const int known = r < static_cast<int>(bootstrapPids_.size()) ? bootstrapPids_[r] : 0;
    return known != 0 ? known : heard[r].pid;
  };
  std::string why;
  for (int r = 0; r < nranks_ && why.empty(); ++r) {
    const ProbeInfo& p = heard[r];
    const bool sameProcess = p.identity == mine.identity;
    if (!p.want) why = "PLAIT_DIRECT=0 on rank " + std::to_string(r);
    else if (p.pid != pidOf(r))
      why = "rank " + std::to_string(r) + "'s probe names pid " + std::to_string(p.pid) + ", its bootstrap pid " +
            std::to_string(pidOf(r));
    else if (sameProcess && (p.pid != mine.pid || !probeOfThisProcess(ProbeNote{commKey_, p.token, r})))
      why = "rank " + std::to_string(r) + " reports this process's identity but is not one of its threads";
    else if (sameProcess) continue;
    else if (std::string pidWhy = cmaPeerPidError(p.pid); !pidWhy.empty())
      why = "rank " + std::to_string(r) + ": " + pidWhy;
    else if (p.fd < 0) why = "rank " + std::to_string(r) + " could not create a memfd";
    else if (std::string e = checkProbe(p); !e.empty()) why = "cannot map rank " + std::to_string(r) + "'s memory: " + e;
  }
  mine.ok = why.empty();
  PLAIT_RETURN_IF_ERROR(oob.allGather(info.data(), sizeof(ProbeInfo), deadline));
  enabled_ = true;
  oneProcess_ = true;
  for (int r = 0; r < nranks_; ++r) {
    enabled_ = enabled_ && info[r].ok;  // the second exchange's verdicts
    oneProcess_ = oneProcess_ && heard[r].identity == mine.identity;
    minBytes_ = r == 0 ? heard[r].minBytes : std::max<size_t>(minBytes_, heard[r].minBytes);
    minBytesUnsynced_ =
        r == 0 ? heard[r].minBytesUnsynced : std::max<size_t>(minBytesUnsynced_, heard[r].minBytesUnsynced);
    pairBroadcastMinBytes_ = r == 0 ? heard[r].pairBroadcastMinBytes
                                    : std::max<size_t>(pairBroadcastMinBytes_, heard[r].pairBroadcastMinBytes);
    pids_.push_back(heard[r].pid);
    identities_.push_back(heard[r].identity);
  }
  gatherPush_ = heard[0].push != 0;
  cmaMinBytes_ = heard[0].cmaMinBytes;  // rank 0's, as every rank must decide alike
  cmaMaxBytes_ = heard[0].cmaMaxBytes;
  cmaReduceMinBytes_ = heard[0].cmaReduceMinBytes;
  agreeAlways_ = heard[0].agree != 0;
  cmaWanted_ = std::all_of(heard.begin(), heard.end(), [](const ProbeInfo& i) { return i.cma != 0; });
  if (!enabled_) minBytes_ = minBytesUnsynced_ = pairBroadcastMinBytes_ = SIZE_MAX;
  if (enabled_) {
    PLAIT_INFO(kInit, "direct collectives on registered buffers: on from %zu bytes (%zu for the rooted ones and "
               "AlltoAll; %s, AllGather %s)", minBytes_, minBytesUnsynced_,
               oneProcess_ ? "ranks are threads of one process" : "peers map ncclMemAlloc memory via /proc",
               gatherPush_ ? "push" : "pull");
  } else {
    PLAIT_INFO(kInit, "direct collectives on registered buffers: off (%s)",
               why.empty() ? "another rank could not map its peers' memory" : why.c_str());
  }
  return Status::ok();
}

DirectPath::~DirectPath() = default;

Status DirectPath::registerBuffer(void* buff, size_t bytes, RegistrationKind kind, void** handle) {
  PLAIT_ASSIGN_OR_RETURN(*handle, registrations_.add(buff, bytes, kind));
  int none = kNoRegistration;
  firstRegistration_.compare_exchange_strong(none, kRegistrationPending, std::memory_order_release);
  return Status::ok();
}

Status DirectPath::deregisterBuffer(void* handle, RegistrationKind kind) { return registrations_.remove(handle, kind); }

// ---- one operation --------------------------------------------------------------

namespace {

bool supported(CollType c) { return c != CollType::kSend && c != CollType::kRecv; }
bool reduces(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kReduce || c == CollType::kReduceScatter;
}
bool rooted(CollType c) {
  return c == CollType::kBroadcast || c == CollType::kReduce || c == CollType::kGather || c == CollType::kScatter;
}

// NCCL's in-place forms: a rank's input `in` lies where its part of the
// output `out` does, `at` bytes in for the collectives whose parts are blocks
// (addresses, or offsets in one allocation).
bool inPlaceAt(CollType c, uint64_t in, uint64_t out, uint64_t at) {
  switch (c) {
    case CollType::kAllGather:
    case CollType::kGather: return in == out + at;
    case CollType::kReduceScatter:
    case CollType::kScatter: return out == in + at;
    default: return in == out;
  }
}

// Whether `rank`'s call is in place.
bool inPlace(const Task& t, int rank) {
  return inPlaceAt(t.coll, reinterpret_cast<uintptr_t>(t.sendbuff), reinterpret_cast<uintptr_t>(t.recvbuff),
                   t.count * typeSize(t.type) * static_cast<uint64_t>(rank));
}

// The collectives whose in-place root may copy a share of the others' blocks
// (DirectPath::rootShares_), and which buffer of the others that share lies
// in: their output (Broadcast, Scatter) or their input (Gather).
bool rootMayShare(CollType c) {
  return c == CollType::kBroadcast || c == CollType::kScatter || c == CollType::kGather;
}
bool shareInInput(CollType c) { return c == CollType::kGather; }

}  // namespace

DirectPath::Touched DirectPath::touched(const Task& t, int p) const {
  const size_t b = t.count * typeSize(t.type), all = b * static_cast<size_t>(nranks_);
  const bool root = p == t.root;
  switch (t.coll) {
    case CollType::kAllReduce: return {true, true, b, b};
    case CollType::kAllGather: return gatherPush_ ? Touched{false, true, 0, all} : Touched{true, false, b, 0};
    case CollType::kReduceScatter: return {true, false, all, 0};
    case CollType::kBroadcast: return {root, false, b, 0};
    case CollType::kReduce: return {true, root, b, b};
    case CollType::kAlltoAll: return {true, false, all, 0};
    case CollType::kGather: return {false, root, 0, all};
    case CollType::kScatter: return {root, false, all, 0};
    default: return {};
  }
}

Result<bool> DirectPath::run(const Task& task) {
  measuring_ = false;
  if (!enabled_ || !supported(task.coll)) return false;
  PLAIT_ASSIGN_OR_RETURN(bool direct, exchange(task));
  if (!direct) return false;
  Status s = resolve(task);
  if (s.isOk()) s = execute(task);
  PLAIT_RETURN_IF_ERROR(finish(std::move(s)));
  if (!alltoallSwap_ && alltoallStaged(task)) placeStagedAlltoAll(task);  // no peer reads our input any more
  return true;
}

// The descriptor's 32-bit check of what its shape does not hold: the count's
// low bits, with its high bits and the root's above 127 folded in by odd
// multipliers, so counts that differ by a multiple of 2^32 (or roots by 128)
// do not pass for equal and leave one rank using a larger block than its
// peer's buffers hold.
uint32_t DirectPath::countCheck(const Task& task) {
  const uint64_t count = task.count;
  const uint64_t rootHigh = rooted(task.coll) ? static_cast<uint64_t>(static_cast<uint32_t>(task.root)) >> 7 : 0;
  return static_cast<uint32_t>(count) ^ static_cast<uint32_t>((count >> 32) * 0x9E3779B1u) ^
         static_cast<uint32_t>(rootHigh * 0x85EBCA77u);
}

bool DirectPath::possibleRef(int32_t fd, bool oneProcess, bool cma) {
  return fd == kNone || (fd == kPointer && oneProcess) || (fd == kCma && cma) || (fd >= 0 && !oneProcess);
}

DirectPath::BufferRef DirectPath::describe(const void* ptr, size_t bytes, bool cmaOk) const {
  BufferRef ref;
  ref.fd = kNone;
  Registration reg;
  if (!registrations_.find(ptr, bytes, &reg)) {
    if (cmaOk && ptr != nullptr) {  // peers copy by process_vm_readv/writev
      ref.fd = kCma;
      ref.where = reinterpret_cast<uintptr_t>(ptr);
    }
    return ref;
  }
  if (oneProcess_) {
    ref.fd = kPointer;
    ref.where = reinterpret_cast<uintptr_t>(ptr);
  } else if (reg.fd >= 0) {
    ref.fd = reg.fd;
    ref.generation = reg.generation;
    ref.where = reinterpret_cast<uintptr_t>(ptr) - reinterpret_cast<uintptr_t>(reg.allocBase);
  }
  return ref;
}

// From this rank's settings: PLAIT_DIRECT_CMA_ADAPT and PLAIT_ALLTOALL_CMA are
// each rank's own, and the agreement settles any difference (every rank
// follows the deciding rank's vote; a rank that offered no cross-memory
// attach sends all to the FIFOs). mayUseCma() reads agreed settings only.
DirectPath::CmaOffer DirectPath::cmaOffer(const Task& task) const {
  const bool reduction = reduces(task.coll);
  const size_t block = task.count * typeSize(task.type);
  const bool ring = task.coll == CollType::kAllGather || task.coll == CollType::kBroadcast;
  const bool blocked = task.coll == CollType::kAllGather || task.coll == CollType::kReduceScatter;
  const bool alltoall = task.coll == CollType::kAlltoAll;
  CmaOffer offer;
  offer.largest = blocked ? block * nranks_ : block;
  const bool possible = cma_ && block >= cmaMinBytes_ && (!alltoall || alltoallCmaAllowed_);
  // The static rule; for every data mover, and for reductions at 2 ranks
  // (where both paths reduce the same two inputs, so give the same bits;
  // tests/api/test_coll_path_choice.cc), the measured choice instead. The
  // reproducible modes keep to the rule. AlltoAll where the local ranks
  // share cores: the FIFOs by the rule, cross-memory attach only by
  // measurement (in the VM's slow windows, perf/results/host/windows.md).
  offer.rule = possible && (!alltoall || alltoallCma_) &&
               (reduction ? offer.largest >= cmaReduceMinBytes_ : !(ring && offer.largest > cmaMaxBytes_));
  offer.adaptive = possible && adapt_ && (!reduction || (nranks_ == 2 && reproducible_ == kReproducibleOff));
  return offer;
}

bool DirectPath::mayUseCma(const Task& task) const {
  if (agreeAlways_) return true;
  const size_t block = task.count * typeSize(task.type);
  if (!cma_ || block < cmaMinBytes_) return false;  // agreed: rank 0's threshold, every rank's permission
  if (!reduces(task.coll)) return true;             // a data mover: the rule or the measured choice may
  const bool blocked = task.coll == CollType::kReduceScatter;
  // A reduction: by the rule from PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES (rank
  // 0's), or by the measured choice at 2 ranks outside the reproducible modes.
  return (blocked ? block * nranks_ : block) >= cmaReduceMinBytes_ ||
         (nranks_ == 2 && reproducible_ == kReproducibleOff);
}

// Steps 1 and 2 of the protocol. Every rank sees every descriptor, so every
// rank reaches the same answer (or the same error) from the same data.
Result<bool> DirectPath::exchange(const Task& task) {
  const bool reduction = reduces(task.coll);
  Descriptor& mine = descs_[rank_];
  mine = Descriptor();
  mine.shape = static_cast<uint32_t>(task.coll) | static_cast<uint32_t>(task.type) << 8 |
               (reduction ? static_cast<uint32_t>(task.op.kind) << 16 : 0) | (gatherPush_ ? 1u << 24 : 0) |
               (rooted(task.coll) ? (static_cast<uint32_t>(task.root) & 0x7f) << 25 : 0);
  mine.count = countCheck(task);
  mine.scalar = reduction ? task.op.scalar : 0;
  mine.send.fd = mine.recv.fd = kNone;
  alltoallSwap_ = false;
  const Touched me = touched(task, rank_);
  const CmaOffer offer = cmaOffer(task);
  const bool rule = offer.rule, adaptive = offer.adaptive;
  const size_t largest = offer.largest;
  if (adaptive && !chooser_) {  // the first call that may choose (about 77 KB of figures)
    chooser_ = std::make_unique<PathChooser>(exploreNs_);
    if (nranks_ == 2) stage_.resize(chunkBytes_ * 2);  // reductions may then go by CMA on any call
  }
  // A Broadcast's or Scatter's two forms have deciders of their own
  // (deciderOf), and the in-place one, a receiver, cannot tell whether the
  // root runs in place: both vote in their scalar (which these collectives
  // do not use), a bit per form, and every rank follows the vote of the form
  // the root's descriptor shows (below).
  const bool perForm = task.coll == CollType::kBroadcast || task.coll == CollType::kScatter;
  const bool myForm = inPlace(task, rank_);
  const bool decides = rank_ == deciderOf(task, myForm) || (perForm && rank_ == deciderOf(task, !myForm));
  if (adaptive && decides) measureStart_ = nowNs();  // the call is timed from its vote (record())
  auto vote = [&](bool inPlaceForm) {
    const int kind = PathChooser::kindOf(static_cast<int>(task.coll), inPlaceForm);
    const bool choosing = adaptive && rank_ == deciderOf(task, inPlaceForm);
    return choosing ? chooser_->choose(kind, largest, rule, measureStart_) : !adaptive && rule;
  };
  if (perForm)
    mine.scalar = (vote(false) ? kScalarVoteOutOfPlace : 0) | (vote(true) ? kScalarVoteInPlace : 0);
  else if (vote(myForm))
    mine.shape |= kShapeVoteCma;
  if (task.coll == CollType::kAlltoAll && myForm) mine.scalar = kScalarAlltoallInPlace;  // unused otherwise
  const bool cmaOffered = adaptive || rule;
  if (me.send) mine.send = describe(task.sendbuff, me.sendBytes, cmaOffered);
  if (me.recv) mine.recv = describe(task.recvbuff, me.recvBytes, cmaOffered);
  // An in-place root may copy a share of the others' blocks (rootShares_):
  // every rank describes the buffer its share would lie in, and the root's
  // two descriptions together say whether it is in place.
  if (rootMayShare(task.coll)) {
    const size_t b = task.count * typeSize(task.type);
    if (shareInInput(task.coll))
      mine.send = describe(task.sendbuff, b, cmaOffered);
    else
      mine.recv = describe(task.recvbuff, b, cmaOffered);
  }
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) PLAIT_RETURN_IF_ERROR(shm_->lineSend(p)->send(&mine, sizeof mine));
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) PLAIT_RETURN_IF_ERROR(shm_->lineRecv(p)->recv(&descs_[p], sizeof(Descriptor)));
  for (int p = 0; p < nranks_; ++p) {
    // Every rank reaches this same verdict; the vote bit may differ.
    if (((descs_[p].shape ^ mine.shape) & ~kShapeVoteCma) != 0 || descs_[p].count != mine.count)
      return invalidUsage("ranks disagree on the operation: rank " + std::to_string(p) + " runs " +
                          collName(static_cast<CollType>(descs_[p].shape & 0xff)) + " (shape " +
                          std::to_string(descs_[p].shape) + ", count check " + std::to_string(descs_[p].count) +
                          ") but rank " + std::to_string(rank_) + " runs " + collName(task.coll) + " with count " +
                          std::to_string(task.count) + " (shape " + std::to_string(mine.shape) + ", count check " +
                          std::to_string(mine.count) +
                          "; the shape encodes collective, type, op, PLAIT_DIRECT_ALLGATHER_PUSH and root, the check "
                          "the count and the root)");
  }
  // A peer's descriptor names only what that peer can have described in
  // this job (describe()): addresses in this process only where every rank
  // is a thread of it, addresses in the peer only where cross-memory attach
  // was agreed, memfds only between processes. Anything else would make this
  // rank follow a peer's address into its own memory; every rank sees the
  // same descriptors and refuses alike.
  for (int p = 0; p < nranks_; ++p)
    for (bool send : {true, false}) {
      const int32_t fd = (send ? descs_[p].send : descs_[p].recv).fd;
      if (!possibleRef(fd, oneProcess_, cma_))
        return invalidUsage("rank " + std::to_string(p) + "'s descriptor of its " + bufferName(send) +
                            " names a kind of buffer (" + std::to_string(fd) + ") it cannot have in this job " +
                            (oneProcess_ ? "(every rank is a thread of one process)"
                                         : cma_ ? "(ranks in several processes)"
                                                : "(ranks in several processes, no cross-memory attach)"));
    }
  // The deciding rank's vote, whether it chose by measurement or by the rule
  // (ranks may differ in PLAIT_DIRECT_CMA_ADAPT): every rank reads the same
  // bit. A rank that offered no cross-memory attach described its buffers as
  // kNone, which sends every rank to the FIFOs below.
  const bool rootInPlace = rootInPlaceByDescriptors(task);
  // Every rank follows one vote: that of the form the call has (for a
  // Broadcast or Scatter as the root's descriptor shows; else as the deciding
  // rank's own buffers show, which only it needs to know).
  const bool form = perForm ? rootInPlace : myForm;
  const int decider = deciderOf(task, form);
  const bool useCma = perForm ? (descs_[decider].scalar & (form ? kScalarVoteInPlace : kScalarVoteOutOfPlace)) != 0
                              : (descs_[decider].shape & kShapeVoteCma) != 0;
  const bool choosing = adaptive && rank_ == decider;
  bool anyCma = false;
  for (int p = 0; p < nranks_; ++p) {
    const Touched u = touched(task, p);
    for (bool send : {true, false}) {
      if (!(send ? u.send : u.recv)) continue;
      const int32_t fd = (send ? descs_[p].send : descs_[p].recv).fd;
      if (fd == kCma) anyCma = true;  // any rank's, this one's too: every rank must reach the same verdict
      if (fd != kNone) continue;
      const std::string why = "rank " + std::to_string(p) + "'s " + bufferName(send) +
                              " is not in registered memory that every rank can map";
      logOnce(task, false, why.c_str());
      return false;
    }
  }
  // The root's share may go by cross-memory attach where that path was
  // chosen, or where the call goes direct whatever the vote (every buffer it
  // must touch is registered): then there is no choice to time, and copying
  // a share that way beats copying none.
  rootShares_ = rootInPlace && othersOpenToShare(task, useCma || !anyCma);
  alltoallSwap_ = task.coll == CollType::kAlltoAll;
  for (int p = 0; p < nranks_ && alltoallSwap_; ++p) alltoallSwap_ = descs_[p].scalar == kScalarAlltoallInPlace;
  bool shareByCma = false;
  for (int p = 0; rootShares_ && p < nranks_; ++p)
    shareByCma = shareByCma || (p != task.root && shareRef(task, p).fd == kCma);
  // Every buffer is registered or open to cross-memory attach; the choice
  // between the latter and the FIFOs is timed (record()).
  if (anyCma && choosing) {
    measuring_ = true;
    measuredCma_ = useCma;
    measuredBytes_ = largest;
    measuredKind_ = PathChooser::kindOf(static_cast<int>(task.coll), form);
  }
  if (anyCma && !useCma) {
    logOnce(task, false, "the FIFOs were chosen over cross-memory attach");
    return false;
  }
  std::string how;
  if (anyCma)
    how = rootShares_ ? " by cross-memory attach, the root copying a share" : " by cross-memory attach";
  else if (rootShares_)
    how = shareByCma ? " on registered buffers, the root copying a share by cross-memory attach"
                     : " on registered buffers, the root copying a share";
  if (alltoallSwap_)
    how += anyCma ? ", swapping blocks in pairs" : " on registered buffers, swapping blocks in pairs";
  logOnce(task, true, how.c_str());
  return true;
}

// From the descriptors alone, so every rank reaches the same answer: the
// root's input and output described in one allocation (or address space) as
// NCCL's in-place form lies.
bool DirectPath::rootInPlaceByDescriptors(const Task& task) const {
  const Descriptor& r = descs_[task.root];
  const uint64_t at = task.count * typeSize(task.type) * static_cast<uint64_t>(task.root);
  return rootMayShare(task.coll) && r.send.fd != kNone && r.send.fd == r.recv.fd &&
         r.send.generation == r.recv.generation && inPlaceAt(task.coll, r.send.where, r.recv.where, at);
}

const DirectPath::BufferRef& DirectPath::shareRef(const Task& task, int p) const {
  return shareInInput(task.coll) ? descs_[p].send : descs_[p].recv;
}

// Every other rank's buffer holding the root's share is mapped or, where
// `cmaAllowed`, open to cross-memory attach (the same answer everywhere).
bool DirectPath::othersOpenToShare(const Task& task, bool cmaAllowed) const {
  for (int p = 0; p < nranks_; ++p) {
    const int32_t fd = shareRef(task, p).fd;
    if (p != task.root && (fd == kNone || (fd == kCma && !cmaAllowed))) return false;
  }
  return true;
}

// The rank whose call spans the whole operation on either path, so that its
// timings compare the two: rank 0; the root of a Reduce or a Gather (it
// receives last); the root of an out-of-place Broadcast or Scatter, as
// before the in-place form was told apart (its own copy is part of its call
// on both paths; with a receiver deciding, a 4 MiB Scatter took 1.6x the
// time in one 3-round A/B, within this VM's noise), but the last receiver of
// an in-place one, whose root returns from a FIFO call once its data is in
// the FIFOs (that call then looks cheap and the next call, whichever path it
// takes, pays its cost).
int DirectPath::deciderOf(const Task& task, bool inPlaceForm) const {
  const bool pulled = task.coll == CollType::kBroadcast || task.coll == CollType::kScatter;
  if (pulled && inPlaceForm) return (task.root + nranks_ - 1) % nranks_;
  return rooted(task.coll) ? task.root : 0;
}

void DirectPath::record() {
  if (!measuring_) return;
  measuring_ = false;
  const uint64_t now = nowNs();
  chooser_->record(measuredKind_, measuredBytes_, measuredCma_, now - measureStart_, now);
}

// The address of every buffer this rank touches, in its own address space.
Status DirectPath::resolve(const Task& task) {
  mappings_->beginOperation();
  // The root's share of an in-place Broadcast, Scatter or Gather: the
  // others' blocks, in their outputs or (Gather) inputs.
  const bool share = rootShares_ && rank_ == task.root;
  const size_t block = task.count * typeSize(task.type);
  for (int p = 0; p < nranks_; ++p) {
    sends_[p] = nullptr;
    recvs_[p] = nullptr;
    sendCma_[p] = recvCma_[p] = 0;
    if (p == rank_) {
      sends_[p] = static_cast<const char*>(task.sendbuff);
      recvs_[p] = static_cast<char*>(task.recvbuff);
      continue;
    }
    const Touched u = touched(task, p);
    if (u.send || (share && shareInInput(task.coll))) {
      PLAIT_ASSIGN_OR_RETURN(char* s, peerAddress(p, descs_[p].send, u.send ? u.sendBytes : block));
      sends_[p] = s;
      sendCma_[p] = descs_[p].send.fd == kCma;
    }
    if (u.recv || (share && !shareInInput(task.coll))) {
      PLAIT_ASSIGN_OR_RETURN(char* r, peerAddress(p, descs_[p].recv, u.recv ? u.recvBytes : block));
      recvs_[p] = r;
      recvCma_[p] = descs_[p].recv.fd == kCma;
    }
  }
  // An AlltoAll in place on every rank writes into the peers' inputs, which
  // are their outputs (swapBlocks).
  for (int p = 0; alltoallSwap_ && p < nranks_; ++p)
    if (p != rank_) {
      recvs_[p] = const_cast<char*>(sends_[p]);
      recvCma_[p] = sendCma_[p];
    }
  // Reductions by cross-memory attach stage n-1 inputs and one output per
  // chunk (Reduce's output slot even when every input is mapped).
  auto any = [](const std::vector<uint8_t>& v) {
    return std::any_of(v.begin(), v.end(), [](uint8_t c) { return c != 0; });
  };
  const size_t stageBytes = chunkBytes_ * static_cast<size_t>(nranks_);
  if (reduces(task.coll) && (any(sendCma_) || any(recvCma_)) && stage_.size() < stageBytes) stage_.resize(stageBytes);
  return Status::ok();
}

Result<char*> DirectPath::peerAddress(int peer, const BufferRef& ref, size_t bytes) {
  // kCma: an address in the peer, used only through transfer().
  if (ref.fd == kPointer || ref.fd == kCma) return reinterpret_cast<char*>(static_cast<uintptr_t>(ref.where));
  if (identities_[peer] == identities_[rank_]) {  // a thread of this process: its allocation is ours too
    size_t allocBytes = 0;
    void* base = host_memory::baseOf(ref.fd, ref.generation, &allocBytes);
    if (base == nullptr)
      return internalError("rank " + std::to_string(peer) + "'s allocation (fd " + std::to_string(ref.fd) +
                           ") is not live in this process");
    if (ref.where > allocBytes || bytes > allocBytes - ref.where)
      return invalidUsage("rank " + std::to_string(peer) + " described " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(ref.where) + " of an allocation of " +
                          std::to_string(allocBytes));
    return static_cast<char*>(base) + ref.where;
  }
  return mappings_->map(peer, pids_[peer], ref.fd, ref.generation, ref.where, bytes);
}

// Step 3: tell every peer how this rank's share went, hear how theirs went.
Status DirectPath::finish(Status mine) {
  const uint64_t word = mine.isOk() ? 0 : 1 + static_cast<uint64_t>(mine.code());
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) PLAIT_RETURN_IF_ERROR(shm_->lineSend(p)->send(&word, sizeof word));
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    uint64_t theirs = 0;
    PLAIT_RETURN_IF_ERROR(shm_->lineRecv(p)->recv(&theirs, sizeof theirs));
    if (theirs != 0 && mine.isOk())
      mine = remoteError("rank " + std::to_string(p) + " could not do its part of the direct " +
                         "operation (its error says why); the output is undefined");
  }
  if (!mine.isOk()) mine.withContext("direct path (registered buffers or cross-memory attach)");
  return mine;
}

void DirectPath::logOnce(const Task& task, bool direct, const char* why) {
  const size_t bytes = task.count * typeSize(task.type);
  PLAIT_TRACE(kColl, "%s %zu bytes: %s%s%s", collName(task.coll), bytes, direct ? "direct" : "FIFO path (",
              why, direct ? "" : ")");
  bool& logged = (direct ? loggedDirect_ : loggedFallback_)[static_cast<int>(task.coll) % kCollTypes];
  if (logged) return;
  logged = true;
  PLAIT_INFO(kColl, "%s %zu bytes: %s%s (first time; later operations are logged at TRACE)", collName(task.coll),
             bytes, direct ? (*why ? "direct" : "direct on registered buffers") : "FIFO path: ", why);
}

}  // namespace plait
