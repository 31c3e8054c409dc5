// device_primitives.cuh — the data-movement verbs of algorithms/primitives.h,
// run by one thread block per channel, so that the schedules in ring_*.h
// compile unchanged for the GPU (DESIGN.md §3).
//
// The verbs, their arguments and their meaning are HostPrimitives': every
// verb moves `n` elements in slices of one FIFO step; `src` is the local user
// input, the only data the PreMulSum scalar applies to (a peer's data arrives
// already scaled by that peer); postOp applies to the result where the verb
// takes the flag; a received step whose size differs from the slice expected
// fails the channel; once a verb has failed every later verb fails at once.
//
// The FIFOs are transport/fifo.h's, in memory this GPU can reach: thread 0 of
// the block is the single producer or consumer the FIFO protocol requires.
// Per slice:
//   1. thread 0 waits for a posted step on the receive FIFO (tail > head) and
//      a free step on the send FIFO (tail - head < nSteps): acquire loads at
//      system scope, a bounded number of plain polls, then polls with a
//      __nanosleep backoff; every kCheckEvery polls it checks the abort flag,
//      both FIFO ends' abort words and the clock64() deadline. A step that is
//      ready is taken without looking at any of those, like the host FIFO.
//   2. __syncthreads: the block learns the outcome; all threads reduce-copy
//      the slice (reduce_copy.cuh).
//   3. __syncthreads, then thread 0 publishes: the step's size, a
//      __threadfence_system, tail with a release store (send FIFO), head with
//      a release store (receive FIFO).
// On failure thread 0 also marks this channel's ends of both FIFOs aborted
// (as FifoSender/FifoReceiver::abort do), so the neighbours' waits fail at
// once instead of running into their deadlines: a kernel cannot tell its
// peers it has stopped any other way. Unlike the host FIFO there is no futex
// wake: a host process sleeping on a FIFO this kernel writes notices a step
// at its next futex time-out (base/wait.h: at most 1 ms).
//
// Device code only. The block's threads must all call every verb, with the
// same arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/device/device_work.h"
#include "algorithms/device/reduce_copy.cuh"
#include "algorithms/portability.h"
#include "algorithms/reduce_ops.h"
#include "transport/fifo.h"

namespace plait {

struct DevicePrimitivesConfig {
  DeviceFifo recv;                // from the previous rank (memory null if unused)
  DeviceFifo send;                // to the next rank (memory null if unused)
  RedOp op;
  size_t sliceBytes = 0;          // bytes per FIFO step; a multiple of the element size, ≤ stepBytes
  uint32_t* abortFlag = nullptr;  // device-visible; non-zero: give up; null: none
  uint64_t timeoutCycles = 0;     // clock64() cycles from construction to the deadline; 0: none
};

// Block-shared state of a DevicePrimitives: declare it __shared__ in the
// kernel and pass its address to the constructor.
struct DevicePrimitivesShared {
  uint64_t recvHead;  // the receive FIFO's head when the block started
  uint64_t sendTail;  // the send FIFO's tail when the block started
  uint32_t status;    // thread 0's DeviceStatus for the current slice
};

template <class Fn>
class DevicePrimitives {
 public:
  using T = typename Fn::Elt;

  // Polls of a ready word before backing off with __nanosleep.
  static constexpr uint32_t kSpinPolls = 256;
  // Abort words and deadline are looked at every this many polls.
  static constexpr uint32_t kCheckEvery = 64;
  // __nanosleep backoff: doubles from the first value up to the last.
  static constexpr unsigned kMinSleepNs = 32, kMaxSleepNs = 1024;

  // Collective over the block (contains a __syncthreads).
  __device__ DevicePrimitives(const DevicePrimitivesConfig& config, DevicePrimitivesShared* shared)
      : cfg_(config),
        fn_(config.op),
        shared_(shared),
        sliceElems_(config.sliceBytes / sizeof(T) > 0 ? config.sliceBytes / sizeof(T) : 1) {
    if (threadIdx.x == 0) {
      deadline_ = cfg_.timeoutCycles == 0 ? 0 : static_cast<uint64_t>(clock64()) + cfg_.timeoutCycles;
      uint64_t head = 0, tail = 0;
      if (FifoControl* r = recvCtrl()) {
        head = AtomicRef<uint64_t>(r->head).load(mo::relaxed);
        cachedTail_ = AtomicRef<uint64_t>(r->tail).load(mo::acquire);
      }
      if (FifoControl* s = sendCtrl()) {
        tail = AtomicRef<uint64_t>(s->tail).load(mo::relaxed);
        cachedHead_ = AtomicRef<uint64_t>(s->head).load(mo::acquire);
      }
      shared_->recvHead = head;
      shared_->sendTail = tail;
    }
    __syncthreads();
    recvHead_ = shared_->recvHead;
    sendTail_ = shared_->sendTail;
  }

