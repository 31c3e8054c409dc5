// symmetric_work.h — what a symmetric kernel gets (algorithms/device/
// symmetric_kernel.cu): the device twins of the host's single-copy
// collectives, for buffers inside the device API's windows (core/symmetric.h).
//
// Every LSA rank maps every other's window memory at the flat layout: the
// copy of a window byte that rank q owns is at flat + q·stride + offset, the
// offset the same on every rank. So a kernel reads its peers' send buffers
// and writes their receive buffers directly (NVLink/PCIe loads and stores),
// with no FIFO and no proxy:
//   AllReduce      two-shot: rank r reduces share r of the buffer from every
//                  rank's send copy (in rank order, so the result is the same
//                  bits everywhere) and stores it into every rank's receive
//                  copy. In place is safe: only rank r touches share r.
//   ReduceScatter  rank r reduces block r from every rank's send copy into
//                  its own receive buffer.
//   AllGather      rank r stores its send buffer into block r of every
//                  rank's receive copy.
// Each thread block b works on part b of its range and meets block b of
// every peer at two barriers: on entry (the peers' buffers are ready: their
// earlier stream work is done) and on exit (every peer is done with this
// rank's memory). The barrier words live in an internal window, laid out
// below; each block counts its own launches (an epoch in device memory), so a
// captured graph replays correctly.
//
// Compiles with g++ and nvcc; needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/device/device_work.h"
#include "algorithms/reduce_ops.h"
#include "nccl.h"

namespace plait {

// Thread blocks one symmetric launch may use (each meets its peers' block).
constexpr int kMaxSymmetricBlocks = 32;
// LSA ranks a symmetric kernel serves (one thread per peer at a barrier).
constexpr int kMaxSymmetricRanks = 64;

// The barrier words in each rank's signal window: kMaxSymmetricBlocks epochs
// (this rank's launches so far, per block: read and written by that block
// only), then per block one inbox word per peer, which that peer writes with
// the sequence number it reached (kSymmetricPoison when it gave up).
constexpr size_t kSymmetricEpochBytes = kMaxSymmetricBlocks * sizeof(uint64_t);
constexpr uint64_t kSymmetricPoison = ~uint64_t(0);
PLAIT_HOST_DEVICE constexpr size_t symmetricSignalBytes(int lsaSize) {
  return kSymmetricEpochBytes + static_cast<size_t>(kMaxSymmetricBlocks) * static_cast<size_t>(lsaSize) * 8;
}
PLAIT_HOST_DEVICE constexpr size_t symmetricInboxOffset(int block, int lsaSize, int fromRank) {
  return kSymmetricEpochBytes + (static_cast<size_t>(block) * static_cast<size_t>(lsaSize) + fromRank) * 8;
}

struct SymmetricWork {
  DeviceColl coll = DeviceColl::kAllReduce;  // kAllReduce, kAllGather or kReduceScatter
  ncclDataType_t type = ncclFloat32;
  size_t elemSize = 4;
  RedOp op;                  // resolved; PreMulSum only where every rank has the same scalar (ncclAvg)
  char* flat = nullptr;      // the flat range: rank q's copies at flat + q·stride
  uint64_t stride = 0;
  int nranks = 1;            // the LSA team: the whole communicator
  int rank = 0;              // this rank's place in it
  uint64_t sendOffset = 0;   // of sendbuff in each rank's share of the flat range
  uint64_t recvOffset = 0;
  uint64_t signalOffset = 0; // of the signal window (symmetricSignalBytes(nranks) bytes)
  size_t count = 0;          // elements: the buffer (AllReduce), one rank's block (AllGather, ReduceScatter)
  size_t alignElems = 1;     // block parts are multiples of this
  uint32_t* abortFlag = nullptr;  // device-visible; non-zero: give up
  uint64_t timeoutCycles = 0;     // clock64() cycles per barrier wait; 0: none
  uint32_t* blockStatus = nullptr;  // gridDim.x words: a failing block stores its DeviceStatus
};
static_assert(sizeof(SymmetricWork) <= 4096);

// Why `work` cannot run on nBlocks blocks, or nullptr. Plain data only.
PLAIT_HOST_DEVICE inline const char* validateSymmetricWork(const SymmetricWork& w, int nBlocks) {
  if (nBlocks < 1 || nBlocks > kMaxSymmetricBlocks) return "nBlocks out of range";
  if (w.coll != DeviceColl::kAllReduce && w.coll != DeviceColl::kAllGather && w.coll != DeviceColl::kReduceScatter)
    return "not a symmetric collective";
  if (w.nranks < 1 || w.nranks > kMaxSymmetricRanks || w.rank < 0 || w.rank >= w.nranks) return "rank out of range";
  if (w.flat == nullptr || w.stride == 0) return "no flat range";
  if (w.elemSize == 0 || w.alignElems == 0) return "element size";
  if (w.signalOffset % 8 != 0) return "misaligned signal window";
  return nullptr;
}

}  // namespace plait
