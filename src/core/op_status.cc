#include "core/op_status.h"

#include <algorithm>
#include <cstring>

#include "base/config.h"
#include "base/greeting_gate.h"
#include "base/log.h"
#include "core/bootstrap.h"
#include "core/comm.h"

namespace plait {

PLAIT_PARAM_INT(kStatusSurveyMs, "STATUS_SURVEY_MS", 5000,
                "ms a collective waits before its rank asks the ranks on other hosts where they are "
                "(at most half of PLAIT_TIMEOUT; 0: never)");

namespace {

constexpr uint64_t kStatusMagic = 0x504c414954535453ULL;  // "PLAITSTS"
constexpr int64_t kAskMs = 500;        // one rank's answer
constexpr int64_t kGreetingMs = 1000;  // a connection's hello
constexpr size_t kMaxAsked = 64;       // ranks one survey asks

struct StatusHello {
  uint64_t magic = kStatusMagic;
  uint64_t nonce = 0;
  int32_t rank = -1;
  uint32_t reserved = 0;
};

struct StatusAnswer {
  uint64_t magic = kStatusMagic;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint32_t coll = 0, type = 0, opKind = 0;
  int32_t root = 0;
  uint32_t departed = 0;
  uint32_t readable = 0;  // 0: the owner was writing its line
  uint64_t atMs = 0;      // how long it has been at this collective
};

Deadline earlier(Deadline a, Deadline b) { return a.at() < b.at() ? a : b; }

uint64_t msSince(uint64_t ns) {
  const uint64_t now = nowNs();
  return ns == 0 || now < ns ? 0 : (now - ns) / 1'000'000;
}

}  // namespace

Result<std::unique_ptr<OpStatus>> OpStatus::create(Bootstrap& bootstrap, std::vector<int> remoteRanks,
                                                   const OpBoard::Line* announced,
                                                   const std::atomic<uint64_t>* announcedNs, Deadline deadline) {
  std::unique_ptr<OpStatus> st(new OpStatus());
  st->line_ = announced;
  st->publishedNs_ = announcedNs;
  st->rank_ = bootstrap.rank();
  st->magic_ = bootstrap.magic();
  st->nonce_ = bootstrap.nonce();
  st->remote_ = std::move(remoteRanks);
  const int64_t half = std::max<int64_t>(operationTimeoutMs() / 2, 1);
  st->surveyAfterMs_ = kStatusSurveyMs.get() <= 0 ? -1 : std::min<int64_t>(kStatusSurveyMs.get(), half);
  net::SocketAddress bindAddr = bootstrap.peer(st->rank_).listenAddr;
  bindAddr.setPort(0);
  PLAIT_ASSIGN_OR_RETURN(st->listener_, net::Socket::listen(bindAddr, 64));
  st->addresses_.resize(static_cast<size_t>(bootstrap.nranks()));
  st->addresses_[static_cast<size_t>(st->rank_)] = st->listener_.localAddress();
  PLAIT_RETURN_IF_ERROR(bootstrap.allGather(st->addresses_.data(), sizeof(net::SocketAddress), deadline));
  OpStatus* self = st.get();
  st->server_ = std::thread([self] { self->serve(); });
  if (st->surveyAfterMs_ > 0) st->surveyor_ = std::thread([self] { self->surveyLoop(); });
  return st;
}

OpStatus::~OpStatus() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(1, std::memory_order_release);
  }
  wake_.notify_all();
  if (server_.joinable()) server_.join();
  if (surveyor_.joinable()) surveyor_.join();
}

RankPosition OpStatus::self() const {
  OpRecord r;
  OpBoard::read(*line_, &r);
  const bool gone = departed_.load(std::memory_order_acquire) != 0;
  return RankPosition{rank_, r.seq,
                      gone ? std::string("gone (aborted or destroyed its communicator)") : OpBoard::positionText(*line_)};
}

void OpStatus::markDeparted() { departed_.store(1, std::memory_order_release); }

