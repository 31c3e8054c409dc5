// fifo.h — the connector FIFO: a single-producer single-consumer ring of
// `nSteps` step buffers in memory both sides can reach (a shared-memory
// segment now, CUDA IPC memory later). Header-only.
//
// Layout of the FIFO memory (owned by the receiver, zero-initialised):
//   [0, 4096)                        FifoControl: counters, sleepers, abort flags, step sizes
//   [4096 + i*stepBytes, +stepBytes) the buffer of step i (i in [0, nSteps))
// The sender writes a step's payload, then its size in stepBytes[i], then
// tail with a release store (DESIGN.md §10: on x86 one release flag after the
// payload beats per-word LL flags up to 4 KiB). The receiver reads tail with
// acquire, then the size and payload, and frees the step with a release store
// of head. Step n (counting from 0) uses buffer n % nSteps.
//
// Each end caches the other side's counter and re-reads it only when the
// cached value says it must wait, so a step in steady state costs the sender
// one store to the tail line and the receiver one store to the head line
// (plus the payload and size lines); neither reads the other's line until it
// runs out of steps. Waiting follows base/wait.h (spin, yield, futex on the low
// 32 bits of tail/head) and honours the WaitContext: deadline, the
// communicator's abort flag, peer liveness, and the other end's abort flag.
//
// Threading: one thread drives a FifoSender and one a FifoReceiver at a time
// (they may be in different processes). abort(), aborted() and peerAborted()
// touch only the shared control block and may be called from any thread at
// any time (ncclCommAbort); every other method is for the driving thread.
//
// FifoControl and FifoShape are plain data usable from device code; the
// FifoSender/FifoReceiver classes wait with OS calls and are host-only.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "algorithms/portability.h"
#include "base/wait.h"
#include "plait/status.hpp"

namespace plait {

constexpr int kMaxFifoSteps = 64;
// Offset of the first step buffer from the start of the FIFO memory: the
// control block gets a page of its own so step buffers are page aligned.
constexpr size_t kFifoControlBytes = 4096;

static_assert(std::endian::native == std::endian::little,
              "the futex word is the low 32 bits of a 64-bit counter: little-endian only");

// The shared control block. All counters count steps since the FIFO was
// zero-initialised and never wrap in practice (2^64 steps).
struct alignas(64) FifoControl {
  alignas(64) uint64_t tail;  // steps posted by the sender (written by the sender, release)
  alignas(64) uint64_t head;  // steps consumed by the receiver (written by the receiver, release)
  alignas(64) std::atomic<uint32_t> recvSleepers;  // receivers asleep on tail (base/wait.h)
  std::atomic<uint32_t> sendSleepers;              // senders asleep on head
  alignas(64) uint32_t senderAborted;              // non-zero: the sender aborted; receiver waits fail
  uint32_t receiverAborted;                        // non-zero: the receiver aborted; sender waits fail
  alignas(64) uint64_t stepBytes[kMaxFifoSteps];   // bytes in each posted step, written before tail
  // A word per step for an answer from the receiver (core/p2p_batch.cc: where a
  // single-copy write goes): the sender zeroes it before posting the step,
  // then both ends move it on by compare-and-swap (p2p_batch.cc's states), so the
  // first to act wins. A word belongs to one step until the sender posts
  // into that step's buffer again.
  alignas(64) uint64_t reply[kMaxFifoSteps];
  // Per step marked kStepReference: the address of its payload in the
  // sender's process (FifoSender::postReference). Only a network send
  // connector's proxy, in the same process, reads it.
  alignas(64) uint64_t source[kMaxFifoSteps];
};
static_assert(sizeof(FifoControl) <= kFifoControlBytes);

// Largest step buffer: 1 GiB keeps totalBytes() far from overflowing and the
// step size within the network API's int sizes.
constexpr size_t kMaxFifoStepBytes = size_t(1) << 30;

// A step's size word: the payload bytes in the low 48 bits, protocol flags
// above them. Only core/p2p_batch.cc sets flags: kStepLast ends a message, and
// kStepRendezvous marks a single-copy descriptor, which only a local peer
// whose connection agreed on cross-memory attach may send (never over a
// network: the proxy refuses any word with it). kStepPut marks the two steps
// of a single-copy write, the sender's request and its report that the data
// is in (the same rules: local peers only).
constexpr uint64_t kStepPayloadMask = (uint64_t(1) << 48) - 1;
constexpr uint64_t kStepLast = uint64_t(1) << 63;
constexpr uint64_t kStepRendezvous = uint64_t(1) << 62;
constexpr uint64_t kStepPut = uint64_t(1) << 61;
// The step's payload is not in its buffer but at FifoControl::source (a
// network send connector's proxy sends it from there: FifoSender::postReference).
// Set only by this process's schedule for its own proxy; never crosses a network.
constexpr uint64_t kStepReference = uint64_t(1) << 60;

// The shape both ends agree on (exchanged at connection time).
struct FifoShape {
  int nSteps = 8;        // in [1, kMaxFifoSteps]
  size_t stepBytes = 0;  // capacity of each step buffer; a multiple of 64 in [64, kMaxFifoStepBytes]

