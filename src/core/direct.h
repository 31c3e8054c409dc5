// direct.h — zero-copy collectives on registered buffers (and single-copy
// ones by cross-memory attach on unregistered buffers between processes):
// each rank reads its peers' inputs where they lie and writes results
// straight into their outputs, instead of staging every byte through a FIFO
// (DESIGN.md §10).
//
// Protocol, per operation, over the one-line FIFOs between local ranks:
//   1. Every rank sends every peer a one-line descriptor: the operation's
//      shape, and where its sendbuff and recvbuff lie (an ncclMemAlloc
//      allocation's fd, generation and offset, a plain pointer when every
//      rank is a thread of one process, or an address in the describing
//      process for cross-memory attach), and one bit, the rank's vote
//      between that attach and the FIFOs (below). Posting it also says "my
//      sendbuff is ready and my recvbuff may be written".
//   2. From all descriptors every rank computes the same decision: go
//      direct only if every buffer the algorithm touches in a peer is
//      registered and mappable, or open to cross-memory attach and the
//      deciding rank voted for it. Otherwise nothing was done and the caller
//      runs the FIFO path.
//   3. Each rank does its share (below), then sends every peer a completion
//      line and waits for every peer's, so no rank returns while a peer
//      still reads its sendbuff or writes its recvbuff. A rank that failed
//      (a peer mapping it could not open) still completes the handshake,
//      reporting the failure, so every rank returns an error and none hangs.
// Waits are the line FIFOs' own: the communicator's timeout, abort flag and
// dead-peer checks apply.
//
// AllReduce: rank r owns a 64-byte-aligned r-th part of the elements; it
// reduces the n inputs of that part in rank order 0..n-1 (the same order for
// every element, so results are deterministic and identical on all ranks),
// chunk by chunk, and writes each chunk's result into every rank's output.
// Each input element is read by one rank before any output element of its
// chunk is written, so in-place operation is safe. Reduce: the same parts,
// written into the root's output only. ReduceScatter: rank r reduces block r
// of every input into its own output. AllGather: each rank copies every
// peer's input into its own output (pull) or its input into every peer's
// output (push; PLAIT_DIRECT_ALLGATHER_PUSH). Broadcast and Scatter: each
// rank copies (its block of) the root's input into its output. Gather: each
// rank copies its input into its block of the root's output. An in-place
// root of these three, which has nothing to copy for itself, copies the last
// n-th of every other rank's block (writes it into their outputs; Gather:
// reads it from their inputs) while they copy the rest, where every such
// buffer is registered, or open to cross-memory attach when that path was
// chosen (or when every buffer peers must touch is registered). AlltoAll:
// rank r copies block r of every peer's input into its output. In place on
// every rank, each pair of ranks swaps its two blocks (block p of rank r's
// buffer and block r of rank p's), the lower rank half the elements and the
// higher rank the other half, each through a chunk of its own: no byte has
// two writers and none is read after another rank wrote it. Otherwise a rank
// whose buffers overlap at all copies its peers' blocks into a staging
// buffer of its own, and into its output once the completion handshake says
// no peer reads its input any more (peers would read blocks it overwrites).
// Only the buffers some other rank touches need to be registered (touched()
// says which; the buffers of an in-place root's share are optional: where
// one is not, the other ranks copy their whole blocks).
//
// Peers' ncclMemAlloc memory is mapped through /proc/<pid>/fd/<fd> on first
// use and the mapping cached (buffer_registry.h). Creation probes, once,
// that every rank can map every other rank's memory; if not, direct
// operation stays off and registration still works.
//
// Unregistered buffers of the data movers (AllGather, Broadcast, Scatter,
// Gather, AlltoAll) between processes: where the communicator agreed
// cross-memory attach at init (probeCma), a rank describes such a buffer by
// its address, and its peers copy straight out of it (process_vm_readv) or
// into it (process_vm_writev, Gather and AllGather push): one copy by the
// kernel instead of two through the FIFOs. The same agreement and completion
// handshake keep every buffer alive and unchanged while peers use it; it is
// used where each copy is at least PLAIT_DIRECT_CMA_MIN_BYTES (32 KiB) and,
// for AllGather and Broadcast, whose rings pass data on through the caches,
// up to PLAIT_DIRECT_CMA_MAX_BYTES (8 MiB) of their largest buffer.
// Reductions go this way too: each rank reads its peers' chunks of its part
// into staging slots (stageInputs), reduces them there and writes the result
// into the peers' outputs (process_vm_writev). As a static rule that is off
// (PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES); at 2 ranks the measured choice below
// makes it. On a quiet machine that loses to the FIFOs
// (a 2-rank 1 MiB AllReduce: 130-150 us against 50-60), in the windows in
// which shared-memory copies between cores crawl it wins (the FIFOs: 600-850).
//
// Which one runs is measured (path_choice.h, PLAIT_DIRECT_CMA_ADAPT): for the
// data movers at any rank count and the reductions at 2 ranks, one rank's
// chooser (deciderOf: rank 0's; the root's of a Reduce, a Gather or an
// out-of-place Broadcast or Scatter; the last receiver's of an in-place one)
// votes in its descriptor, the thresholds above giving only the first calls'
// path, and every rank follows that vote. The executor times the call (measuring(),
// record()), whichever path ran it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer_registry.h"
#include "core/path_choice.h"
#include "core/task.h"
#include "plait/status.hpp"
#include "transport/oob.h"
#include "transport/shm/shm_transport.h"

