#include "transport/shm/shm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "base/log.h"

namespace plait {
namespace {

constexpr size_t kNameBytes = 64;

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Each rank's part of the connection exchange: its segment's name and the
// FIFO shapes it sized the segment with. Every byte is a named field (no
// padding goes over the bootstrap).
struct PeerInfo {
  char name[kNameBytes];
  int64_t ring[2], mesh[2], p2p[2];  // steps, bytes per step
  // Where its creator maps the segment: peers that are threads of the same
  // process name their releases there for ThreadSanitizer (base/tsan.h).
  uint64_t home;
};
static_assert(std::has_unique_object_representations_v<PeerInfo>);

std::string shapeText(const int64_t (&s)[2]) { return std::to_string(s[0]) + " x " + std::to_string(s[1]); }

// Ring FIFOs must have one shape on every rank (their senders write into
// the receiver's memory, network proxies relay whole steps); mesh and
// point-to-point FIFOs only between ranks of one host (a remote peer's
// point-to-point connectors are the network transport's, whose shape it
// checks itself: ShmTransportOptions::netP2p).
Status compareShapes(const PeerInfo& mine, int me, const PeerInfo& theirs, int peer, bool local) {
  auto same = [](const int64_t (&a)[2], const int64_t (&b)[2]) { return a[0] == b[0] && a[1] == b[1]; };
  if (same(mine.ring, theirs.ring) && (!local || (same(mine.mesh, theirs.mesh) && same(mine.p2p, theirs.p2p))))
    return Status::ok();
  auto text = [local](const PeerInfo& i) {
    return "ring " + shapeText(i.ring) +
           (local ? ", mesh " + shapeText(i.mesh) + ", point-to-point " + shapeText(i.p2p) : std::string());
  };
  return invalidUsage("FIFO shapes (steps x bytes) differ: rank " + std::to_string(peer) + " uses " + text(theirs) +
                      " where rank " + std::to_string(me) + " uses " + text(mine) +
                      "; set PLAIT_SHM_STEPS, PLAIT_SHM_STEP_BYTES, PLAIT_SHM_MESH_STEPS, PLAIT_SHM_MESH_STEP_BYTES, "
                      "PLAIT_SHM_P2P_STEPS and PLAIT_SHM_P2P_STEP_BYTES alike on every rank");
}

}  // namespace

size_t ShmTransport::ringOffset(int channel) const {
  return static_cast<size_t>(channel) * alignUp(options_.ring.totalBytes(), 4096);
}

size_t ShmTransport::meshOffset(int fromLocalIndex) const {
  return ringOffset(options_.nChannels) +
         static_cast<size_t>(fromLocalIndex) * alignUp(options_.mesh.totalBytes(), 4096);
}

// Two line FIFOs per sender: the collectives', then the point-to-point ones'.
size_t ShmTransport::lineOffset(int fromLocalIndex, bool p2p) const {
  return meshOffset(static_cast<int>(options_.localRanks.size())) +
         static_cast<size_t>(2 * fromLocalIndex + (p2p ? 1 : 0)) * alignUp(sizeof(LineFifoMemory), 4096);
}

size_t ShmTransport::p2pOffset(int fromLocalIndex) const {
  return lineOffset(static_cast<int>(options_.localRanks.size())) +
         static_cast<size_t>(fromLocalIndex) * alignUp(options_.p2p.totalBytes(), 4096);
}

size_t ShmTransport::segmentBytes() const { return p2pOffset(static_cast<int>(options_.localRanks.size())); }

WaitContext* ShmTransport::newContext(int peer, const char* what) {
  auto ctx = std::make_unique<WaitContext>();
  ctx->deadline = Deadline::never();
  ctx->abortFlag = options_.abortFlag;
  ctx->peerPid = options_.pids.empty() ? -1 : options_.pids[peer];
  ctx->peerRank = peer;
  ctx->oversubscribed = options_.oversubscribed;
  ctx->dedicatedCore = options_.dedicatedCores;
  ctx->waitTimeoutMs = options_.waitTimeoutMs;
  ctx->what = what;
  contexts_.push_back(std::move(ctx));
  return contexts_.back().get();
}

Result<std::unique_ptr<ShmTransport>> ShmTransport::connect(OobExchange& oob, const ShmTransportOptions& options,
                                                            Deadline deadline) {
  if (!options.ring.valid() || !options.mesh.valid() || !options.p2p.valid())
    return invalidArgument("shared-memory FIFO shapes out of range (steps in [1, " + std::to_string(kMaxFifoSteps) +
                           "], bytes per step a multiple of 64 in [64, " + std::to_string(kMaxFifoStepBytes) + "])");
  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->options_ = options;
  t->rank_ = oob.rank();
  const int nranks = oob.nranks();
  t->localIndex_.assign(nranks, -1);
  for (size_t i = 0; i < options.localRanks.size(); ++i) t->localIndex_[options.localRanks[i]] = static_cast<int>(i);
  auto remoteAt = [](const auto& v, int i) { return i < static_cast<int>(v.size()) ? v[i] : nullptr; };
  for (int c = 0; c < options.nChannels; ++c) {
    const int prev = options.ringPrev[c], next = options.ringNext[c];
    if ((t->localIndex_[prev] < 0 && remoteAt(options.remoteRingRecv, c) == nullptr) ||
        (t->localIndex_[next] < 0 && remoteAt(options.remoteRingSend, c) == nullptr))
      return invalidUsage("ring channel " + std::to_string(c) + " connects rank " + std::to_string(t->rank_) +
                          " to a rank on another host (" + std::to_string(prev) + " or " + std::to_string(next) +
                          ") and no network connector was given for it");
  }
  cleanupStaleSegments();  // segments of crashed jobs (creators of this pid namespace that are gone)
  // Every page allocated now (posix_fallocate) and mapped populated, in the
  // creator (which reads all of it) and in each sender the parts it writes:
  // a /dev/shm too small for the job fails init naming it, where an
  // unreserved page first written mid-collective would be a SIGBUS; and a
  // run's first calls do not pay a page fault on each new FIFO slot in both
  // processes (2-rank 1 KiB AllGather, no warm-up: the first 10 calls
  // averaged 3.4-5.5 us instead of 8.8-13.4; steady 1 us). As NCCL's
  // shared-memory segments. 2.4 MiB per rank at 2 local ranks sharing
  // cores (3.4 with a core each: 32 ring steps), 6.6 at 8, 12.3 at 16; past
  // options.reserveBudgetBytes in all (about 30-38 local ranks), pages come
  // on first use as before.
  t->reserved_ = t->segmentBytes() * options.localRanks.size() <= options.reserveBudgetBytes;
  auto seg = SharedSegment::create(t->segmentBytes(), SharedSegment::CreateOptions{.prefault = t->reserved_});
  if (!seg.isOk()) return seg.takeStatus();
  t->own_.emplace(std::move(seg).value());
  if (Status s = t->mapPeers(oob, deadline); !s.isOk()) {
    t->reclaimDeadPeers(s);
    return s;
  }
  PLAIT_INFO(kShm,
             "shm transport: %d channel(s) of %d x %zu KiB ring steps, mesh to %zu local peers, %d x %zu KiB "
             "point-to-point steps, %zu KiB segment",
             options.nChannels, options.ring.nSteps, options.ring.stepBytes >> 10, options.localRanks.size() - 1,
             options.p2p.nSteps, options.p2p.stepBytes >> 10, t->segmentBytes() >> 10);
  return t;
}

// Exchanges segment names, maps the segments this rank sends into, builds the
// connectors, then unlinks its own segment once everybody has mapped it.
Status ShmTransport::mapPeers(OobExchange& oob, Deadline deadline) {
  const int nranks = oob.nranks();
  std::vector<PeerInfo> infos(nranks);
  std::memset(infos.data(), 0, infos.size() * sizeof(PeerInfo));
  PeerInfo& mine = infos[rank_];
  std::strncpy(mine.name, own_->name().c_str(), kNameBytes - 1);
  mine.home = reinterpret_cast<uintptr_t>(own_->data());
  auto put = [](int64_t (&field)[2], const FifoShape& shape) {
    field[0] = shape.nSteps;
    field[1] = static_cast<int64_t>(shape.stepBytes);
  };
  put(mine.ring, options_.ring);
  put(mine.mesh, options_.mesh);
  put(mine.p2p, options_.p2p);
  PLAIT_RETURN_IF_ERROR(oob.allGather(infos.data(), sizeof(PeerInfo), deadline));
  for (int r = 0; r < nranks; ++r) {
    if (r == rank_) continue;
    infos[r].name[kNameBytes - 1] = '\0';
    PLAIT_RETURN_IF_ERROR(compareShapes(mine, rank_, infos[r], r, localIndex_[r] >= 0));
  }

  std::vector<void*> peerBase(nranks, nullptr);
  peerBase[rank_] = own_->data();
  for (int peer : options_.localRanks) {
    if (peer == rank_) continue;
    const std::string name(infos[peer].name);
    auto seg = SharedSegment::open(name, segmentBytes());
    if (!seg.isOk()) {
      // Its owner keeps the name until every rank has mapped it, so a
      // missing one means the owner is gone (killed, then swept as stale by
      // a rank's init, or failed and cleaned up): a remote failure, which
      // init completes with the names of the dead.
      if (!SharedSegment::exists(name)) {
        const int pid = peer < static_cast<int>(options_.pids.size()) ? options_.pids[peer] : -1;
        return remoteError("rank " + std::to_string(peer) + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "") +
                           "'s shared segment is gone before every rank mapped it: that rank left "
                           "initialisation (failed, aborted or died)");
      }
      return seg.takeStatus().withContext("mapping the shared segment of rank " + std::to_string(peer));
    }
    peerSegments_.push_back(std::move(seg).value());
    peerBase[peer] = peerSegments_.back().data();
    if (reserved_) populateSendSide(peerSegments_.back(), peer);
  }
  auto at = [](void* base, size_t off) { return static_cast<char*>(base) + off; };
  auto remoteAt = [](const auto& v, int i) { return i < static_cast<int>(v.size()) ? v[i] : nullptr; };
  for (int c = 0; c < options_.nChannels; ++c) {
    const int next = options_.ringNext[c], prev = options_.ringPrev[c];
    ringSend_.push_back(localIndex_[next] < 0 ? nullptr
                                              : std::make_unique<FifoSender>(at(peerBase[next], ringOffset(c)),
                                                                             options_.ring, newContext(next, "ring send")));
    ringRecv_.push_back(localIndex_[prev] < 0 ? nullptr
                                              : std::make_unique<FifoReceiver>(at(own_->data(), ringOffset(c)),
                                                                               options_.ring,
                                                                               newContext(prev, "ring receive")));
    ringSendAt_.push_back(ringSend_[c] ? ringSend_[c].get() : remoteAt(options_.remoteRingSend, c));
    ringRecvAt_.push_back(ringRecv_[c] ? ringRecv_[c].get() : remoteAt(options_.remoteRingRecv, c));
  }
  meshSend_.resize(nranks);
  meshRecv_.resize(nranks);
  lineSend_.resize(nranks);
  lineRecv_.resize(nranks);
  p2pLineSend_.resize(nranks);
  p2pLineRecv_.resize(nranks);
  p2pSend_.resize(nranks);
  p2pRecv_.resize(nranks);
  const int me = localIndex_[rank_];
  // The receiver's own address of `offset` in its segment, where it is a
  // thread of this process (ThreadSanitizer annotations); null otherwise.
  auto atOwner = [&](int peer, size_t offset) -> const void* {
    const bool here = peer < static_cast<int>(options_.pids.size()) && options_.pids[peer] == ::getpid();
    return here ? reinterpret_cast<const char*>(static_cast<uintptr_t>(infos[peer].home)) + offset : nullptr;
  };
  for (int peer : options_.localRanks) {
    if (peer == rank_) continue;
    meshSend_[peer] = std::make_unique<FifoSender>(at(peerBase[peer], meshOffset(me)), options_.mesh,
                                                   newContext(peer, "send"));
    meshRecv_[peer] = std::make_unique<FifoReceiver>(at(own_->data(), meshOffset(localIndex_[peer])), options_.mesh,
                                                     newContext(peer, "receive"));
    lineSend_[peer] = std::make_unique<LineSender>(at(peerBase[peer], lineOffset(me)), newContext(peer, "send"),
                                                   atOwner(peer, lineOffset(me)));
    lineRecv_[peer] =
        std::make_unique<LineReceiver>(at(own_->data(), lineOffset(localIndex_[peer])), newContext(peer, "receive"));
    p2pLineSend_[peer] = std::make_unique<LineSender>(at(peerBase[peer], lineOffset(me, true)),
                                                      newContext(peer, "point-to-point send"),
                                                      atOwner(peer, lineOffset(me, true)));
    p2pLineRecv_[peer] = std::make_unique<LineReceiver>(at(own_->data(), lineOffset(localIndex_[peer], true)),
                                                        newContext(peer, "point-to-point receive"));
    p2pSend_[peer] = std::make_unique<FifoSender>(at(peerBase[peer], p2pOffset(me)), options_.p2p,
                                                  newContext(peer, "point-to-point send"));
    p2pRecv_[peer] = std::make_unique<FifoReceiver>(at(own_->data(), p2pOffset(localIndex_[peer])), options_.p2p,
                                                    newContext(peer, "point-to-point receive"));
  }
  p2pSendAt_.assign(nranks, nullptr);
  p2pRecvAt_.assign(nranks, nullptr);
  for (int peer = 0; peer < nranks; ++peer) {
    p2pSendAt_[peer] = p2pSend_[peer] ? p2pSend_[peer].get() : remoteAt(options_.remoteP2pSend, peer);
    p2pRecvAt_[peer] = p2pRecv_[peer] ? p2pRecv_[peer].get() : remoteAt(options_.remoteP2pRecv, peer);
  }
  PLAIT_RETURN_IF_ERROR(oob.barrier(deadline));
  // Everybody has mapped everything: no name is needed any more. Peers'
  // names are unlinked here too (ENOENT is fine), so a peer that dies
  // between the barrier and its own unlink leaves nothing behind.
  for (SharedSegment& peer : peerSegments_) (void)peer.unlink();
  return own_->unlink();
}

