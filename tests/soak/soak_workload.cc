#include "soak_workload.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace soak {

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kInit: return "init";
    case Phase::kCollective: return "collective";
    case Phase::kPointToPoint: return "point-to-point";
    case Phase::kSplit: return "split";
    case Phase::kChild: return "split child";
    case Phase::kWrong: return "wrong result";
  }
  return "?";
}

uint64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64: every rank draws the same sizes from the same seed
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's value at element j of operation i: small, so sums never overflow.
int32_t value(int r, uint64_t i, size_t j) { return (r + 1) * static_cast<int32_t>(j % 97 + 1) + static_cast<int32_t>(i % 5); }

enum class Op { kAllReduce, kAllGather, kBroadcast, kReduceScatter, kAlltoAll, kRing, kCount };

class Rank {
 public:
  explicit Rank(const RankArgs& a) : a_(a), n_(a.nranks), r_(a.rank) {}
  int run();

 private:
  ncclResult_t step(uint64_t i, Op op, size_t count, std::string* wrong);
  ncclResult_t collective(uint64_t i, Op op, size_t count);
  std::string check(uint64_t i, Op op, size_t count) const;
  ncclResult_t splitRound(std::string* wrong, Phase* phase);
  void report(Phase phase, ncclResult_t result, const std::string& message);

  RankArgs a_;
  int n_, r_;
  ncclComm_t comm_ = nullptr;
  ncclComm_t child_ = nullptr;
  std::vector<int32_t> send_, recv_;
  uint64_t operations_ = 0;
};

const size_t kCounts[] = {1, 7, 1000, 16384, 65536};

ncclResult_t Rank::collective(uint64_t i, Op op, size_t count) {
  const int root = static_cast<int>(i % static_cast<uint64_t>(n_));
  switch (op) {
    case Op::kAllReduce: return ncclAllReduce(send_.data(), recv_.data(), count, ncclInt32, ncclSum, comm_, nullptr);
    case Op::kAllGather: return ncclAllGather(send_.data(), recv_.data(), count, ncclInt32, comm_, nullptr);
    case Op::kBroadcast: return ncclBroadcast(send_.data(), recv_.data(), count, ncclInt32, root, comm_, nullptr);
    case Op::kReduceScatter:
      return ncclReduceScatter(send_.data(), recv_.data(), count, ncclInt32, ncclSum, comm_, nullptr);
    case Op::kAlltoAll: return ncclAlltoAll(send_.data(), recv_.data(), count, ncclInt32, comm_, nullptr);
    case Op::kRing: {
      ncclResult_t s = ncclGroupStart();
      if (s != ncclSuccess) return s;
      ncclResult_t a = ncclSend(send_.data(), count, ncclInt32, (r_ + 1) % n_, comm_, nullptr);
      ncclResult_t b = ncclRecv(recv_.data(), count, ncclInt32, (r_ + n_ - 1) % n_, comm_, nullptr);
      ncclResult_t e = ncclGroupEnd();
      return a != ncclSuccess ? a : b != ncclSuccess ? b : e;
    }
    case Op::kCount: break;
  }
  return ncclInternalError;
}

// The expected value of element j of the output, or "" when every element matches.
std::string Rank::check(uint64_t i, Op op, size_t count) const {
  const int root = static_cast<int>(i % static_cast<uint64_t>(n_));
  const size_t total = op == Op::kAllGather || op == Op::kAlltoAll ? count * static_cast<size_t>(n_) : count;
  for (size_t j = 0; j < total; ++j) {
    int64_t want = 0;
    const size_t block = j / count, off = j % count;
    switch (op) {
      case Op::kAllReduce:
        for (int r = 0; r < n_; ++r) want += value(r, i, j);
        break;
      case Op::kAllGather: want = value(static_cast<int>(block), i, off); break;
      case Op::kBroadcast: want = value(root, i, j); break;
      case Op::kReduceScatter:
        for (int r = 0; r < n_; ++r) want += value(r, i, static_cast<size_t>(r_) * count + j);
        break;
      case Op::kAlltoAll: want = value(static_cast<int>(block), i, static_cast<size_t>(r_) * count + off); break;
      case Op::kRing: want = value((r_ + n_ - 1) % n_, i, j); break;
      case Op::kCount: break;
    }
    if (recv_[j] != want) {
      char text[200];
      std::snprintf(text, sizeof text, "operation %llu (kind %d, count %zu): element %zu is %d, expected %lld",
                    static_cast<unsigned long long>(i), static_cast<int>(op), count, j, recv_[j],
                    static_cast<long long>(want));
      return text;
    }
  }
  return "";
}