namespace plait {

class DirectPath {
 public:
  // Collective: every rank of the communicator calls it during creation,
  // after the shared-memory transport is connected. Direct operation is on
  // when every rank is on this host, nranks > 1, PLAIT_DIRECT is not 0 and
  // the mapping probe succeeded everywhere. Blocks on the out-of-band
  // exchange until `deadline`.
  // `cma`: the communicator agreed cross-memory attach between its local
  // ranks (the same on every rank); unregistered buffers may then go direct
  // too (the data movers, and the reductions as above).
  // `pids`: the bootstrap's pid of every rank (0 where unknown), which each
  // rank's probe must repeat; `commKey`: the same on every rank of this
  // communicator and no other (the bootstrap's job key).
  static Result<std::unique_ptr<DirectPath>> create(OobExchange& oob, ShmTransport* shm, bool cma,
                                                    const std::vector<int>& pids, uint64_t commKey,
                                                    Deadline deadline);
  ~DirectPath();
  DirectPath(const DirectPath&) = delete;
  DirectPath& operator=(const DirectPath&) = delete;

  bool enabled() const { return enabled_; }
  // PLAIT_REPRODUCIBLE as the communicator agreed it: floating reductions
  // then fold in rank order (foldInRankOrder), as every path does.
  void setReproducible(int mode) { reproducible_ = mode; }
  // Whether AlltoAll on unregistered buffers copies by cross-memory attach
  // by the static rule (`rule`), and whether it may at all (`allowed`: then
  // the measured choice may pick it where the rule does not, as where the
  // local ranks share cores). The same on every rank; PLAIT_ALLTOALL_CMA in
  // comm.cc.
  void setAlltoAllCma(bool rule, bool allowed) {
    alltoallCma_ = rule && allowed;
    alltoallCmaAllowed_ = allowed;
  }
  // Operations of `coll` of at least this many bytes (their largest buffer)
  // should call run(); SIZE_MAX when direct operation is off. Broadcast,
  // Reduce, Gather, Scatter and AlltoAll have a threshold of their own: on
  // the FIFO path their ranks need not wait for each other, and the
  // agreement makes every call wait for all (measured 3-4 us more per
  // unregistered call at 64-256 KiB, 2 ranks, on an AMD host; within the
  // noise from 1 MiB).
  // Broadcast at 2 ranks with a core each goes direct from
  // PLAIT_DIRECT_PAIR_BROADCAST_MIN_BYTES: there one copy by cross-memory
  // attach, waits included, cost less than the FIFOs' two (setBroadcastPair).
  size_t minBytes(CollType coll) const {
    const bool synchronizing =
        coll == CollType::kAllReduce || coll == CollType::kAllGather || coll == CollType::kReduceScatter;
    if (synchronizing) return minBytes_;
    if (coll == CollType::kBroadcast && broadcastPair_) return std::min(minBytesUnsynced_, pairBroadcastMinBytes_);
    return minBytesUnsynced_;
  }
  // Whether the communicator is 2 ranks with a core each that can attach to
  // each other's memory: the same on both (decided from exchanged values).
  void setBroadcastPair(bool pair) { broadcastPair_ = pair; }