  PLAIT_HOST_DEVICE bool valid() const {
    return nSteps >= 1 && nSteps <= kMaxFifoSteps && stepBytes > 0 && stepBytes <= kMaxFifoStepBytes &&
           stepBytes % 64 == 0;
  }
  bool operator==(const FifoShape&) const = default;
  // Bytes of FIFO memory: the control page plus the step buffers, rounded up
  // to 4 KiB. Only for a valid() shape (then it cannot overflow).
  PLAIT_HOST_DEVICE size_t totalBytes() const {
    size_t bytes = kFifoControlBytes + static_cast<size_t>(nSteps) * stepBytes;
    return (bytes + 4095) & ~size_t(4095);
  }
};

// Resets FIFO memory that is reused (a fresh shared segment is already zero).
// Neither end may be using it.
inline void fifoReset(void* fifoMemory) { std::memset(fifoMemory, 0, sizeof(FifoControl)); }

namespace detail {
// `steps` when it is not the memory right after the control page `ctrl`, else null.
inline void* detached(const FifoControl* ctrl, const char* steps) {
  if (ctrl == nullptr || steps == reinterpret_cast<const char*>(ctrl) + kFifoControlBytes) return nullptr;
  return const_cast<char*>(steps);
}
// The 32-bit futex word of a 64-bit counter: its low half, which changes with every step.
inline std::atomic<uint32_t>* futexWordOf(uint64_t* counter) {
  return reinterpret_cast<std::atomic<uint32_t>*>(counter);
}
// Whether either end has called abort().
// Acquire: an end that gives up writes its reason (WaitContext::peerFailure)
// before it raises its flag, and the other end reads that reason next.
inline bool eitherAborted(FifoControl* ctrl) {
  return AtomicRef<uint32_t>(ctrl->senderAborted).load(mo::acquire) != 0 ||
         AtomicRef<uint32_t>(ctrl->receiverAborted).load(mo::acquire) != 0;
}
}  // namespace detail

// The sending end. Typical use, per step:
//   PLAIT_ASSIGN_OR_RETURN(char* buf, sender.acquire());
//   ... write up to shape().stepBytes bytes to buf ...
//   sender.post(n);
class FifoSender {
 public:
  FifoSender() = default;
  // `fifoMemory` is the receiver's FIFO memory as mapped by this process
  // (shape.totalBytes() bytes); `ctx` outlives this object and is read during
  // waits (the owner updates its deadline and `what` per operation).
  // `steps`, when given, holds the step buffers instead of the memory after
  // the control page (a network connector's steps in GPU memory, GPUDirect
  // RDMA); only kernels and the network touch those.
  FifoSender(void* fifoMemory, FifoShape shape, WaitContext* ctx, void* steps = nullptr)
      : ctrl_(static_cast<FifoControl*>(fifoMemory)),
        data_(steps ? static_cast<char*>(steps) : static_cast<char*>(fifoMemory) + kFifoControlBytes),
        shape_(shape),
        ctx_(ctx) {
    tail_ = AtomicRef<uint64_t>(ctrl_->tail).load(mo::relaxed);
    cachedHead_ = AtomicRef<uint64_t>(ctrl_->head).load(mo::acquire);
    slot_ = static_cast<int>(tail_ % static_cast<uint64_t>(shape_.nSteps));
  }