ncclResult_t Rank::step(uint64_t i, Op op, size_t count, std::string* wrong) {
  const size_t inCount = op == Op::kReduceScatter || op == Op::kAlltoAll ? count * static_cast<size_t>(n_) : count;
  for (size_t j = 0; j < inCount; ++j) send_[j] = value(r_, i, j);
  ncclResult_t s = collective(i, op, count);
  if (s == ncclSuccess) *wrong = check(i, op, count);
  return s;
}

// A split into even and odd ranks, an AllReduce on the child, its destroy.
ncclResult_t Rank::splitRound(std::string* wrong, Phase* phase) {
  *phase = Phase::kSplit;
  ncclResult_t s = ncclCommSplit(comm_, r_ % 2, r_, &child_, nullptr);
  if (s != ncclSuccess) return s;
  *phase = Phase::kChild;
  int32_t mine = r_ + 1, sum = 0;
  s = ncclAllReduce(&mine, &sum, 1, ncclInt32, ncclSum, child_, nullptr);
  if (s != ncclSuccess) return s;
  int32_t want = 0;
  for (int r = r_ % 2; r < n_; r += 2) want += r + 1;
  if (sum != want) *wrong = "split child AllReduce: " + std::to_string(sum) + ", expected " + std::to_string(want);
  s = ncclCommDestroy(child_);
  if (s == ncclSuccess) child_ = nullptr;
  return s;
}

void Rank::report(Phase phase, ncclResult_t result, const std::string& message) {
  Report rep;
  rep.failedAtNs = monotonicNs();
  rep.rank = r_;
  rep.pid = static_cast<int32_t>(getpid());
  rep.result = result;
  rep.phase = phase;
  rep.operations = operations_;
  std::snprintf(rep.message, sizeof rep.message, "%s", message.c_str());
  const uint64_t t0 = monotonicNs();
  if (child_ != nullptr) ncclCommAbort(child_);
  if (comm_ != nullptr) ncclCommAbort(comm_);
  rep.abortNs = monotonicNs() - t0;
  ssize_t w = write(a_.reportFd, &rep, sizeof rep);
  (void)w;
}

int Rank::run() {
  ncclResult_t s = ncclCommInitRank(&comm_, n_, a_.id, r_);
  if (s != ncclSuccess) {
    report(Phase::kInit, s, ncclGetLastError(comm_));
    return 0;
  }
  const size_t maxCount = 65536 * static_cast<size_t>(n_);
  send_.assign(maxCount, 0);
  recv_.assign(maxCount, 0);
  for (uint64_t i = 0;; ++i) {
    const uint64_t draw = mix(a_.seed ^ i);
    std::string wrong;
    Phase phase;
    if (i % 16 == 15) {
      s = splitRound(&wrong, &phase);
    } else {
      const Op op = static_cast<Op>(draw % static_cast<uint64_t>(Op::kCount));
      phase = op == Op::kRing ? Phase::kPointToPoint : Phase::kCollective;
      s = step(i, op, kCounts[(draw >> 8) % std::size(kCounts)], &wrong);
    }
    if (s != ncclSuccess) {
      report(phase, s, ncclGetLastError(phase == Phase::kChild ? child_ : comm_));
      return 0;
    }
    if (!wrong.empty()) {
      report(Phase::kWrong, ncclSuccess, wrong);
      return 0;
    }
    ++operations_;
  }
}

}  // namespace

int runRank(const RankArgs& args) { return Rank(args).run(); }

}  // namespace soak
