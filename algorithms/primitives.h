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
  // `send` takes steps by reference (FifoSender::takesReferences: a network
  // connector's proxy sends from this process's memory): a slice that is
  // written to `dst` anyway goes out from there, not from a copy in the step.
  // The schedule must write each `dst` byte once per operation and wait for
  // the sender to drain before the operation ends (HostPrimitives::finish).
  bool sendByReference = false;
  // With sendByReference: `src` is never written during the operation (it
  // overlaps no output), so send(src) goes out from `src` itself too.
  bool srcStays = false;
};

class HostPrimitives {
 public:
  explicit HostPrimitives(const PrimitivesConfig& config)
      : cfg_(config),
        sliceElems_(config.sliceBytes / config.elemSize),
        preOp_(config.op.kind == RedOpKind::kPreMulSum && !config.srcScaled) {}
  // A schedule left without finish() (an exception) still gives up steps it
  // sent by reference before the buffers go back to the caller.
  ~HostPrimitives() {
    if (referenced_) (void)cfg_.send->abandonReferences(kLetGoMs);
  }
  HostPrimitives(const HostPrimitives&) = delete;
  HostPrimitives& operator=(const HostPrimitives&) = delete;
  HostPrimitives(HostPrimitives&& other) noexcept
      : cfg_(other.cfg_), sliceElems_(other.sliceElems_), preOp_(other.preOp_), referenced_(other.referenced_),
        status_(std::move(other.status_)) {
    other.referenced_ = false;
  }

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

  // Ends the operation's use of the buffers: steps sent by reference must
  // have left them before the caller may change them. After a failure the
  // sending end is given up instead (the proxy lets go of the steps; the
  // connection is unusable, as after any failed schedule). Returns status().
  Status finish();

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
  // How long finish() waits for a proxy to let go of steps sent by reference
  // after a failure (it answers within a nap, well under 1 ms).
  static constexpr int64_t kLetGoMs = 10'000;
  bool referenced_ = false;  // a step went by reference and finish() has not settled it
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
    // By reference: the slice goes out from the output it is written to, or
    // (a plain send of unscaled input that stays) from the input itself.
    const bool refDst = next && cfg_.sendByReference && out;
    if (next && cfg_.sendByReference && !out && !peer && !preOp_ && cfg_.srcStays) {
      referenced_ = true;
      cfg_.send->postReference(in + done * elem, bytes);
      done += elems;
      continue;
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
    if (next && !refDst) args.dsts[args.nDsts++] = next;
    args.nonTemporal = cfg_.nonTemporalOutput && next == nullptr;  // a slice to send stays in cache
    cfg_.fn(cfg_.op, args);
    if (refDst) {
      referenced_ = true;
      cfg_.send->postReference(out + done * elem, bytes);
    } else if (next) {
      cfg_.send->post(bytes);
    }
    if (peer) cfg_.recv->release();
    done += elems;
  }
  return true;
}

inline Status HostPrimitives::finish() {
  if (!referenced_) return status_;
  referenced_ = false;
  if (status_.isOk()) {
    Status drained = cfg_.send->waitDrained();
    if (drained.isOk()) return status_;
    fail(std::move(drained));
  }
  if (!cfg_.send->abandonReferences(kLetGoMs))
    fail(internalError("the network proxy still holds steps sent from the user's buffers " +
                       std::to_string(kLetGoMs) + " ms after the operation failed"));
  return status_;
}

}  // namespace plait
