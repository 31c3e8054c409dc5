// line_fifo.h — a FIFO of cache lines for small messages.
//
// Each 64-byte line carries up to kLinePayloadBytes of payload, the message
// size and a sequence number written last (release). A message spans
// consecutive lines; the receiver polls each line's own sequence number, so
// the lines of a message travel between cores in parallel and the first
// byte costs one cache-line hand-off instead of the two or three of a
// FifoSender/FifoReceiver step (counter line, then size and payload lines).
// This is the host's counterpart of NCCL's LL/LL128 protocols, where data and
// flag also share a line (DESIGN.md §10). Flow control: the receiver
// publishes how many lines it consumed in `head`, which the sender re-reads
// only when its cached credit runs out. A receiver that sleeps sleeps on the
// FIFO's doorbell, which the sender rings once per message (one FUTEX_WAKE
// however many lines the message spans), and only when someone sleeps.
//
// Memory is plain data in a segment both processes map, zeroed before use.
// Waits follow base/wait.h (deadline, abort flag, dead peer).
#pragma once

#include <atomic>
#include <cstring>

#include "algorithms/portability.h"
#include "base/tsan.h"
#include "base/wait.h"
#include "plait/status.hpp"

namespace plait {

// 512 lines (32 KiB): with 128, 4 ranks on 2 cores took 1.04-1.64x as long
// for 1-2 KiB AllReduce, AllGather, Broadcast, Reduce, Gather and AlltoAll
// (256-512 B 0.88-1.30x); 2 ranks 0.94-1.19x
// (perf/results/host/fifo_steps.md).
constexpr int kLineSlots = 512;
constexpr size_t kLinePayloadBytes = 48;
// The largest message: 64 lines, so a sender can run kLineSlots / 64 (8)
// such messages ahead (at least 2, which the deadlock-freedom arguments of
// core/one_shot.cc and core/p2p.cc need).
constexpr size_t kLineMaxMessageBytes = kLinePayloadBytes * 64;
static_assert(kLineMaxMessageBytes * 2 <= kLinePayloadBytes * kLineSlots);

struct alignas(64) LineCell {
  unsigned char payload[kLinePayloadBytes];
  uint64_t bytes;  // the whole message's size
  uint64_t seq;    // line number + 1 once posted; written last
};
static_assert(sizeof(LineCell) == 64);

struct alignas(64) LineFifoMemory {
  LineCell cells[kLineSlots];
  alignas(64) uint64_t head;  // lines consumed by the receiver
  alignas(64) std::atomic<uint32_t> recvSleepers;
  alignas(64) std::atomic<uint32_t> doorbell;  // rung after a message is posted, while the receiver sleeps
  alignas(64) std::atomic<uint32_t> sendSleepers;
  alignas(64) uint32_t senderAborted;
  uint32_t receiverAborted;
};

namespace detail {
inline std::atomic<uint32_t>* lowWord(uint64_t* v) { return reinterpret_cast<std::atomic<uint32_t>*>(v); }
inline bool lineAborted(LineFifoMemory* m) {
  return AtomicRef<uint32_t>(m->senderAborted).load(mo::acquire) != 0 ||
         AtomicRef<uint32_t>(m->receiverAborted).load(mo::acquire) != 0;
}
// Bumps the doorbell (release: a receiver that reads the new value sees the
// lines posted before it) and wakes its sleepers.
inline void ringDoorbell(LineFifoMemory* m) {
  m->doorbell.fetch_add(1, std::memory_order_release);
  wakeSlow(&m->doorbell);
}
inline uint64_t linesFor(size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kLinePayloadBytes - 1) / kLinePayloadBytes;
}
}  // namespace detail

class LineSender {
 public:
  // `ownerMemory`: where the receiver maps `memory`, when the receiver is a
  // thread of this process (ThreadSanitizer annotations, base/tsan.h); null
  // otherwise.
  LineSender(void* memory, WaitContext* ctx, const void* ownerMemory = nullptr)
      : m_(static_cast<LineFifoMemory*>(memory)), ctx_(ctx), owner_(static_cast<const char*>(ownerMemory)) {}

