// bootstrap_wire.h — the bootstrap's messages as they travel over TCP. Every
// rank runs the same build, so they are plain structs in host byte order.
// Internal to the bootstrap; tests include it to act as hostile peers.
#pragma once

#include <cstdint>

#include "core/bootstrap.h"

namespace plait::bootstrap_wire {

// rank -> root
struct RootHello {
  uint64_t magic;
  uint64_t nonce;
  int32_t rank;
  int32_t nranks;
  int64_t timeoutMs;  // what is left of the rank's deadline
  PeerInfo info;
};
// root -> rank: then `messageBytes` of error text, or nranks PeerInfo when code == 0.
struct RootReply {
  int32_t code;
  uint32_t messageBytes;
};
// first bytes on every rank -> rank connection
struct PeerHello {
  uint64_t magic;
  uint64_t nonce;
  int32_t rank;
  int32_t reserved;
};
// before every point-to-point message
struct MessageHeader {
  uint32_t kind;
  uint32_t tag;
  uint64_t bytes;
};

}  // namespace plait::bootstrap_wire