  // Waits until the next step's buffer is free and returns it (shape().stepBytes
  // bytes, 64-byte aligned). Calling it again before post() returns the same
  // buffer. A free step is returned without looking at anything else; a wait
  // fails with kRemoteError when the receiver aborted ("rank 1 aborted during
  // <what>") or died, when this end was aborted or the communicator's abort
  // flag is set ("aborted during <what>"), or at the deadline (base/wait.h).
  // Blocks.
  Result<char*> acquire() {
    if (__builtin_expect(tail_ - cachedHead_ < static_cast<uint64_t>(shape_.nSteps), 1)) return stepBuffer(slot_);
    return acquireSlow();
  }

  // The next step's buffer if it is free now, else nullptr. Never blocks.
  char* tryAcquire() {
    if (tail_ - cachedHead_ >= static_cast<uint64_t>(shape_.nSteps)) refreshHead();
    return tail_ - cachedHead_ < static_cast<uint64_t>(shape_.nSteps) ? stepBuffer(slot_) : nullptr;
  }

  // Publishes the acquired step with `bytes` (<= shape().stepBytes) of payload:
  // the size, then tail with release, then wakes the receiver if it sleeps.
  // Must follow a successful acquire()/tryAcquire(). Never blocks.
  void post(size_t bytes) {
    ctrl_->stepBytes[slot_] = bytes;
    AtomicRef<uint64_t>(ctrl_->tail).store(++tail_, mo::release);
    slot_ = slot_ + 1 == shape_.nSteps ? 0 : slot_ + 1;
    wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
  }

  // Network send connectors whose proxy can send from any memory of this
  // process (transport/net: the built-in socket module) take steps by
  // reference: set by the connector, before the schedule uses this end.
  void enableReferences() { references_ = true; }
  bool takesReferences() const { return references_; }
  // Like post(), for an acquired step whose `bytes` of payload stay at `data`
  // instead of the step's buffer: the proxy sends them from there. They must
  // not change until the step is released (drained(), waitDrained()). Only
  // where takesReferences().
  void postReference(const void* data, size_t bytes) {
    ctrl_->source[slot_] = reinterpret_cast<uintptr_t>(data);
    post(bytes | kStepReference);
  }
  // Waits until the receiver released every posted step (a proxy sent them
  // all): after steps by reference, before their memory may change. Fails as
  // acquire() does (abort, deadline, the receiver gave up).
  Status waitDrained() {
    auto ready = [this] { return drained() || detail::eitherAborted(ctrl_); };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers, *ctx_));
    if (drained()) return Status::ok();
    return aborted() ? abortedError(*ctx_) : peerAbortedError(*ctx_);
  }

  // After a failure with steps by reference still posted: gives up this end
  // (abort()) and waits, at most `ms`, until the receiver, a proxy, let go of
  // them: released them all or marked its own end aborted (it touches no step
  // after that). Ignores the abort flag, which is what may have ended the
  // schedule. False when the receiver did not answer in time.
  bool abandonReferences(int64_t ms) {
    abort();
    const uint64_t until = nowNs() + static_cast<uint64_t>(ms) * 1'000'000;
    while (!drained() && !peerAborted()) {
      if (nowNs() > until) return false;
      timespec ts{0, 50'000};
      nanosleep(&ts, nullptr);
    }
    return true;
  }

  // Gives up: marks the send end aborted in the control block and wakes both
  // ends. From then on every wait on either end fails (the receiver's with
  // "<peer> aborted during ...", this end's with "aborted during ..."); steps
  // already free here or posted there are still handed out. Any thread, any
  // time; never blocks; idempotent.
  void abort() {
    AtomicRef<uint32_t>(ctrl_->senderAborted).store(1, mo::release);
    wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
    wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
  }
  // Whether this end, or the receiver, has aborted. Any thread.
  bool aborted() const { return AtomicRef<uint32_t>(ctrl_->senderAborted).load(mo::acquire) != 0; }
  bool peerAborted() const { return AtomicRef<uint32_t>(ctrl_->receiverAborted).load(mo::acquire) != 0; }

  // The next step's reply word (FifoControl::reply), zeroed before post().
  void clearReply() { AtomicRef<uint64_t>(ctrl_->reply[slot_]).store(0, mo::relaxed); }
  // The reply word of posted step `step` (not yet released): 0 while unanswered.
  uint64_t replyOf(uint64_t step) const {
    return AtomicRef<uint64_t>(ctrl_->reply[step % static_cast<uint64_t>(shape_.nSteps)]).load(mo::acquire);
  }
  // Puts `value` in posted step `step`'s reply word if it holds *seen:
  // true then; else false with what it holds in *seen.
  bool replaceReply(uint64_t step, uint64_t* seen, uint64_t value) {
    return AtomicRef<uint64_t>(ctrl_->reply[step % static_cast<uint64_t>(shape_.nSteps)])
        .compare_exchange_strong(*seen, value, mo::acqRel, mo::acquire);
  }

  // Steps posted so far (the next step's number).
  uint64_t stepIndex() const { return tail_; }
  // Buffer index of the next step, in [0, nSteps).
  int slot() const { return slot_; }
  // Steps posted but not yet released by the receiver (re-reads head).
  uint64_t pending() const { return tail_ - AtomicRef<uint64_t>(ctrl_->head).load(mo::acquire); }
  // True when the receiver released every posted step (re-reads head).
  bool drained() const { return pending() == 0; }
  // The buffer of step-buffer `i` in [0, nSteps).
  char* stepBuffer(int i) const { return data_ + static_cast<size_t>(i) * shape_.stepBytes; }
  const FifoShape& shape() const { return shape_; }
  FifoControl* control() const { return ctrl_; }
  // The step buffers when they are not right after the control page, else null.
  void* detachedSteps() const { return detail::detached(ctrl_, data_); }
  WaitContext* waitContext() const { return ctx_; }

 private:
  void refreshHead() { cachedHead_ = AtomicRef<uint64_t>(ctrl_->head).load(mo::acquire); }

  __attribute__((noinline)) Result<char*> acquireSlow() {
    const uint64_t nSteps = static_cast<uint64_t>(shape_.nSteps);
    auto ready = [this, nSteps] {
      refreshHead();
      return tail_ - cachedHead_ < nSteps || detail::eitherAborted(ctrl_);
    };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers, *ctx_));
    if (aborted()) return abortedError(*ctx_);
    if (tail_ - cachedHead_ < nSteps) return stepBuffer(slot_);
    return peerAbortedError(*ctx_);
  }

  FifoControl* ctrl_ = nullptr;
  char* data_ = nullptr;
  FifoShape shape_;
  WaitContext* ctx_ = nullptr;
  uint64_t tail_ = 0;        // steps posted by this end (the shared tail's value)
  uint64_t cachedHead_ = 0;  // last head read; head only grows, so this is a lower bound
  int slot_ = 0;             // tail_ % nSteps
  bool references_ = false;  // enableReferences()
};