  // Copies bytes (≤ kLineMaxMessageBytes) into the next lines and posts
  // them. Blocks only while the receiver holds too many unconsumed lines.
  Status send(const void* data, size_t bytes) {
    const uint64_t lines = detail::linesFor(bytes);
    if (__builtin_expect(step_ + lines - cachedHead_ > kLineSlots, 0)) PLAIT_RETURN_IF_ERROR(waitCredit(step_, lines));
    post(data, bytes, lines);
    return Status::ok();
  }
  // send() that returns false instead of waiting for credit.
  bool trySend(const void* data, size_t bytes) {
    if (!hasRoom(bytes)) return false;
    post(data, bytes, detail::linesFor(bytes));
    return true;
  }
  // Whether a message of `bytes` would go without waiting.
  bool hasRoom(size_t bytes) {
    const uint64_t lines = detail::linesFor(bytes);
    return step_ + lines - cachedHead_ <= kLineSlots || creditFor(step_, lines);
  }
  bool aborted() const { return detail::lineAborted(m_); }
  // The error once aborted(): this side's abort, or the peer's.
  Status abortError() const {
    if (AtomicRef<uint32_t>(m_->senderAborted).load(mo::acquire)) return abortedError(*ctx_);
    return peerAbortedError(*ctx_);
  }
  // What a sender waiting for credit sleeps on (the receiver wakes it).
  std::atomic<uint32_t>* creditWord() { return detail::lowWord(&m_->head); }
  std::atomic<uint32_t>* creditSleepers() { return &m_->sendSleepers; }
  // Any thread (ncclCommAbort), also while send() runs on another.
  void abort() {
    AtomicRef<uint32_t>(m_->senderAborted).store(1, mo::release);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // as in wake()
    if (m_->recvSleepers.load(std::memory_order_relaxed) != 0) detail::ringDoorbell(m_);
  }

 private:
  void post(const void* data, size_t bytes, uint64_t lines) {
    const uint64_t first = step_;
    const unsigned char* src = static_cast<const unsigned char*>(data);
    for (uint64_t i = 0; i < lines; ++i) {
      LineCell& cell = m_->cells[(first + i) % kLineSlots];
      const size_t off = i * kLinePayloadBytes;
      if (bytes - off >= kLinePayloadBytes) std::memcpy(cell.payload, src + off, kLinePayloadBytes);  // inlined
      else if (bytes) std::memcpy(cell.payload, src + off, bytes - off);
      cell.bytes = bytes;
      if (owner_) tsanRelease(atOwner(&cell.seq));
      AtomicRef<uint64_t>(cell.seq).store(first + i + 1, mo::release);
    }
    step_ = first + lines;
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the sleeping receiver's fence
    if (__builtin_expect(m_->recvSleepers.load(std::memory_order_relaxed) != 0, 0)) detail::ringDoorbell(m_);
  }
  // Re-reads the receiver's head: whether `lines` more fit after `step`.
  bool creditFor(uint64_t step, uint64_t lines) {
    cachedHead_ = AtomicRef<uint64_t>(m_->head).load(mo::acquire);
    if (owner_) tsanAcquire(atOwner(&m_->head));
    return step + lines - cachedHead_ <= kLineSlots;
  }
  __attribute__((noinline)) Status waitCredit(uint64_t step, uint64_t lines) {
    auto ready = [this, step, lines] { return creditFor(step, lines) || detail::lineAborted(m_); };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::lowWord(&m_->head), &m_->sendSleepers, *ctx_));
    if (step + lines - cachedHead_ <= kLineSlots) return Status::ok();
    return abortError();
  }

  // The receiver's address of a word of the memory.
  const void* atOwner(const void* word) const {
    return owner_ + (static_cast<const char*>(word) - reinterpret_cast<const char*>(m_));
  }

  LineFifoMemory* m_;
  WaitContext* ctx_;
  const char* owner_;
  uint64_t step_ = 0;  // lines posted so far
  uint64_t cachedHead_ = 0;
};

class LineReceiver {
 public:
  LineReceiver(void* memory, WaitContext* ctx) : m_(static_cast<LineFifoMemory*>(memory)), ctx_(ctx) {}