// The server: one greeting, one answer, per connection.
void OpStatus::serve() {
  net::GreetingGate gate("rank " + std::to_string(rank_) + " status server", sizeof(StatusHello), kGreetingMs, 64);
  while (stop_.load(std::memory_order_acquire) == 0) {
    auto g = gate.next(listener_, Deadline::afterMs(100), &stop_);
    if (!g.isOk()) {
      if (g.status().code() != Code::kRemoteError) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    StatusHello hello;
    std::memcpy(&hello, g->greeting.data(), sizeof hello);
    if (hello.magic != kStatusMagic || hello.nonce != nonce_) {
      PLAIT_INFO(kInit, "rank %d status server: dropped a connection from %s without this job's nonce", rank_,
                 g->socket.peerAddress().toString().c_str());
      continue;
    }
    StatusAnswer a;
    OpRecord r;
    a.readable = OpBoard::read(*line_, &r) ? 1 : 0;
    a.seq = r.seq;
    a.count = r.count;
    a.coll = r.coll;
    a.type = r.type;
    a.opKind = r.opKind;
    a.root = r.root;
    a.departed = departed_.load(std::memory_order_acquire);
    a.atMs = msSince(publishedNs_->load(std::memory_order_relaxed));
    (void)g->socket.sendAll(&a, sizeof a, Deadline::afterMs(kAskMs), &stop_);
  }
}

RankPosition OpStatus::ask(int peer, Deadline deadline, OpRecord* record) const {
  RankPosition p{peer, 0, ""};
  const Deadline d = earlier(deadline, Deadline::afterMs(kAskMs));
  auto s = net::Socket::connect(addresses_[static_cast<size_t>(peer)], d, &stop_);
  Status st = s.isOk() ? Status::ok() : s.status();
  StatusHello hello;
  hello.nonce = nonce_;
  hello.rank = rank_;
  StatusAnswer a;
  if (st.isOk()) st = s->sendAll(&hello, sizeof hello, d, &stop_);
  if (st.isOk()) st = s->recvAll(&a, sizeof a, d, &stop_);
  if (st.isOk() && a.magic != kStatusMagic) st = remoteError("a malformed answer");
  if (!st.isOk()) {
    p.text = "no answer (" + st.message() + ")";
    return p;
  }
  *record = OpRecord{a.seq, a.count, a.coll, a.type, a.opKind, a.root};
  p.seq = a.seq;
  if (a.departed) p.text = "gone (aborted or destroyed its communicator)";
  else if (!a.readable) p.text = "changing its operation";
  else p.text = record->describe() + (a.seq ? " for " + std::to_string(a.atMs) + " ms" : "");
  return p;
}

std::vector<RankPosition> OpStatus::surveyNow(Deadline deadline) const {
  std::vector<RankPosition> out;
  for (size_t i = 0; i < remote_.size() && i < kMaxAsked; ++i) {
    OpRecord r;
    out.push_back(ask(remote_[i], deadline, &r));
  }
  return out;
}

Status OpStatus::check() {
  if (surveyAfterMs_ <= 0) return Status::ok();
  OpRecord mine;
  if (!OpBoard::read(*line_, &mine) || mine.seq == 0) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (surveyedSeq_ == mine.seq) return disagreement_;
  if (requestedSeq_ != mine.seq &&
      msSince(publishedNs_->load(std::memory_order_relaxed)) >= static_cast<uint64_t>(surveyAfterMs_)) {
    requestedSeq_ = mine.seq;
    wake_.notify_all();
  }
  return Status::ok();
}

// Runs the surveys check() asks for, so that no wait blocks on the network.
void OpStatus::surveyLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_.load() != 0 || requestedSeq_ != surveyedSeq_; });
    if (stop_.load() != 0) return;
    const uint64_t seq = requestedSeq_;
    lock.unlock();
    OpRecord mine;
    const bool readable = OpBoard::read(*line_, &mine);
    Status found;
    for (size_t i = 0; i < remote_.size() && i < kMaxAsked && stop_.load() == 0; ++i) {
      OpRecord theirs;
      RankPosition p = ask(remote_[i], Deadline::afterMs(kAskMs), &theirs);
      PLAIT_INFO(kInit, "rank %d at collective #%llu: rank %d is %s", rank_, static_cast<unsigned long long>(seq),
                 p.rank, p.text.c_str());
      if (found.isOk() && readable && mine.seq == seq && theirs.seq == seq && !(theirs == mine) &&
          !theirs.isBatch() && !mine.isBatch() && p.text.find("gone") == std::string::npos)
        found = invalidUsage("ranks disagree on collective #" + std::to_string(seq) + ": rank " +
                             std::to_string(p.rank) + " (on another host) runs " + theirs.describe() + " but rank " +
                             std::to_string(rank_) + " runs " + mine.describe() +
                             " (every rank must call the same collectives in the same order with the same count, "
                             "type, op and root)");
    }
    lock.lock();
    surveyedSeq_ = seq;
    disagreement_ = found;
  }
}

}  // namespace plait