// The receiving end. Typical use, per step:
//   size_t n;
//   PLAIT_ASSIGN_OR_RETURN(const char* buf, receiver.acquire(&n));
//   ... read n bytes from buf ...
//   receiver.release();
class FifoReceiver {
 public:
  FifoReceiver() = default;
  // `fifoMemory` is this end's FIFO memory (shape.totalBytes() bytes,
  // zero-initialised before either end starts); `ctx` as for FifoSender.
  FifoReceiver(void* fifoMemory, FifoShape shape, WaitContext* ctx, void* steps = nullptr)
      : ctrl_(static_cast<FifoControl*>(fifoMemory)),
        data_(steps ? static_cast<char*>(steps) : static_cast<char*>(fifoMemory) + kFifoControlBytes),
        shape_(shape),
        ctx_(ctx) {
    head_ = AtomicRef<uint64_t>(ctrl_->head).load(mo::relaxed);
    cachedTail_ = AtomicRef<uint64_t>(ctrl_->tail).load(mo::acquire);
    slot_ = static_cast<int>(head_ % static_cast<uint64_t>(shape_.nSteps));
  }

  // Waits until the next step is posted; returns its buffer and stores its
  // payload size in *bytes. The buffer stays valid and unchanged until
  // release(). Calling it again before release() returns the same step.
  // A posted step is returned without looking at anything else; a wait fails
  // like FifoSender::acquire()'s (either end aborted, sender died, abort
  // flag, deadline). Blocks.
  Result<const char*> acquire(size_t* bytes) {
    if (__builtin_expect(cachedTail_ != head_, 1)) {
      *bytes = ctrl_->stepBytes[slot_];
      return stepBuffer(slot_);
    }
    return acquireSlow(bytes);
  }

