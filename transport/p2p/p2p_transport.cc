// p2p_transport.cc — see p2p_transport.h.
//
// UNVERIFIED ON HARDWARE: ranks on distinct GPUs (peer access over NVLink or
// PCIe, IPC between devices). Verified on one H100 shared by forked ranks
// (IPC within one device) and under the emulator (IPC between emulated
// devices, threads by address, pairs without peer access falling back to SHM).
#include "transport/p2p/p2p_transport.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "base/log.h"

namespace plait {

// What each rank publishes about its FIFO block. Followed in the all-gather
// slot by one offset per channel (its ring receive FIFO) and one per rank
// (its point-to-point receive FIFO from that rank); kNone where there is none.
struct P2pRecord {
  uint32_t magic;
  int32_t ok;  // 0: this rank failed to allocate (`error` says why)
  int32_t pid;
  int32_t cudaDev;
  uint64_t base;   // the block's address in its own process
  uint64_t bytes;  // its size
  cudaIpcMemHandle_t handle;
  char error[160];
};

namespace {

constexpr uint32_t kRecordMagic = 0x50325046;  // "P2PF"
constexpr size_t kNone = ~size_t(0);

Status cudaFailure(cudaError_t err, const std::string& what) {
  return Status(Code::kCudaError, what + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// This rank's answer about one peer: "" when its device can reach the
// peer's, else why not.
std::string reachability(const P2pPeerQuery& q, int peer) {
  const std::string& mine = q.busIds[q.rank];
  const std::string& theirs = q.busIds[peer];
  if (!mine.empty() && mine == theirs) return "";  // one device, shared (PLAIT_ALLOW_SHARED_DEVICE)
  if (theirs.empty()) return "the peer's device has no PCI bus id";
  int dev = -1;
  if (cudaDeviceGetByPCIBusId(&dev, theirs.c_str()) != cudaSuccess) {
    (void)cudaGetLastError();
    return "its device " + theirs + " is not visible to this process";
  }
  if (dev == q.cudaDev) return "";
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, q.cudaDev, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cudaDeviceCanAccessPeer failed";
  }
  if (can == 0)
    return "CUDA device " + std::to_string(q.cudaDev) + " cannot access device " + std::to_string(dev) +
           " (cudaDeviceCanAccessPeer)";
  return "";
}

// Blocks shared by address between ranks that are threads of this process.
// A peer's kernel may still start after the owner destroyed its
// communicator (the last rank of a Broadcast chain maps the root's FIFO and
// may launch after the root is done): as an IPC mapping would, each user
// holds the block, and the last release frees it.
struct SharedBlock {
  int device = -1;
  int holders = 0;
};
std::mutex gBlocksMu;
std::map<void*, SharedBlock>& sharedBlocks() {
  static auto* blocks = new std::map<void*, SharedBlock>();
  return *blocks;
}

void holdBlock(void* block, int device) {
  std::lock_guard<std::mutex> lock(gBlocksMu);
  SharedBlock& b = sharedBlocks()[block];
  b.device = device;
  ++b.holders;
}

// Holds `block` if it is still allocated; false when it was freed already.
bool holdIfAlive(void* block) {
  std::lock_guard<std::mutex> lock(gBlocksMu);
  auto it = sharedBlocks().find(block);
  if (it == sharedBlocks().end()) return false;
  ++it->second.holders;
  return true;
}

void releaseBlock(void* block) {
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(gBlocksMu);
    auto it = sharedBlocks().find(block);
    if (it == sharedBlocks().end() || --it->second.holders > 0) return;
    device = it->second.device;
    sharedBlocks().erase(it);
  }
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
  if (device >= 0 && device != saved) (void)cudaSetDevice(device);
  (void)cudaFree(block);
  if (saved >= 0 && device != saved) (void)cudaSetDevice(saved);
  (void)cudaGetLastError();
}

}  // namespace

Result<P2pPeers> choosePeers(OobExchange& oob, const P2pPeerQuery& q, Deadline deadline) {
  const int n = q.nranks;
  if (static_cast<int>(q.busIds.size()) != n || static_cast<int>(q.refusal.size()) != n)
    return internalError("choosePeers: per-rank vectors of the wrong size");
  P2pPeers out;
  out.use.assign(n, 0);
  out.why.assign(n, "");
  std::vector<char> rows(static_cast<size_t>(n) * n, 0);  // rows[a*n+b]: a says yes to b
  for (int r = 0; r < n; ++r) {
    if (r == q.rank) continue;
    out.why[r] = q.refusal[r].empty() ? reachability(q, r) : q.refusal[r];
    rows[static_cast<size_t>(q.rank) * n + r] = out.why[r].empty() ? 1 : 0;
  }
  PLAIT_RETURN_IF_ERROR(oob.allGather(rows.data(), static_cast<size_t>(n), deadline));
  for (int r = 0; r < n; ++r) {
    if (r == q.rank) continue;
    const bool mine = rows[static_cast<size_t>(q.rank) * n + r] != 0;
    const bool theirs = rows[static_cast<size_t>(r) * n + q.rank] != 0;
    out.use[r] = mine && theirs ? 1 : 0;
    if (mine && !theirs) out.why[r] = "rank " + std::to_string(r) + " cannot reach this rank's device";
  }
  return out;
}

Status P2pTransport::allocate() {
  const P2pTransportOptions& o = options_;
  size_t bytes = 0;
  ringOffset_.assign(o.ringPrev.size(), kNone);
  p2pOffset_.assign(o.nranks, kNone);
  for (size_t c = 0; c < o.ringPrev.size(); ++c) {
    if (o.use[o.ringPrev[c]] == 0) continue;
    ringOffset_[c] = bytes;
    bytes += o.ring.totalBytes();
  }
  for (int r = 0; r < o.nranks; ++r) {
    if (r == o.rank || o.use[r] == 0) continue;
    p2pOffset_[r] = bytes;
    bytes += o.p2p.totalBytes();
  }
  if (bytes == 0) return Status::ok();
  cudaStream_t stream = nullptr;
  cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cudaFailure(err, "cudaStreamCreateWithFlags");
  stream_ = stream;
  err = cudaMalloc(&own_, bytes);
  if (err != cudaSuccess) return cudaFailure(err, "cudaMalloc of " + std::to_string(bytes) + " bytes of P2P FIFOs");
  ownBytes_ = bytes;
  holdBlock(own_, o.cudaDev);
  // Zeroed on a stream of our own: cudaMemset would order itself after
  // every kernel of the legacy default stream.
  err = cudaMemsetAsync(own_, 0, bytes, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return cudaFailure(err, "zeroing the P2P FIFOs");
  return Status::ok();
}

Status P2pTransport::mapPeer(int peer, const P2pRecord& rec, void** base) {
  if (rec.pid == static_cast<int32_t>(::getpid())) {
    // A thread of this process: its address is ours. Another device needs
    // peer access enabled from ours (once per pair; again is harmless).
    *base = reinterpret_cast<void*>(static_cast<uintptr_t>(rec.base));
    if (!holdIfAlive(*base))
      return internalError("P2P: rank " + std::to_string(peer) + "'s FIFOs were freed before this rank mapped them");
    held_.push_back(*base);
    if (rec.cudaDev != options_.cudaDev) {
      const cudaError_t err = cudaDeviceEnablePeerAccess(rec.cudaDev, 0);
      if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
        return cudaFailure(err, "cudaDeviceEnablePeerAccess to device " + std::to_string(rec.cudaDev) + " (rank " +
                                    std::to_string(peer) + ")");
      (void)cudaGetLastError();
    }
    return Status::ok();
  }
  const cudaError_t err = cudaIpcOpenMemHandle(base, rec.handle, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return cudaFailure(err, "cudaIpcOpenMemHandle of rank " + std::to_string(peer) + "'s FIFOs");
  opened_.push_back(*base);
  return Status::ok();
}

Result<std::unique_ptr<P2pTransport>> P2pTransport::connect(OobExchange& oob, const P2pTransportOptions& options,
                                                             Deadline deadline) {
  std::unique_ptr<P2pTransport> t(new P2pTransport());
  t->options_ = options;
  const int n = options.nranks;
  const size_t nChannels = options.ringPrev.size();
  if (static_cast<int>(options.use.size()) != n || options.ringNext.size() != nChannels)
    return internalError("P2pTransport: per-rank or per-channel vectors of the wrong size");
  t->ringRecv_.assign(nChannels, nullptr);
  t->ringSend_.assign(nChannels, nullptr);
  t->p2pRecv_.assign(n, nullptr);
  t->p2pSend_.assign(n, nullptr);

  // Allocate and publish; a failure is published too, so that every rank
  // leaves after the same exchange.
  const size_t slot = sizeof(P2pRecord) + (nChannels + static_cast<size_t>(n)) * sizeof(uint64_t);
  std::vector<unsigned char> slots(slot * n, 0);
  P2pRecord mine{};
  mine.magic = kRecordMagic;
  mine.pid = static_cast<int32_t>(::getpid());
  mine.cudaDev = options.cudaDev;
  Status allocated = t->allocate();
  if (allocated.isOk() && t->own_ != nullptr) {
    const cudaError_t err = cudaIpcGetMemHandle(&mine.handle, t->own_);
    if (err != cudaSuccess) allocated = cudaFailure(err, "cudaIpcGetMemHandle of the P2P FIFOs");
  }
  mine.ok = allocated.isOk() ? 1 : 0;
  std::snprintf(mine.error, sizeof(mine.error), "%s", allocated.message().c_str());
  mine.base = reinterpret_cast<uintptr_t>(t->own_);
  mine.bytes = t->ownBytes_;
  unsigned char* my = slots.data() + slot * options.rank;
  std::memcpy(my, &mine, sizeof(mine));
  for (size_t c = 0; c < nChannels; ++c)
    std::memcpy(my + sizeof(P2pRecord) + c * sizeof(uint64_t), &t->ringOffset_[c], sizeof(uint64_t));
  for (int r = 0; r < n; ++r)
    std::memcpy(my + sizeof(P2pRecord) + (nChannels + r) * sizeof(uint64_t), &t->p2pOffset_[r], sizeof(uint64_t));
  PLAIT_RETURN_IF_ERROR(oob.allGather(slots.data(), slot, deadline));

  auto record = [&](int r) {
    P2pRecord rec;
    std::memcpy(&rec, slots.data() + slot * r, sizeof(rec));
    rec.error[sizeof(rec.error) - 1] = '\0';
    return rec;
  };
  auto offset = [&](int r, size_t index) {
    uint64_t v;
    std::memcpy(&v, slots.data() + slot * r + sizeof(P2pRecord) + index * sizeof(uint64_t), sizeof(v));
    return static_cast<size_t>(v);
  };
  for (int r = 0; r < n; ++r) {
    const P2pRecord rec = record(r);
    if (rec.magic != kRecordMagic) return internalError("P2P: rank " + std::to_string(r) + " sent no FIFO record");
    if (rec.ok == 0)
      return Status(Code::kCudaError, "P2P: rank " + std::to_string(r) + " could not set up its FIFOs: " + rec.error);
  }

  // Where we receive: our own block.
  char* own = static_cast<char*>(t->own_);
  for (size_t c = 0; c < nChannels; ++c)
    if (t->ringOffset_[c] != kNone) t->ringRecv_[c] = own + t->ringOffset_[c];
  for (int r = 0; r < n; ++r)
    if (t->p2pOffset_[r] != kNone) t->p2pRecv_[r] = own + t->p2pOffset_[r];

  // Where we send: the blocks of our P2P receivers, each mapped once.
  std::vector<void*> base(n, nullptr);
  auto peerFifo = [&](int r, size_t index, const FifoShape& shape, void** out) -> Status {
    const P2pRecord rec = record(r);
    const size_t off = offset(r, index);
    if (off == kNone || off > rec.bytes || rec.bytes - off < shape.totalBytes())
      return internalError("P2P: rank " + std::to_string(r) + " published no FIFO for this rank");
    if (base[r] == nullptr) PLAIT_RETURN_IF_ERROR(t->mapPeer(r, rec, &base[r]));
    *out = static_cast<char*>(base[r]) + off;
    return Status::ok();
  };
  for (size_t c = 0; c < nChannels; ++c) {
    const int next = options.ringNext[c];
    if (options.use[next] != 0) PLAIT_RETURN_IF_ERROR(peerFifo(next, c, options.ring, &t->ringSend_[c]));
  }
  for (int r = 0; r < n; ++r)
    if (r != options.rank && options.use[r] != 0)
      PLAIT_RETURN_IF_ERROR(peerFifo(r, nChannels + options.rank, options.p2p, &t->p2pSend_[r]));
  return t;
}

void P2pTransport::markAborted() {
  if (stream_ == nullptr) return;
  static const uint32_t kOne = 1;
  auto mark = [&](void* fifo, size_t field) {
    if (fifo == nullptr) return;
    if (cudaMemcpyAsync(static_cast<char*>(fifo) + field, &kOne, sizeof(kOne), cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(stream_)) != cudaSuccess)
      (void)cudaGetLastError();
  };
  for (void* f : ringRecv_) mark(f, offsetof(FifoControl, receiverAborted));
  for (void* f : p2pRecv_) mark(f, offsetof(FifoControl, receiverAborted));
  for (void* f : ringSend_) mark(f, offsetof(FifoControl, senderAborted));
  for (void* f : p2pSend_) mark(f, offsetof(FifoControl, senderAborted));
}

P2pTransport::~P2pTransport() {
  // First the stream: markAborted's writes into peers' blocks may still be
  // queued, and releasing a block (or closing its IPC mapping) below can
  // unmap it.
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
  for (void* p : held_) releaseBlock(p);
  if (own_ != nullptr) releaseBlock(own_);  // freed here unless a peer thread still holds it
  (void)cudaGetLastError();
}

}  // namespace plait