  // Waits for the next message, which must be `bytes` long, copies it to dst
  // and frees its lines. A different size means the ranks disagree on the
  // operation: kInternalError, and the lines stay unconsumed.
  Status recv(void* dst, size_t bytes) {
    const uint64_t lines = detail::linesFor(bytes);
    unsigned char* out = static_cast<unsigned char*>(dst);
    // A message of several lines: wait for its last line before reading any.
    // Polling each line while the sender writes it bounces the line between
    // the cores at every store (payload, size, sequence number): a 2 KiB
    // message took 4 us that way. The sender posts lines in order with
    // release, so once the last is seen (acquire) all are.
    if (lines > 1) PLAIT_RETURN_IF_ERROR(awaitLine(step_ + lines - 1, bytes));
    for (uint64_t i = 0; i < lines; ++i) {
      LineCell& cell = m_->cells[(step_ + i) % kLineSlots];
      if (__builtin_expect(AtomicRef<uint64_t>(cell.seq).load(mo::acquire) != step_ + i + 1, 0))
        PLAIT_RETURN_IF_ERROR(waitLine(cell, step_ + i + 1));
      if (__builtin_expect(cell.bytes != bytes, 0))
        return internalError("a peer sent a " + std::to_string(cell.bytes) + "-byte message where " +
                             std::to_string(bytes) + " bytes were expected (ranks disagree on the operation?)");
      const size_t off = i * kLinePayloadBytes;
      if (bytes - off >= kLinePayloadBytes) std::memcpy(out + off, cell.payload, kLinePayloadBytes);  // inlined
      else if (bytes) std::memcpy(out + off, cell.payload, bytes - off);
    }
    step_ += lines;
    AtomicRef<uint64_t>(m_->head).store(step_, mo::release);
    wake(detail::lowWord(&m_->head), &m_->sendSleepers);
    return Status::ok();
  }
  // Whether recv(dst, bytes) would return without waiting: the next
  // message's last line is posted (the sender posts lines in order), or its
  // first line says another size (recv reports it).
  bool ready(size_t bytes) {
    LineCell& first = m_->cells[step_ % kLineSlots];
    if (AtomicRef<uint64_t>(first.seq).load(mo::acquire) != step_ + 1) return false;
    if (first.bytes != bytes) return true;
    const uint64_t last = step_ + detail::linesFor(bytes) - 1;
    return AtomicRef<uint64_t>(m_->cells[last % kLineSlots].seq).load(mo::acquire) == last + 1;
  }
  bool aborted() const { return detail::lineAborted(m_); }
  // The error once aborted(): this side's abort, or the peer's.
  Status abortError() const {
    if (AtomicRef<uint32_t>(m_->receiverAborted).load(mo::acquire)) return abortedError(*ctx_);
    return peerAbortedError(*ctx_);
  }
  // What a receiver waiting for a message sleeps on (the sender rings it).
  std::atomic<uint32_t>* doorbell() { return &m_->doorbell; }
  std::atomic<uint32_t>* sleepers() { return &m_->recvSleepers; }
  void abort() {
    AtomicRef<uint32_t>(m_->receiverAborted).store(1, mo::release);
    wake(detail::lowWord(&m_->head), &m_->sendSleepers);
  }

 private:
  // Waits until line `index` (0-based, counted from the start) is posted;
  // the caller then reads it and the lines before it. When the first line
  // already says another size, returns at once: the caller's check reports
  // it (the message may be shorter than `bytes` and never reach `index`).
  Status awaitLine(uint64_t index, size_t bytes) {
    LineCell& last = m_->cells[index % kLineSlots];
    LineCell& first = m_->cells[step_ % kLineSlots];
    auto ready = [&] {
      if (AtomicRef<uint64_t>(last.seq).load(mo::acquire) == index + 1) return true;
      return (AtomicRef<uint64_t>(first.seq).load(mo::acquire) == step_ + 1 && first.bytes != bytes) ||
             detail::lineAborted(m_);
    };
    if (ready()) return Status::ok();
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, &m_->doorbell, &m_->recvSleepers, *ctx_));
    if (AtomicRef<uint64_t>(last.seq).load(mo::acquire) == index + 1) return Status::ok();
    if (AtomicRef<uint64_t>(first.seq).load(mo::acquire) == step_ + 1 && first.bytes != bytes) return Status::ok();
    return abortError();
  }

  __attribute__((noinline)) Status waitLine(LineCell& cell, uint64_t want) {
    auto ready = [&] { return AtomicRef<uint64_t>(cell.seq).load(mo::acquire) == want || detail::lineAborted(m_); };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, &m_->doorbell, &m_->recvSleepers, *ctx_));
    if (AtomicRef<uint64_t>(cell.seq).load(mo::acquire) == want) return Status::ok();
    return abortError();
  }

  LineFifoMemory* m_;
  WaitContext* ctx_;
  uint64_t step_ = 0;
};

}  // namespace plait