  // The next step's buffer if it is posted now (size in *bytes), else nullptr.
  // Never blocks.
  const char* tryAcquire(size_t* bytes) {
    if (cachedTail_ == head_) refreshTail();
    if (cachedTail_ == head_) return nullptr;
    *bytes = ctrl_->stepBytes[slot_];
    return stepBuffer(slot_);
  }

  // Frees the acquired step for the sender: head with release (after every
  // read of the buffer), then wakes the sender if it sleeps. Must follow a
  // successful acquire()/tryAcquire(). Never blocks.
  void release() {
    AtomicRef<uint64_t>(ctrl_->head).store(++head_, mo::release);
    slot_ = slot_ + 1 == shape_.nSteps ? 0 : slot_ + 1;
    wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
  }

  // Puts `value` in step `step`'s reply word if it holds `expected` (the
  // acquired step's, head: stepIndex(), with 0 unless the sender put
  // something there first: FifoSender::replaceReply), and returns whether it
  // did. A released step's word stays the sender's to read until it posts
  // into that buffer again. Releases nothing.
  bool replaceReply(uint64_t step, uint64_t expected, uint64_t value) {
    return AtomicRef<uint64_t>(ctrl_->reply[step % static_cast<uint64_t>(shape_.nSteps)])
        .compare_exchange_strong(expected, value, mo::acqRel, mo::acquire);
  }
  // Step `step`'s reply word as it is now.
  uint64_t replyOf(uint64_t step) const {
    return AtomicRef<uint64_t>(ctrl_->reply[step % static_cast<uint64_t>(shape_.nSteps)]).load(mo::acquire);
  }

  // Gives up, like FifoSender::abort(): every later wait on either end fails.
  // Any thread, any time; never blocks; idempotent.
  void abort() {
    AtomicRef<uint32_t>(ctrl_->receiverAborted).store(1, mo::release);
    wake(detail::futexWordOf(&ctrl_->head), &ctrl_->sendSleepers);
    wake(detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers);
  }
  // Whether this end, or the sender, has aborted. Any thread.
  bool aborted() const { return AtomicRef<uint32_t>(ctrl_->receiverAborted).load(mo::acquire) != 0; }
  bool peerAborted() const { return AtomicRef<uint32_t>(ctrl_->senderAborted).load(mo::acquire) != 0; }

  // Steps released so far (the next step's number).
  uint64_t stepIndex() const { return head_; }
  // Buffer index of the next step, in [0, nSteps).
  int slot() const { return slot_; }
  // Steps posted and not yet released (re-reads tail).
  uint64_t pending() const { return AtomicRef<uint64_t>(ctrl_->tail).load(mo::acquire) - head_; }
  const char* stepBuffer(int i) const { return data_ + static_cast<size_t>(i) * shape_.stepBytes; }
  const FifoShape& shape() const { return shape_; }
  FifoControl* control() const { return ctrl_; }
  void* detachedSteps() const { return detail::detached(ctrl_, data_); }
  WaitContext* waitContext() const { return ctx_; }

 private:
  void refreshTail() { cachedTail_ = AtomicRef<uint64_t>(ctrl_->tail).load(mo::acquire); }

  __attribute__((noinline)) Result<const char*> acquireSlow(size_t* bytes) {
    auto ready = [this] {
      refreshTail();
      return cachedTail_ != head_ || detail::eitherAborted(ctrl_);
    };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::futexWordOf(&ctrl_->tail), &ctrl_->recvSleepers, *ctx_));
    if (aborted()) return abortedError(*ctx_);
    if (cachedTail_ == head_) return peerAbortedError(*ctx_);
    *bytes = ctrl_->stepBytes[slot_];
    return stepBuffer(slot_);
  }

  FifoControl* ctrl_ = nullptr;
  const char* data_ = nullptr;
  FifoShape shape_;
  WaitContext* ctx_ = nullptr;
  uint64_t head_ = 0;        // steps released by this end (the shared head's value)
  uint64_t cachedTail_ = 0;  // last tail read; tail only grows, so this is a lower bound
  int slot_ = 0;             // head_ % nSteps
};

}  // namespace plait
