// bootstrap_wire.h — the bootstrap's messages as they travel over TCP. Every
// rank runs the same build, so they are plain structs in host byte order.
// Internal to the bootstrap; tests include it to act as hostile peers.
#pragma once

#include <cstdint>
#include <string>

#include "core/bootstrap.h"
#include "plait/status.hpp"

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

// The largest error text a rank believes from the root (the root cuts its own to this).
inline constexpr uint32_t kMaxRootMessageBytes = 64 << 10;
// A point-to-point message whose header claims more than this is never read
// into memory, and messages read before anyone asked for them (buffered
// whole) may hold this much in all.
inline constexpr uint64_t kMaxUnexpectedBytes = uint64_t(1) << 30;
// The highest MessageHeader::kind a build of Plait sends (Bootstrap::Kind).
inline constexpr uint32_t kLastMessageKind = 2;

// ---- Checks of what arrives ------------------------------------------------
// Pure functions of the bytes a peer sent; the bootstrap makes every decision
// about a foreign message through them (and tests/fuzz feeds them anything).

// The hello in `bytes` (sizeof(RootHello) of them), with its host name
// terminated so it can be printed.
RootHello decodeRootHello(const void* bytes);
// Why the root refuses a hello that carries the job's nonce, or "" when it may
// join. `nranks` is the job's size as the first acceptable hello gave it
// (`first` is that hello's sender); duplicates are the root's to find.
std::string rootHelloRejection(const RootHello& h, int nranks, const PeerInfo& first);
// An error reply (code != 0) is believed only with a code Plait has and a
// message of at most kMaxRootMessageBytes; else kRemoteError "malformed reply".
Status checkRootReply(const RootReply& reply);
// The root's table of nranks PeerInfo, in place: host names terminated, then
// entry r must be rank r with a valid listen address (kRemoteError naming the
// first bad entry).
Status checkPeerTable(PeerInfo* peers, int nranks);
// Whether a rank -> rank hello is from a member of this communicator (its
// magic and nonce, a rank in range).
bool peerHelloValid(const PeerHello& hello, uint64_t magic, uint64_t nonce, int nranks);

// What a rank waiting for (kind, tag, bytes) does with the next header read.
enum class FrameAction {
  kDeliver,       // the awaited message: read its payload into the caller's buffer
  kSizeMismatch,  // the awaited kind and tag with another size: read it and drop it, report the mismatch
  kBuffer,        // another message: read it whole and keep it for a later recv
  kMalformed,     // a kind no build sends or more than kMaxUnexpectedBytes: close the connection
  kOverBudget,    // buffering it would pass kMaxUnexpectedBytes in all: close the connection
};
// `unexpectedBytes`: what this rank holds buffered already.
FrameAction classifyFrame(const MessageHeader& header, uint32_t kind, uint32_t tag, uint64_t bytes,
                          uint64_t unexpectedBytes);

}  // namespace plait::bootstrap_wire