  // next <- src
  __device__ bool send(const void* src, size_t n) { return run(n, false, true, src, nullptr, false); }
  // dst <- prev
  __device__ bool recv(void* dst, size_t n) { return run(n, true, false, nullptr, dst, false); }
  // next <- op(prev, src)
  __device__ bool recvReduceSend(const void* src, size_t n) { return run(n, true, true, src, nullptr, false); }
  // dst, next <- op(prev, src) (postOp applied to both)
  __device__ bool recvReduceCopySend(const void* src, void* dst, size_t n, bool postOp) {
    return run(n, true, true, src, dst, postOp);
  }
  // dst <- op(prev, src)
  __device__ bool recvReduceCopy(const void* src, void* dst, size_t n, bool postOp) {
    return run(n, true, false, src, dst, postOp);
  }
  // dst, next <- prev
  __device__ bool recvCopySend(void* dst, size_t n) { return run(n, true, true, nullptr, dst, false); }
  // dst, next <- src
  __device__ bool copySend(const void* src, void* dst, size_t n) { return run(n, false, true, src, dst, false); }

  // The first failure, the same in every thread of the block.
  __device__ DeviceStatus status() const { return status_; }
  __device__ bool failed() const { return status_ != DeviceStatus::kOk; }

 private:
  __device__ FifoControl* recvCtrl() const { return static_cast<FifoControl*>(cfg_.recv.memory); }
  __device__ FifoControl* sendCtrl() const { return static_cast<FifoControl*>(cfg_.send.memory); }
  __device__ static char* stepBuffer(const DeviceFifo& f, uint64_t step) {
    char* steps = f.steps != nullptr ? static_cast<char*>(f.steps) : static_cast<char*>(f.memory) + kFifoControlBytes;
    return steps + static_cast<size_t>(step % static_cast<uint64_t>(f.nSteps)) * f.stepBytes;
  }

  // Thread 0: polls `ready` until it holds or a check fails. `mine` and
  // `theirs` are this end's and the other end's abort words in `ctrl`.
  template <class Ready>
  __device__ DeviceStatus waitUntil(Ready ready, uint32_t* mine, uint32_t* theirs) {
    unsigned sleepNs = kMinSleepNs;
    for (uint32_t polls = 1;; ++polls) {
      if (ready()) return DeviceStatus::kOk;
      if (polls % kCheckEvery == 0) {
        DeviceStatus s = DeviceStatus::kOk;
        if ((cfg_.abortFlag && AtomicRef<uint32_t>(*cfg_.abortFlag).load(mo::relaxed) != 0) ||
            AtomicRef<uint32_t>(*mine).load(mo::relaxed) != 0) {
          s = DeviceStatus::kAborted;
        } else if (AtomicRef<uint32_t>(*theirs).load(mo::relaxed) != 0) {
          s = DeviceStatus::kPeerAborted;
        } else if (deadline_ != 0 && static_cast<uint64_t>(clock64()) >= deadline_) {
          s = DeviceStatus::kTimeout;
        }
        if (s != DeviceStatus::kOk) return ready() ? DeviceStatus::kOk : s;
      }
      if (polls >= kSpinPolls) {
        __nanosleep(sleepNs);
        sleepNs = sleepNs < kMaxSleepNs ? sleepNs * 2 : kMaxSleepNs;
      }
    }
  }

  // Thread 0: waits for step recvHead_ to be posted and checks its size.
  __device__ DeviceStatus waitRecv(uint64_t expectBytes) {
    FifoControl* c = recvCtrl();
    if (cachedTail_ == recvHead_) {
      const DeviceStatus s = waitUntil(
          [&] {
            cachedTail_ = AtomicRef<uint64_t>(c->tail).load(mo::acquire);
            return cachedTail_ != recvHead_;
          },
          &c->receiverAborted, &c->senderAborted);
      if (s != DeviceStatus::kOk) return s;
    }
    const int slot = static_cast<int>(recvHead_ % static_cast<uint64_t>(cfg_.recv.nSteps));
    const uint64_t got = AtomicRef<uint64_t>(c->stepBytes[slot]).load(mo::relaxed);
    return got == expectBytes ? DeviceStatus::kOk : DeviceStatus::kSizeMismatch;
  }