// Maps the parts of `peer`'s segment this rank writes: the ring FIFOs of the
// channels whose next rank it is, and this rank's mesh, line and
// point-to-point FIFOs. Only those: the rest of a peer's segment is written
// by its other senders, so mapping it all would make each rank map every
// segment whole (page tables growing with the square of the local ranks).
void ShmTransport::populateSendSide(SharedSegment& segment, int peer) {
  const int me = localIndex_[rank_];
  for (int c = 0; c < options_.nChannels; ++c)
    if (options_.ringNext[c] == peer) (void)segment.populate(ringOffset(c), options_.ring.totalBytes());
  (void)segment.populate(meshOffset(me), options_.mesh.totalBytes());
  (void)segment.populate(lineOffset(me), sizeof(LineFifoMemory));
  (void)segment.populate(lineOffset(me, true), sizeof(LineFifoMemory));
  (void)segment.populate(p2pOffset(me), options_.p2p.totalBytes());
}

// A connect failed (this rank's own segment is unlinked by its destructor):
// when a local peer died during the exchange, its segment is still linked
// and nobody else will remove it. Its pid came from the bootstrap; a killed
// process may take a moment to exit, so a remote error (a peer died or
// timed out) waits for that up to 100 ms.
void ShmTransport::reclaimDeadPeers(const Status& failure) {
  std::vector<int> left;
  for (int peer : options_.localRanks)
    if (peer != rank_ && peer < static_cast<int>(options_.pids.size()) && options_.pids[peer] > 0)
      left.push_back(options_.pids[peer]);
  const Deadline until = Deadline::afterMs(failure.code() == Code::kRemoteError ? 100 : 0);
  for (;;) {
    left.erase(std::remove_if(left.begin(), left.end(), [](int pid) { return cleanupSegmentsOf(pid) > 0; }),
               left.end());
    if (left.empty() || until.expired()) break;
    usleep(5000);
  }
}

// Aborts the connectors this transport owns (the network's abort themselves).
void ShmTransport::abort() {
  for (auto& s : ringSend_) if (s) s->abort();
  for (auto& r : ringRecv_) if (r) r->abort();
  for (auto& s : meshSend_) if (s) s->abort();
  for (auto& r : meshRecv_) if (r) r->abort();
  for (auto& s : p2pSend_) if (s) s->abort();
  for (auto& r : p2pRecv_) if (r) r->abort();
  for (auto& s : lineSend_) if (s) s->abort();
  for (auto& r : lineRecv_) if (r) r->abort();
  for (auto& s : p2pLineSend_) if (s) s->abort();
  for (auto& r : p2pLineRecv_) if (r) r->abort();
}

ShmTransport::~ShmTransport() = default;

}  // namespace plait