  // Whether this call could go by cross-memory attach (by the static rule or
  // the measured choice): the same answer on every rank. Where it could not,
  // only registered buffers can make the call direct, and the executor asks
  // run() only when some rank had registered a buffer
  // (Communicator::directWorthAgreeing), sparing every call the agreement's
  // round of lines (which cost ReduceScatter 20-40% of its time at 4 ranks,
  // 64 KiB-1 MiB).
  // From settings every rank agreed only (at creation): PLAIT_DIRECT_CMA_ADAPT
  // and PLAIT_ALLTOALL_CMA are each rank's own, so where they could make the
  // call go by cross-memory attach on some rank, the answer is true (the
  // agreement then settles it, as before). PLAIT_DIRECT_AGREE=1 answers true
  // always.
  bool mayUseCma(const Task& task) const;

  // After run(): whether this rank chose between the FIFOs and cross-memory
  // attach for the call (core/path_choice.h). The executor calls record()
  // once the call is done, whichever path ran it: the time since the vote.
  bool measuring() const { return measuring_; }
  void record();

  // Collective for every rank of the communicator, with the same task shape.
  // True: the operation was done directly. False: the ranks agreed to fall
  // back and nothing was done. Send and Recv return false at once (on every
  // rank alike).
  Result<bool> run(const Task& task);

  // ncclCommRegister / ncclCommWindowRegister and their deregistration.
  // Thread-safe. Arguments are checked by the caller.
  Status registerBuffer(void* buff, size_t bytes, RegistrationKind kind, void** handle);
  // True once after the first registration: the thread that runs this
  // rank's operations then notes it on the op board (Communicator::announce),
  // in its own order with what it announces, whichever thread registered.
  bool takeFirstRegistration() {
    int pending = kRegistrationPending;
    return firstRegistration_.load(std::memory_order_relaxed) == kRegistrationPending &&
           firstRegistration_.compare_exchange_strong(pending, kRegistrationNoted, std::memory_order_acquire);
  }
  Status deregisterBuffer(void* handle, RegistrationKind kind);
  Result<Registration> registration(void* handle, RegistrationKind kind) const {
    return registrations_.lookup(handle, kind);
  }

  // Where a buffer of this rank lies, as peers see it (one line, with the
  // rest of the descriptor). Public for the implementation's helpers.
  struct BufferRef {
    int32_t fd = -1;  // >= 0: memfd; kNone: not usable; kPointer: `where` is an address; kCma: the same, in the peer
    uint32_t generation = 0;
    uint64_t where = 0;  // memfd: offset in the allocation
  };
  struct Descriptor {
    uint32_t shape = 0;  // collective, type, op kind, mode, root (mod 128): must match on every rank,
                         // but for kShapeVoteCma, the sender's vote
    uint32_t count = 0;  // countCheck(): the element count (and a root above 127), folded: must match too
    BufferRef send, recv;
    uint64_t scalar = 0;  // PreMulSum: this rank's scalar bits; Broadcast, Scatter: the sender's votes per form
  };
  // The checks on what peers send (pure, for tests): the descriptor's count
  // check of `task`; whether a peer's BufferRef::fd is one a rank can have
  // described in a job whose ranks are all threads of one process
  // (`oneProcess`) and that agreed on cross-memory attach (`cma`).
  static uint32_t countCheck(const Task& task);
  static bool possibleRef(int32_t fd, bool oneProcess, bool cma);