  // Thread 0: waits for step sendTail_'s buffer to be free.
  __device__ DeviceStatus waitSend() {
    FifoControl* c = sendCtrl();
    const uint64_t nSteps = static_cast<uint64_t>(cfg_.send.nSteps);
    if (sendTail_ - cachedHead_ < nSteps) return DeviceStatus::kOk;
    return waitUntil(
        [&] {
          cachedHead_ = AtomicRef<uint64_t>(c->head).load(mo::acquire);
          return sendTail_ - cachedHead_ < nSteps;
        },
        &c->senderAborted, &c->receiverAborted);
  }

  // All threads: records the failure; thread 0 aborts this channel's FIFO ends.
  __device__ bool fail(DeviceStatus s) {
    if (status_ == DeviceStatus::kOk) status_ = s;
    if (threadIdx.x == 0) {
      if (FifoControl* r = recvCtrl()) AtomicRef<uint32_t>(r->receiverAborted).store(1, mo::release);
      if (FifoControl* w = sendCtrl()) AtomicRef<uint32_t>(w->senderAborted).store(1, mo::release);
    }
    return false;
  }

  // One pass over n elements, slice by slice, as HostPrimitives::run. Not
  // inlined into the verbs: one copy per functor keeps the kernels (and nvcc's
  // build time) small.
  __device__ __noinline__ bool run(size_t n, bool fromPrev, bool toNext, const void* src, void* dst, bool postOp) {
    if (failed()) return false;
    const char* in = static_cast<const char*>(src);
    char* out = static_cast<char*>(dst);
    for (size_t done = 0; done < n;) {
      const size_t elems = n - done < sliceElems_ ? n - done : sliceElems_;
      const uint64_t bytes = static_cast<uint64_t>(elems) * sizeof(T);
      if (threadIdx.x == 0) {
        DeviceStatus s = DeviceStatus::kOk;
        if (fromPrev) s = waitRecv(bytes);
        if (s == DeviceStatus::kOk && toNext) s = waitSend();
        shared_->status = static_cast<uint32_t>(s);
      }
      __syncthreads();
      const DeviceStatus s = static_cast<DeviceStatus>(shared_->status);
      if (s != DeviceStatus::kOk) return fail(s);

      const char* peer = fromPrev ? stepBuffer(cfg_.recv, recvHead_) : nullptr;
      char* next = toNext ? stepBuffer(cfg_.send, sendTail_) : nullptr;
      device::ReduceCopyPtrs p;
      p.count = elems;
      p.postOp = postOp;
      if (peer && in) {  // reduce: peer data was scaled by its sender; scale only ours
        p.src0 = peer;
        p.src1 = in + done * sizeof(T);
        p.preOpSrc1 = Fn::kHasPreOp;
      } else {
        p.src0 = peer ? peer : in + done * sizeof(T);
        p.preOpSrc0 = !peer && Fn::kHasPreOp;
      }
      p.dst0 = out ? out + done * sizeof(T) : nullptr;
      p.dst1 = next;
      device::blockReduceCopy(fn_, p);
      __syncthreads();  // every thread's reads of `peer` and writes to `next` are done

      if (threadIdx.x == 0) {
        if (toNext) {
          FifoControl* c = sendCtrl();
          const int slot = static_cast<int>(sendTail_ % static_cast<uint64_t>(cfg_.send.nSteps));
          AtomicRef<uint64_t>(c->stepBytes[slot]).store(bytes, mo::relaxed);
        }
        __threadfence_system();
        if (toNext) AtomicRef<uint64_t>(sendCtrl()->tail).store(sendTail_ + 1, mo::release);
        if (fromPrev) AtomicRef<uint64_t>(recvCtrl()->head).store(recvHead_ + 1, mo::release);
      }
      if (toNext) ++sendTail_;
      if (fromPrev) ++recvHead_;
      done += elems;
    }
    return true;
  }

  DevicePrimitivesConfig cfg_;
  Fn fn_;
  DevicePrimitivesShared* shared_;
  size_t sliceElems_;
  DeviceStatus status_ = DeviceStatus::kOk;
  uint64_t recvHead_ = 0;    // steps released on the receive FIFO (every thread)
  uint64_t sendTail_ = 0;    // steps posted on the send FIFO (every thread)
  uint64_t cachedTail_ = 0;  // thread 0: last tail read on the receive FIFO
  uint64_t cachedHead_ = 0;  // thread 0: last head read on the send FIFO
  uint64_t deadline_ = 0;    // thread 0: clock64() value of the deadline; 0: none
};

}  // namespace plait
