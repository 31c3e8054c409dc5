#include "training/parameter_server/mailbox.h"

#include <cstdlib>
#include <cstring>

#include "plait/rma.h"

namespace plait::training::ps {

namespace {
constexpr size_t kAlign = NCCL_WIN_REQUIRED_ALIGNMENT;
size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }
}  // namespace

Mailbox::Mailbox(ncclComm_t comm, size_t capacity) : comm_(comm), capacity_(capacity) {}

Result<std::unique_ptr<Mailbox>> Mailbox::open(ncclComm_t comm, size_t capacity) {
  std::unique_ptr<Mailbox> box(new Mailbox(comm, capacity));
  if (ncclCommUserRank(comm, &box->rank_) != ncclSuccess || ncclCommCount(comm, &box->nranks_) != ncclSuccess)
    return box->failure("the communicator's rank and size", ncclInvalidArgument);
  box->slotBytes_ = roundUp(sizeof(Header) + capacity * sizeof(float), 64);
  const size_t bytes = roundUp(box->slotBytes_ * size_t(box->nranks_), kAlign);
  box->window_ = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
  if (!box->window_) return Status(Code::kSystemError, "a mailbox of " + std::to_string(bytes) + " bytes");
  std::memset(box->window_, 0, bytes);
  if (ncclResult_t r = ncclCommWindowRegister(comm, box->window_, bytes, &box->win_, NCCL_WIN_DEFAULT); r != ncclSuccess)
    return box->failure("ncclCommWindowRegister of the mailbox", r);
  box->staging_.resize(box->slotBytes_);
  box->sent_.assign(box->nranks_, 0);
  box->received_.assign(box->nranks_, 0);
  return box;
}

Mailbox::~Mailbox() {
  if (win_) (void)ncclCommWindowDeregister(comm_, win_);
  std::free(window_);
}

Status Mailbox::failure(const std::string& what, ncclResult_t r) const {
  return Status(static_cast<Code>(r), what + ": " + ncclGetLastError(comm_));
}

Status Mailbox::send(int peer, Header header, const float* payload, size_t count) {
  if (peer < 0 || peer >= nranks_) return invalidArgument("mailbox peer " + std::to_string(peer) + " out of range");
  if (count > capacity_)
    return invalidArgument("a message of " + std::to_string(count) + " floats to rank " + std::to_string(peer) +
                           " exceeds the mailbox's " + std::to_string(capacity_));
  header.count = static_cast<uint32_t>(count);
  header.seq = ++sent_[peer];
  std::memcpy(staging_.data(), &header, sizeof header);
  if (count) std::memcpy(staging_.data() + sizeof header, payload, count * sizeof(float));
  const size_t bytes = sizeof header + count * sizeof(float);
  if (ncclResult_t r = ncclPutSignal(staging_.data(), bytes, ncclUint8, peer, win_, size_t(rank_) * slotBytes_, 0, 0,
                                     0, comm_, nullptr);
      r != ncclSuccess)
    return failure("a message to rank " + std::to_string(peer), r);
  return Status::ok();
}

Result<Message> Mailbox::read(int from) {
  Message m;
  m.from = from;
  const char* slot = window_ + size_t(from) * slotBytes_;
  std::memcpy(&m.header, slot, sizeof m.header);
  m.payload = reinterpret_cast<const float*>(slot + sizeof(Header));
  const uint32_t expected = ++received_[from];
  if (m.header.seq != expected || m.header.count > capacity_)
    return Status(Code::kInternalError, "message " + std::to_string(expected) + " from rank " + std::to_string(from) +
                                            " reads as number " + std::to_string(m.header.seq) + " with " +
                                            std::to_string(m.header.count) +
                                            " floats: the protocol sent again before an answer");
  return m;
}

Result<Message> Mailbox::receive(int peer) {
  if (peer < 0 || peer >= nranks_) return invalidArgument("mailbox peer " + std::to_string(peer) + " out of range");
  ncclWaitSignalDesc_t d{1, peer, 0, 0};
  if (ncclResult_t r = ncclWaitSignal(1, &d, comm_, nullptr); r != ncclSuccess)
    return failure("waiting for a message from rank " + std::to_string(peer), r);
  return read(peer);
}

Result<Message> Mailbox::receiveAny(const std::vector<int>& peers) {
  if (peers.empty()) return invalidArgument("receiveAny from no peers");
  std::vector<ncclWaitSignalDesc_t> descs;
  for (int p : peers) descs.push_back({1, p, 0, 0});
  int which = -1;
  if (ncclResult_t r = plaitWaitAnySignal(int(descs.size()), descs.data(), &which, comm_); r != ncclSuccess)
    return failure("waiting for a message from any of " + std::to_string(peers.size()) + " ranks", r);
  return read(peers[which]);
}

}  // namespace plait::training::ps