 private:
  DirectPath() = default;
  // Which of rank p's buffers other ranks read or write in `task`, and how
  // many bytes of each they may touch.
  struct Touched {
    bool send = false, recv = false;
    size_t sendBytes = 0, recvBytes = 0;
  };
  Touched touched(const Task& task, int p) const;
  // Broadcast, Scatter, Gather: whether the root copies a share of the
  // others' blocks (rootShares_), from the exchanged descriptors.
  bool rootInPlaceByDescriptors(const Task& task) const;
  bool othersOpenToShare(const Task& task, bool cmaAllowed) const;
  const BufferRef& shareRef(const Task& task, int p) const;  // rank p's buffer holding the share
  // The rank whose vote between the FIFOs and cross-memory attach counts,
  // for the call's out-of-place or in-place form.
  int deciderOf(const Task& task, bool inPlaceForm) const;
  // Whether the static rule sends this call by cross-memory attach, whether
  // the measured choice may, and the size the choice is made for.
  struct CmaOffer {
    bool rule = false, adaptive = false;
    size_t largest = 0;
  };
  CmaOffer cmaOffer(const Task& task) const;
  Status probe(OobExchange& oob, Deadline deadline);
  std::vector<int> bootstrapPids_;  // create()'s `pids`
  uint64_t commKey_ = 0;
  BufferRef describe(const void* ptr, size_t bytes, bool cmaOk) const;
  Result<bool> exchange(const Task& task);
  Status resolve(const Task& task);
  Result<char*> peerAddress(int peer, const BufferRef& ref, size_t bytes);
  Status finish(Status mine);
  void logOnce(const Task& task, bool direct, const char* why);
  // The algorithms (direct_algorithms.cc), on sends_ / recvs_.
  Status execute(const Task& task);
  // The data movers' copy of `count` elements from src to dst, where src is
  // in `peer`'s address space if sendCma_[peer] (process_vm_readv), or dst if
  // toPeer and recvCma_[peer] (process_vm_writev); else both are mapped here.
  Status transfer(const Task& task, int peer, bool toPeer, const char* src, char* dst, size_t count,
                  bool nonTemporal) const;
  Status allReduce(const Task& task);
  Status reduce(const Task& task);
  Status reduceScatter(const Task& task);
  size_t reductionChunk(size_t elem) const;
  // srcs_[p] = rank p's input at byte srcAt for `count` elements, here:
  // mapped, or copied into a staging slot when sendCma_[p].
  Status stageInputs(const Task& task, size_t srcAt, size_t count);
  // dsts[0..nDsts) = srcs_[0] op ... op srcs_[n-1] for `count` elements, in
  // rank order.
  void reduceInto(const Task& task, size_t count, char* const* dsts, int nDsts, bool nonTemporal);
  // reduceInto in the reproducible mode: the rank-order fold (or exact sum)
  // of the inputs each scaled and rounded by its own rank's scalar.
  void foldInto(const Task& task, size_t count, char* const* dsts, int nDsts, bool nonTemporal);
  Status allGather(const Task& task, bool push);
  Status rootedMove(const Task& task, bool stream);  // Broadcast, Scatter, Gather
  Status alltoAll(const Task& task, bool stream);
  // In place on every rank (alltoallSwap_): each pair of ranks swaps blocks.
  Status swapBlocks(const Task& task);
  // Otherwise, a rank whose AlltoAll's input and output overlap stages its
  // peers' blocks (alltoAll) and places them after the completion handshake.
  bool alltoallStaged(const Task& task) const;
  void placeStagedAlltoAll(const Task& task);
  Status reserveAlltoallStage(size_t bytes);
  void copy(const Task& task, const char* src, char* dst, size_t count, bool nonTemporal) const;

