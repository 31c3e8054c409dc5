// p2p_transport.h — FIFOs in GPU memory between ranks whose devices can reach
// each other (NCCL's P2P transport), for the CUDA executor's kernels.
//
// Each rank allocates every device FIFO it *receives* on from a P2P peer in
// one block of its own device memory (cudaMalloc, zeroed): one ring FIFO per
// channel whose predecessor is a P2P peer, one point-to-point FIFO per P2P
// peer. It publishes a CUDA IPC handle of the block and the FIFOs' offsets
// through the bootstrap; a sender maps its receivers' blocks — with
// cudaIpcOpenMemHandle from another process, or by address (after
// cudaDeviceEnablePeerAccess) when both ranks are threads of one process —
// and writes payloads straight into the memory of the GPU that reads them.
// The FIFO layout is transport/fifo.h's, so the kernels do not know whether a
// FIFO is in device memory (P2P) or in host memory registered with CUDA (SHM).
//
// Which pairs use P2P (choosePeers): both ranks must say yes. A rank says yes
// to a peer when the core permits it (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL over the
// topology's path) and its device can reach the peer's: the same device
// (ranks sharing a GPU, PLAIT_ALLOW_SHARED_DEVICE), or a device this process
// sees (cudaDeviceGetByPCIBusId) with cudaDeviceCanAccessPeer.
//
// Built only with the CUDA executor (PLAIT_WITH_CUDA, or the emulator).
// Lifetime: between threads of one process a block stays until every rank
// that maps it is gone (a hold count), so a peer's kernel that starts after
// this rank destroyed its communicator still finds the memory. Across
// processes that rests on the IPC mapping keeping the allocation alive (the
// emulator's does; UNVERIFIED with CUDA's legacy IPC).
// Threading: connect and the destructor from one thread; markAborted from any.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "plait/status.hpp"
#include "transport/fifo.h"
#include "transport/oob.h"

namespace plait {

struct P2pPeerQuery {
  int rank = 0;
  int nranks = 1;
  int cudaDev = -1;                  // this rank's device
  std::vector<std::string> busIds;   // per rank: its device's PCI bus id ("" when unknown)
  std::vector<std::string> refusal;  // per rank: why the core forbids P2P to it, "" when it allows
};

// How this rank reaches each peer: P2P (true) or not, the same answer on
// both ends of every pair; `why[r]` says why not, or how ("P2P/IPC").
struct P2pPeers {
  std::vector<char> use;
  std::vector<std::string> why;
};

// Collective over the communicator (one all-gather of each rank's answers).
Result<P2pPeers> choosePeers(OobExchange& oob, const P2pPeerQuery& query, Deadline deadline);

struct P2pTransportOptions {
  int rank = 0;
  int nranks = 1;
  int cudaDev = -1;
  std::vector<char> use;       // per rank: choosePeers' answer
  std::vector<int> ringPrev;   // per channel: the rank this rank receives from
  std::vector<int> ringNext;   // per channel: the rank this rank sends to
  FifoShape ring;
  FifoShape p2p;
};

class P2pTransport {
 public:
  // Collective over the communicator (one all-gather): every rank calls it,
  // also ranks with no P2P peer. A rank that fails to allocate makes every
  // rank's connect fail, naming it.
  static Result<std::unique_ptr<P2pTransport>> connect(OobExchange& oob, const P2pTransportOptions& options,
                                                       Deadline deadline);
  ~P2pTransport();
  P2pTransport(const P2pTransport&) = delete;
  P2pTransport& operator=(const P2pTransport&) = delete;

  // Device addresses of FIFO memory; null where that edge is not P2P.
  void* ringRecv(int channel) const { return ringRecv_[channel]; }
  void* ringSend(int channel) const { return ringSend_[channel]; }
  void* p2pRecv(int peer) const { return p2pRecv_[peer]; }
  void* p2pSend(int peer) const { return p2pSend_[peer]; }
  // Bytes of device memory this rank allocated for FIFOs.
  size_t ownBytes() const { return ownBytes_; }

  // Marks this rank's end of every P2P FIFO aborted (asynchronous copies on
  // a stream of its own; does not wait), so peers' kernels waiting on it
  // give up. Best effort: kernels of this rank that see the abort flag mark
  // their FIFOs themselves.
  void markAborted();

 private:
  P2pTransport() = default;
  Status allocate();
  Status mapPeer(int peer, const struct P2pRecord& record, void** base);

  P2pTransportOptions options_;
  void* own_ = nullptr;  // our block of device memory
  size_t ownBytes_ = 0;
  void* stream_ = nullptr;  // cudaStream_t for initialisation and markAborted
  std::vector<size_t> ringOffset_;  // per channel: offset of our receive FIFO in own_, or kNone
  std::vector<size_t> p2pOffset_;   // per rank: likewise
  std::vector<void*> opened_;       // peers' blocks we opened by IPC (closed at destruction)
  std::vector<void*> held_;         // blocks of peer threads we hold (released at destruction)
  std::vector<void*> ringRecv_, ringSend_, p2pRecv_, p2pSend_;
};

}  // namespace plait
