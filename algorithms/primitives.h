// primitives.h — the data-movement verbs that schedules are written in.
//
// A channel of a ring receives from the previous rank and sends to the next
// through connector FIFOs. Every verb moves `n` elements in slices of one
// FIFO step each, so consecutive ranks work on consecutive slices at the same
// time (the pipeline). The fused verbs read the peer's slice and the local
// input, reduce, and write the result (to the output and/or the next rank's
// FIFO) in one pass over the data: that is where a collective library beats
// "memcpy, then reduce".
//
// Verbs return false on failure (deadline, abort, dead peer); status() then
// says why. Once a verb has failed every later verb fails immediately: a
// channel never continues with a torn pipeline. `src` arguments are the local
// user input, to which the PreMulSum scalar applies; data received from a peer
// has already been scaled by that peer.
//
// This is the host implementation; a device implementation with the same
// verbs lets the schedules in ring_*.h compile for both (DESIGN.md §3).
#pragma once

#include <cstddef>
#include <cstring>

#include "algorithms/portability.h"
#include "algorithms/reduce.h"
#include "plait/status.hpp"
#include "transport/fifo.h"

namespace plait {

struct PrimitivesConfig {
  FifoReceiver* recv = nullptr;  // from the previous rank (may be null if unused)
  FifoSender* send = nullptr;    // to the next rank (may be null if unused)
  ReduceCopyFn fn = nullptr;     // for the element type and op
  RedOp op;
  size_t elemSize = 1;
  size_t sliceBytes = 0;         // bytes per FIFO step; ≤ the FIFO's step size
  bool nonTemporalOutput = false;  // stream stores into the user's output
  // `src` already carries the PreMulSum scalar (a partial sum of this rank's
  // own making, in the log-depth schedules): it is not applied again.
  bool srcScaled = false;
};

class HostPrimitives {
 public:
  explicit HostPrimitives(const PrimitivesConfig& config)
      : cfg_(config),
        sliceElems_(config.sliceBytes / config.elemSize),
        preOp_(config.op.kind == RedOpKind::kPreMulSum && !config.srcScaled) {}

  // next <- src
  bool send(const void* src, size_t n) { return run(n, false, true, src, nullptr, false); }
  // dst <- prev
  bool recv(void* dst, size_t n) { return run(n, true, false, nullptr, dst, false); }
  // next <- op(prev, src)
  bool recvReduceSend(const void* src, size_t n) { return run(n, true, true, src, nullptr, false); }
  // dst, next <- op(prev, src) (postOp applied to both)
  bool recvReduceCopySend(const void* src, void* dst, size_t n, bool postOp) {
    return run(n, true, true, src, dst, postOp);
  }
  // dst <- op(prev, src)
  bool recvReduceCopy(const void* src, void* dst, size_t n, bool postOp) {
    return run(n, true, false, src, dst, postOp);
  }
  // dst, next <- prev
  bool recvCopySend(void* dst, size_t n) { return run(n, true, true, nullptr, dst, false); }
  // dst, next <- src
  bool copySend(const void* src, void* dst, size_t n) { return run(n, false, true, src, dst, false); }

  const Status& status() const { return status_; }
  bool failed() const { return !status_.isOk(); }

 private:
  // One pass over n elements, slice by slice. Which of {prev, src} are read
  // and {dst, next} written follows from the arguments.
  bool run(size_t n, bool fromPrev, bool toNext, const void* src, void* dst, bool postOp);
  bool fail(Status status) {
    if (status_.isOk()) status_ = std::move(status);
    return false;
  }

  PrimitivesConfig cfg_;
  size_t sliceElems_;
  bool preOp_;
  Status status_;
};

inline bool HostPrimitives::run(size_t n, bool fromPrev, bool toNext, const void* src, void* dst,
                                bool postOp) {
  if (failed()) return false;
  const size_t elem = cfg_.elemSize;
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  for (size_t done = 0; done < n;) {
    const size_t elems = n - done < sliceElems_ ? n - done : sliceElems_;
    const size_t bytes = elems * elem;
    const char* peer = nullptr;
    if (fromPrev) {
      size_t got = 0;
      auto slot = cfg_.recv->acquire(&got);
      if (!slot.isOk()) return fail(slot.takeStatus());
      if (got != bytes)
        return fail(internalError("FIFO step holds " + std::to_string(got) + " bytes, expected " +
                                  std::to_string(bytes) + " (ranks disagree on the operation?)"));
      peer = *slot;
    }
    char* next = nullptr;
    if (toNext) {
      auto slot = cfg_.send->acquire();
      if (!slot.isOk()) return fail(slot.takeStatus());
      next = *slot;
    }
    ReduceCopyArgs args;
    args.count = elems;
    args.postOp = postOp;
    if (peer && in) {  // reduce: peer data was scaled by its sender; scale only ours
      args.nSrcs = 2;
      args.srcs[0] = peer;
      args.srcs[1] = in + done * elem;
      args.preOpSrc1 = preOp_;
    } else {
      args.nSrcs = 1;
      args.srcs[0] = peer ? static_cast<const void*>(peer) : in + done * elem;
      args.preOpSrc0 = !peer && preOp_;
    }
    args.nDsts = 0;
    if (out) args.dsts[args.nDsts++] = out + done * elem;
    if (next) args.dsts[args.nDsts++] = next;
    args.nonTemporal = cfg_.nonTemporalOutput && next == nullptr;
    cfg_.fn(cfg_.op, args);
    if (next) cfg_.send->post(bytes);
    if (peer) cfg_.recv->release();
    done += elems;
  }
  return true;
}

}  // namespace plait