  int rank_ = 0;
  int nranks_ = 1;
  bool enabled_ = false;
  size_t minBytes_ = SIZE_MAX;
  size_t minBytesUnsynced_ = SIZE_MAX;
  size_t pairBroadcastMinBytes_ = SIZE_MAX;
  bool broadcastPair_ = false;
  size_t chunkBytes_ = 64 << 10;
  size_t streamBytes_ = SIZE_MAX;  // outputs at least this large use streaming stores
  bool gatherPush_ = false;
  bool rootShares_ = false;  // this operation's: an in-place rooted data mover's root copies a share (exchange())
  bool alltoallSwap_ = false;  // this operation's: an AlltoAll in place on every rank (exchange(), swapBlocks)
  ShmTransport* shm_ = nullptr;
  RegistrationTable registrations_;
  std::unique_ptr<PeerMappings> mappings_;
  std::vector<int> pids_;
  std::vector<uint64_t> identities_;  // per rank: host_memory::processIdentity()
  bool oneProcess_ = false;           // every rank is a thread of this process
  bool cma_ = false;                  // unregistered data-mover buffers go by cross-memory attach
  bool cmaWanted_ = false;            // PLAIT_DIRECT_CMA on every rank
  size_t cmaMinBytes_ = 0;            // PLAIT_DIRECT_CMA_MIN_BYTES / _MAX_BYTES as rank 0 has them
  size_t cmaMaxBytes_ = SIZE_MAX;
  size_t cmaReduceMinBytes_ = SIZE_MAX;  // PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES as rank 0 has it
  std::vector<uint8_t> sendCma_, recvCma_;  // per rank, this operation's: sends_/recvs_ is that peer's address
  std::vector<Descriptor> descs_;     // per rank, this operation's
  std::vector<const char*> sends_;    // per rank, this operation's input in this address space
  std::vector<char*> recvs_;          // per rank, this operation's output (AllGather pull: own only)
  std::vector<char*> dsts_;           // reduceInto's destinations for one chunk
  std::vector<const char*> srcs_;     // reduceInto's inputs for one chunk (stageInputs)
  std::vector<unsigned char> stage_;  // reductions by cross-memory attach: n-1 input slots and an output slot
  std::vector<unsigned char> scratch_;
  // An overlapping AlltoAll's n-1 peers' blocks (alltoallStaged), kept for
  // the next call up to kAlltoallStageKeptBytes (a call that allocates it
  // anew pays a page fault per page it fills; the FIFO path's staging of
  // such sends keeps up to 4 MiB, p2p_batch.cc); swapBlocks' chunk.
  std::vector<unsigned char> alltoallStage_;
  static constexpr size_t kAlltoallStageKeptBytes = size_t{64} << 20;
  static constexpr size_t kSwapChunkBytes = size_t{256} << 10;
  // None until the first registerBuffer, pending until the op thread takes it.
  static constexpr int kNoRegistration = 0, kRegistrationPending = 1, kRegistrationNoted = 2;
  std::atomic<int> firstRegistration_{kNoRegistration};
  bool agreeAlways_ = false;               // PLAIT_DIRECT_AGREE
  bool adapt_ = false;                    // PLAIT_DIRECT_CMA_ADAPT, where cross-memory attach is agreed
  uint64_t exploreNs_ = 0;                // PLAIT_DIRECT_CMA_EXPLORE_MS
  std::unique_ptr<PathChooser> chooser_;  // made by the first call that may choose
  bool measuring_ = false;                // run() left a choice for record()
  uint64_t measureStart_ = 0;             // when this rank voted
  bool measuredCma_ = false;
  size_t measuredBytes_ = 0;
  int measuredKind_ = 0;                  // PathChooser::kindOf the measured call
  // Descriptor::shape's bit for the sender's vote: cross-memory attach.
  static constexpr uint32_t kShapeVoteCma = 1u << 23;
  // A Broadcast's or Scatter's votes, one per form, in Descriptor::scalar (exchange()).
  static constexpr uint64_t kScalarVoteOutOfPlace = 1, kScalarVoteInPlace = 2;
  // An AlltoAll's Descriptor::scalar: the rank runs it in place (exchange()).
  static constexpr uint64_t kScalarAlltoallInPlace = 1;
  int reproducible_ = 0;             // PLAIT_REPRODUCIBLE (core/reproducible.h)
  bool alltoallCma_ = true;          // setAlltoAllCma: by the static rule
  bool alltoallCmaAllowed_ = true;   // setAlltoAllCma: by measurement
  std::vector<unsigned char> foldScratch_;  // foldInto: nranks scaled chunks and the result
  std::vector<const void*> foldInputs_;     // foldInto: per rank, its chunk (scaled or in place)
  static constexpr int kCollTypes = 10;  // CollType's values
  bool loggedDirect_[kCollTypes] = {};
  bool loggedFallback_[kCollTypes] = {};
};

}  // namespace plait
