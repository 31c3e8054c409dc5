// fuzz_bootstrap_wire — the bootstrap's messages as a foreign or malicious
// peer may send them (core/bootstrap_wire.h): the hello a rank sends the
// root, the root's reply and peer table, the hello on a rank -> rank
// connection, and the stream of message headers and payloads behind it.
// Every decision the bootstrap makes about those bytes is one of the
// functions called here; the first input byte picks which, the rest are the
// bytes "received" (truncated frames end the exchange, as a closed socket
// would). Whatever arrives, the checks must name what is wrong, and what they
// accept must be safe to use: ranks in range, host names terminated,
// buffered bytes within the bound.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu_mask.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace plait;
using namespace plait::bootstrap_wire;

// The job the fuzzed peer talks to.
constexpr uint64_t kJobNonce = 0x0123456789abcdefULL;

using Input = FuzzInput;

void checkTerminated(const PeerInfo& p) { PLAIT_FUZZ_CHECK(std::memchr(p.hostname, 0, sizeof(p.hostname)) != nullptr); }

// The root: hellos, one after another, as Root::admit reads them.
void rootHellos(Input in) {
  int nranks = -1;
  PeerInfo first;
  std::vector<char> bytes(sizeof(RootHello));
  while (in.take(bytes.data(), bytes.size())) {
    const RootHello h = decodeRootHello(bytes.data());
    checkTerminated(h.info);
    if (h.magic != kUniqueIdMagic || h.nonce != kJobNonce) continue;  // answered and dropped
    if (nranks < 0 && h.nranks >= 1 && h.nranks <= kMaxRanks) {
      nranks = h.nranks;
      first = h.info;
    }
    const std::string why = rootHelloRejection(h, nranks, first);
    if (why.empty()) {
      PLAIT_FUZZ_CHECK(h.nranks == nranks && h.rank >= 0 && h.rank < nranks && h.info.rank == h.rank);
      PLAIT_FUZZ_CHECK(h.info.listenAddr.isValid());
      (void)h.info.listenAddr.toString();
    }
  }
}

// A rank: the root's reply, then its error text or its peer table.
void rootReply(Input in) {
  uint8_t nranksByte = 0;
  RootReply reply{};
  if (!in.take(&nranksByte) || !in.take(&reply)) return;
  Status st = checkRootReply(reply);
  if (!st.isOk()) {
    PLAIT_FUZZ_CHECK(!st.message().empty());
    return;
  }
  if (reply.code != 0) {
    PLAIT_FUZZ_CHECK(reply.messageBytes <= kMaxRootMessageBytes);
    std::string message(reply.messageBytes, '\0');  // what Bootstrap::create reads the text into
    (void)in.take(message.data(), message.size());
    return;
  }
  const int nranks = 1 + nranksByte % 8;
  std::vector<PeerInfo> peers(static_cast<size_t>(nranks));
  if (!in.take(peers.data(), peers.size() * sizeof(PeerInfo))) return;
  st = checkPeerTable(peers.data(), nranks);
  for (const PeerInfo& p : peers) checkTerminated(p);
  if (!st.isOk()) {
    PLAIT_FUZZ_CHECK(!st.message().empty());
    return;
  }
  // What the communicator does with an accepted table: name the peers,
  // connect to their addresses, weigh their CPU masks (base/cpu_mask.h).
  std::vector<CpuMask> masks;
  for (int r = 0; r < nranks; ++r) {
    const PeerInfo& p = peers[static_cast<size_t>(r)];
    PLAIT_FUZZ_CHECK(p.rank == r && p.listenAddr.isValid() && p.listenAddr.sockaddrLen() > 0);
    (void)p.listenAddr.toString();
    masks.push_back(p.cpus);
  }
  const LocalCpus cpus = assessLocalCpus(masks);
  PLAIT_FUZZ_CHECK(cpus.cpus >= 0 && cpus.cpus <= 64 * CpuMask::kWords && cpus.minCpusPerRank <= cpus.cpus);
  PLAIT_FUZZ_CHECK(!(cpus.dedicated && cpus.oversubscribed));
}

// A rank's listener: the hello of each incoming connection.
void peerHellos(Input in) {
  uint8_t nranksByte = 0;
  if (!in.take(&nranksByte)) return;
  const int nranks = 1 + nranksByte;
  PeerHello hello{};
  while (in.take(&hello))
    if (peerHelloValid(hello, kUniqueIdMagic, kJobNonce, nranks)) PLAIT_FUZZ_CHECK(hello.rank >= 0 && hello.rank < nranks);
}

// A rank's receive connection: headers and payloads while recvMessage waits
// for one message, buffering the others (Bootstrap::recvMessage).
void messageStream(Input in) {
  struct Awaited {
    uint32_t kind;
    uint32_t tag;
    uint32_t bytes;
    uint64_t unexpected;  // already buffered
  } want{};
  if (!in.take(&want)) return;
  want.kind %= kLastMessageKind + 1;
  uint64_t unexpected = want.unexpected % (kMaxUnexpectedBytes + 1);
  MessageHeader h{};
  while (in.take(&h)) {
    const FrameAction action = classifyFrame(h, want.kind, want.tag, want.bytes, unexpected);
    switch (action) {
      case FrameAction::kDeliver:
        PLAIT_FUZZ_CHECK(h.kind == want.kind && h.tag == want.tag && h.bytes == want.bytes);
        return;
      case FrameAction::kMalformed:
      case FrameAction::kOverBudget:
        return;  // connection closed
      case FrameAction::kSizeMismatch:
      case FrameAction::kBuffer: {
        // The payload is read into memory: it must be bounded.
        PLAIT_FUZZ_CHECK(h.kind <= kLastMessageKind && h.bytes <= kMaxUnexpectedBytes);
        if (action == FrameAction::kSizeMismatch) {
          PLAIT_FUZZ_CHECK(h.kind == want.kind && h.tag == want.tag && h.bytes != want.bytes);
          return;
        }
        PLAIT_FUZZ_CHECK(h.bytes <= kMaxUnexpectedBytes - unexpected);
        unexpected += h.bytes;
        // The fuzzer's stream is short: skip what it has of the payload.
        const size_t skip = h.bytes < in.size ? static_cast<size_t>(h.bytes) : in.size;
        in.data += skip;
        in.size -= skip;
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Input in{data + 1, size - 1};
  switch (data[0] % 4) {
    case 0: rootHellos(in); break;
    case 1: rootReply(in); break;
    case 2: peerHellos(in); break;
    case 3: messageStream(in); break;
  }
  return 0;
}
