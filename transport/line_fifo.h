// line_fifo.h — a FIFO of single cache lines for the smallest messages.
//
// Each step is one 64-byte line holding up to kLinePayloadBytes of payload,
// its size and a sequence number written last (release). The receiver polls
// the line itself, so a message costs one cache-line hand-off instead of the
// two or three of a FifoSender/FifoReceiver step (counter line, then size
// and payload lines): this is the host's answer to NCCL's LL protocol, where
// data and flag also travel in the same line (DESIGN.md §10). Flow control:
// the receiver publishes how many lines it consumed in `head`, which the
// sender re-reads only when its cached credit runs out.
//
// Memory layout is plain data in a segment both processes map, zeroed
// before use. Waits follow base/wait.h (deadline, abort flag, dead peer).
#pragma once

#include <cstring>

#include "algorithms/portability.h"
#include "base/wait.h"
#include "plait/status.hpp"

namespace plait {

constexpr int kLineSlots = 16;
constexpr size_t kLinePayloadBytes = 48;

struct alignas(64) LineCell {
  unsigned char payload[kLinePayloadBytes];
  uint64_t bytes;
  uint64_t seq;  // step number + 1 once posted; written last
};
static_assert(sizeof(LineCell) == 64);

struct alignas(64) LineFifoMemory {
  LineCell cells[kLineSlots];
  alignas(64) uint64_t head;  // lines consumed by the receiver
  alignas(64) std::atomic<uint32_t> recvSleepers;
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
}  // namespace detail

class LineSender {
 public:
  LineSender(void* memory, WaitContext* ctx) : m_(static_cast<LineFifoMemory*>(memory)), ctx_(ctx) {}

  // Copies bytes (≤ kLinePayloadBytes) into the next line and posts it.
  // Blocks only when all kLineSlots lines are unconsumed.
  Status send(const void* data, size_t bytes) {
    if (__builtin_expect(step_ - cachedHead_ >= kLineSlots, 0)) PLAIT_RETURN_IF_ERROR(waitCredit());
    LineCell& cell = m_->cells[step_ % kLineSlots];
    std::memcpy(cell.payload, data, bytes);
    cell.bytes = bytes;
    AtomicRef<uint64_t>(cell.seq).store(++step_, mo::release);
    wake(detail::lowWord(&cell.seq), &m_->recvSleepers);
    return Status::ok();
  }
  void abort() {
    AtomicRef<uint32_t>(m_->senderAborted).store(1, mo::release);
    wake(detail::lowWord(&m_->cells[step_ % kLineSlots].seq), &m_->recvSleepers);
  }

 private:
  __attribute__((noinline)) Status waitCredit() {
    auto ready = [this] {
      cachedHead_ = AtomicRef<uint64_t>(m_->head).load(mo::acquire);
      return step_ - cachedHead_ < kLineSlots || detail::lineAborted(m_);
    };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::lowWord(&m_->head), &m_->sendSleepers, *ctx_));
    if (step_ - cachedHead_ < kLineSlots) return Status::ok();
    return peerAbortedError(*ctx_);
  }

  LineFifoMemory* m_;
  WaitContext* ctx_;
  uint64_t step_ = 0;
  uint64_t cachedHead_ = 0;
};

class LineReceiver {
 public:
  LineReceiver(void* memory, WaitContext* ctx) : m_(static_cast<LineFifoMemory*>(memory)), ctx_(ctx) {}

  // Waits for the next line; returns its payload (valid until release()).
  Result<const unsigned char*> acquire(size_t* bytes) {
    LineCell& cell = m_->cells[step_ % kLineSlots];
    if (__builtin_expect(AtomicRef<uint64_t>(cell.seq).load(mo::acquire) != step_ + 1, 0))
      PLAIT_RETURN_IF_ERROR(waitLine(cell));
    *bytes = cell.bytes;
    return static_cast<const unsigned char*>(cell.payload);
  }
  void release() {
    AtomicRef<uint64_t>(m_->head).store(++step_, mo::release);
    wake(detail::lowWord(&m_->head), &m_->sendSleepers);
  }
  void abort() {
    AtomicRef<uint32_t>(m_->receiverAborted).store(1, mo::release);
    wake(detail::lowWord(&m_->head), &m_->sendSleepers);
  }

 private:
  __attribute__((noinline)) Status waitLine(LineCell& cell) {
    const uint64_t want = step_ + 1;
    auto ready = [&] { return AtomicRef<uint64_t>(cell.seq).load(mo::acquire) == want || detail::lineAborted(m_); };
    PLAIT_RETURN_IF_ERROR(waitUntil(ready, detail::lowWord(&cell.seq), &m_->recvSleepers, *ctx_));
    if (AtomicRef<uint64_t>(cell.seq).load(mo::acquire) == want) return Status::ok();
    if (AtomicRef<uint32_t>(m_->receiverAborted).load(mo::acquire)) return abortedError(*ctx_);
    return peerAbortedError(*ctx_);
  }

  LineFifoMemory* m_;
  WaitContext* ctx_;
  uint64_t step_ = 0;
};

}  // namespace plait
