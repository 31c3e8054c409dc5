// rma_wire.h — the one-sided connections' message format (rma_service.h:
// Wire). Private to src/rma.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plait::rma {

inline constexpr uint32_t kMagic = 0x504c5241;  // "PLRA"
inline constexpr uint32_t kPut = 1;
inline constexpr uint32_t kGoodbye = 2;     // the sender is closing: everything before it was sent
inline constexpr uint32_t kGoodbyeAck = 3;  // every message before the goodbye landed: close now
inline constexpr uint32_t kGetRequest = 4;  // read [offset, offset + total) of `window`, answer `request`
inline constexpr uint32_t kGetReply = 5;    // bytes at `offset` of the read `request` (status 1: refused,
                                            // the payload says why)
inline constexpr uint32_t kLastKind = kGetReply;
inline constexpr size_t kHeaderBytes = 64;

struct Header {
  uint32_t magic = kMagic;
  uint32_t kind = kPut;
  uint64_t window = 0;   // registration serial; 0 with bytes 0 (a bare signal)
  uint64_t offset = 0;   // in the window (a reply: in the read)
  uint64_t bytes = 0;    // payload in this message
  uint32_t signal = 0;   // 1: count a signal once the payload landed
  uint32_t status = 0;   // a reply: 0 data, 1 refused
  uint64_t total = 0;    // the whole put's or read's bytes
  uint64_t request = 0;  // a read's number at the reader
};
static_assert(sizeof(Header) <= kHeaderBytes);

}  // namespace plait::rma
