// training/parameter_server/mailbox.h — request/response messages between
// ranks on NCCL 2.32's one-sided operations (public API only).
//
// Every rank registers one window (collectively, so the handle means the
// same window everywhere) with a slot per sender: a 64-byte Header and room
// for `capacity` floats. send(peer) writes header and payload into this
// rank's slot of the peer's window with one ncclPutSignal; the put's bytes
// are there before its signal counts. receive(peer) waits for that signal;
// receiveAny(peers) takes whichever of them signals next
// (plaitWaitAnySignal). Signals are one counter per sender, so the slot
// holds only the latest message: the protocol on top must be request and
// response per pair — a rank sends to a peer again only after the peer has
// read the last message (it answered, or it is the peer's answer being
// read). Each header carries a per-pair sequence number, checked on receipt,
// so a protocol that breaks the rule fails with a message instead of reading
// an overwritten slot.
//
// Every wait has the communicator's deadline and ends on ncclCommAbort; a
// peer whose process died makes the waits on it fail (ncclRemoteError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "plait/status.hpp"

namespace plait::training::ps {

struct Header {
  uint32_t kind = 0;   // the protocol's message kind
  uint32_t count = 0;  // payload floats
  int64_t version = 0; // Downpour: a shard version; Sandblaster: an evaluation
  int64_t index = 0;   // a portion, a vector, a count
  int64_t arg = 0;
  double scalar = 0, scalar2 = 0;
  uint32_t seq = 0;  // set by send: messages this rank sent to that peer so far
  uint32_t reserved[3] = {};
};
static_assert(sizeof(Header) == 64);

struct Message {
  int from = -1;
  Header header;
  const float* payload = nullptr;  // valid until this rank answers `from`
};

class Mailbox {
 public:
  // Collective over comm: every rank registers its window (the same number
  // of registrations before it on every rank). capacity: the largest payload
  // any rank sends, in floats.
  static Result<std::unique_ptr<Mailbox>> open(ncclComm_t comm, size_t capacity);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  size_t capacity() const { return capacity_; }

  Status send(int peer, Header header, const float* payload = nullptr, size_t count = 0);
  Result<Message> receive(int peer);
  // Whichever of peers signals next (the first in order when several have).
  // Fails (RemoteError) only when none of them can signal any more.
  Result<Message> receiveAny(const std::vector<int>& peers);

 private:
  Mailbox(ncclComm_t comm, size_t capacity);
  Result<Message> read(int from);
  Status failure(const std::string& what, ncclResult_t r) const;

  ncclComm_t comm_;
  int rank_ = 0, nranks_ = 1;
  size_t capacity_ = 0, slotBytes_ = 0;
  char* window_ = nullptr;  // nranks_ slots, one per sender
  ncclWindow_t win_ = nullptr;
  std::vector<char> staging_;
  std::vector<uint32_t> sent_, received_;
};

}  // namespace plait::training::ps
