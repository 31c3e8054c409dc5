// Sandblaster L-BFGS (parameter_server.h): the coordinator's vector space on
// the servers and its scheduler of batch portions, the server and replica
// loops, and the serial reference on the same L-BFGS driver (lbfgs.h).
//
// Messages (mailbox.h), every one answered before the next to the same peer:
//   coordinator → server  kCopy / kAxpy / kScale / kBeginEval / kStop → kAck
//                         kDot → kAck carrying the shard's partial sum
//                         kFetchVector → kShard (the shard of a vector)
//   replica → coordinator kRequest (the last portion's result) → kWork | kStop
//   replica → server      kFetch (an evaluation's point) → kShard | kStale
//                         kPush (a portion's gradient sum) → kAck
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "training/data.h"
#include "training/parameter_server/flat_model.h"
#include "training/parameter_server/lbfgs.h"
#include "training/parameter_server/mailbox.h"
#include "training/parameter_server/parameter_server.h"

namespace plait::training::ps {
namespace {

using Clock = std::chrono::steady_clock;

enum Kind : uint32_t {
  kCopy = 1, kAxpy, kScale, kDot, kBeginEval, kFetchVector, kStop, kAck,
  kRequest, kWork, kFetch, kShard, kStale, kPush,
};
enum : int64_t { kResultNone = 0, kResultDone = 1, kResultStale = 2 };

Status unexpected(const Message& m, const char* due) {
  return Status(Code::kInternalError, "rank " + std::to_string(m.from) + " sent message kind " +
                                          std::to_string(m.header.kind) + " where " + due + " was due");
}

// Samples [begin, end) of the batch that portion p of P covers.
std::pair<int, int> portionRows(int batch, int portions, int p) {
  return {int(int64_t(batch) * p / portions), int(int64_t(batch) * (p + 1) / portions)};
}

int portionsOf(const PsConfig& ps, int replicas) { return ps.portions > 0 ? ps.portions : 8 * replicas; }

Batch fullBatch(const TrainConfig& c, const SyntheticDataset& data) { return globalBatch(data, 0, c.localBatch, 1, c.seed); }

// ---- The coordinator: L-BFGS's vectors on the servers ----------------------

class Coordinator : public VectorSpace {
 public:
  Coordinator(const TrainConfig& c, const PsConfig& ps, Mailbox& box)
      : c_(c), ps_(ps), box_(box), replicas_(box.nranks() - 1 - ps.servers),
        portions_(portionsOf(ps, replicas_)) {
    for (int r = 0; r < replicas_; ++r) live_.push_back(1 + ps.servers + r);
    report_.role = "coordinator";
    report_.portionsDone.assign(replicas_, 0);
  }

  Result<PsReport> run() {
    const auto t0 = Clock::now();
    auto onIteration = [&](const LbfgsIteration& it) {
      report_.points.push_back({it.iteration, it.loss, std::chrono::duration<double>(Clock::now() - t0).count(),
                                int64_t(it.evaluations) * c_.localBatch});
    };
    Result<double> f = runLbfgs(*this, ps_.history, ps_.steps, ps_.maxLineSearch, onIteration);
    if (!f.isOk()) return f.status();
    report_.finalLoss = *f;
    report_.evaluations = evaluation_;
    PLAIT_RETURN_IF_ERROR(stopReplicas());
    PLAIT_RETURN_IF_ERROR(broadcast(Header{kFetchVector, 0, 0, kParams}, kShard, [&](int s, const Message& m) {
      auto [b, e] = shardRange(numel(), ps_.servers, s);
      if (m.header.count != e - b) return Status(Code::kInternalError, "a short final shard");
      report_.params.insert(report_.params.end(), m.payload, m.payload + (e - b));
      return Status::ok();
    }));
    PLAIT_RETURN_IF_ERROR(broadcast(Header{kStop}, kAck, nullptr));
    return report_;
  }

  Status copy(int dst, int src) override { return broadcast(Header{kCopy, 0, 0, dst, src}, kAck, nullptr); }
  Status axpy(int dst, double alpha, int src) override {
    return broadcast(Header{kAxpy, 0, 0, dst, src, alpha}, kAck, nullptr);
  }
  Status scale(int dst, double alpha) override { return broadcast(Header{kScale, 0, 0, dst, 0, alpha}, kAck, nullptr); }
  Result<double> dot(int a, int b) override {
    double sum = 0;
    PLAIT_RETURN_IF_ERROR(broadcast(Header{kDot, 0, 0, a, b}, kAck, [&](int, const Message& m) {
      sum += m.header.scalar;  // in server order: the same sum every run
      return Status::ok();
    }));
    return sum;
  }
  Result<double> evaluate(int x, int g) override;

 private:
  size_t numel() {
    if (!numel_) numel_ = FlatModel(c_.model, c_.seed).numel();
    return numel_;
  }

  // Sends h to every server, then reads each answer (of kind `answer`).
  template <typename OnAnswer>
  Status broadcast(const Header& h, uint32_t answer, OnAnswer&& onAnswer) {
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(box_.send(1 + s, h));
    for (int s = 0; s < ps_.servers; ++s) {
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(1 + s));
      if (m.header.kind != answer) return unexpected(m, "a server's answer");
      if constexpr (!std::is_same_v<std::decay_t<OnAnswer>, std::nullptr_t>) PLAIT_RETURN_IF_ERROR(onAnswer(s, m));
    }
    return Status::ok();
  }

  // Answers a waiting replica with the next portion: a fresh one while any
  // is left, else (backup) the unfinished one with the fewest copies out.
  Status assign(int rank, const std::vector<char>& done, std::vector<int>& copies, int& next) {
    int p = -1;
    if (next < portions_) {
      p = next++;
    } else {
      for (int q = 0; q < portions_; ++q)
        if (!done[q] && (p < 0 || copies[q] < copies[p])) p = q;
    }
    if (p < 0) {
      parked_.push_back(rank);
      return Status::ok();
    }
    ++copies[p];
    Status s = box_.send(rank, Header{kWork, 0, evaluation_, p});
    if (s.isOk()) return s;
    if (!ps_.dropDeadReplicas || s.code() != Code::kRemoteError) return s;
    drop(rank);  // it died waiting for this answer: its copy of p is lost
    --copies[p];
    return Status::ok();
  }

  void drop(int rank) {
    live_.erase(std::find(live_.begin(), live_.end(), rank));
    report_.droppedReplicas.push_back(rank - 1 - ps_.servers);
  }

  // After the last evaluation: every replica that asks gets kStop; those
  // that never ask again are dead (the wait fails when only they are left).
  Status stopReplicas() {
    std::vector<int> waiting = live_;
    for (int rank : parked_) {
      PLAIT_RETURN_IF_ERROR(box_.send(rank, Header{kStop}));
      waiting.erase(std::find(waiting.begin(), waiting.end(), rank));
    }
    parked_.clear();
    while (!waiting.empty()) {
      auto m = box_.receiveAny(waiting);
      if (!m.isOk()) {
        if (!ps_.dropDeadReplicas || m.status().code() != Code::kRemoteError) return m.status();
        for (int rank : waiting) drop(rank);
        break;
      }
      waiting.erase(std::find(waiting.begin(), waiting.end(), m->from));
      Status s = box_.send(m->from, Header{kStop});
      if (!s.isOk() && !(ps_.dropDeadReplicas && s.code() == Code::kRemoteError)) return s;
    }
    return Status::ok();
  }

  const TrainConfig& c_;
  const PsConfig& ps_;
  Mailbox& box_;
  int replicas_, portions_;
  size_t numel_ = 0;
  int64_t evaluation_ = 0;
  std::vector<int> live_, parked_;
  PsReport report_;
};

Result<double> Coordinator::evaluate(int x, int g) {
  ++evaluation_;
  PLAIT_RETURN_IF_ERROR(broadcast(Header{kBeginEval, 0, evaluation_, x, g}, kAck, nullptr));
  std::vector<char> done(portions_, 0);
  std::vector<int> copies(portions_, 0);
  int next = 0, doneCount = 0;
  double loss = 0;
  std::vector<int> waiting;
  waiting.swap(parked_);
  for (int rank : waiting) PLAIT_RETURN_IF_ERROR(assign(rank, done, copies, next));
  while (doneCount < portions_) {
    if (live_.empty()) return Status(Code::kRemoteError, "sandblaster: every replica is gone");
    auto m = box_.receiveAny(live_);
    if (!m.isOk()) return Status(m.status()).withContext("sandblaster: no replica can answer");
    const Header& h = m->header;
    if (h.kind != kRequest) return unexpected(*m, "a replica's request");
    if (h.arg == kResultDone && h.version == evaluation_ && h.index >= 0 && h.index < portions_ && !done[h.index]) {
      done[h.index] = 1;
      ++doneCount;
      auto [b, e] = portionRows(c_.localBatch, portions_, int(h.index));
      loss += h.scalar * double(e - b) / double(c_.localBatch);
      report_.portionsDone[m->from - 1 - ps_.servers]++;
    }
    PLAIT_RETURN_IF_ERROR(assign(m->from, done, copies, next));
  }
  return loss;
}

// ---- A server: its shard of every vector -----------------------------------

class Server {
 public:
  Server(const TrainConfig& c, const PsConfig& ps, Mailbox& box)
      : c_(c), ps_(ps), box_(box), index_(box.rank() - 1), replicas_(box.nranks() - 1 - ps.servers),
        portions_(portionsOf(ps, replicas_)) {
    FlatModel init(c.model, c.seed);
    auto [b, e] = shardRange(init.numel(), ps.servers, index_);
    v_.assign(lbfgsVectors(ps.history), std::vector<float>(e - b, 0.0f));
    std::copy(init.weights().begin() + ptrdiff_t(b), init.weights().begin() + ptrdiff_t(e), v_[kParams].begin());
    report_.role = "server";
    report_.index = index_;
  }

  Result<PsReport> run() {
    std::vector<int> peers{0};
    for (int r = 0; r < replicas_; ++r) peers.push_back(1 + ps_.servers + r);
    for (;;) {
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receiveAny(peers));
      if (m.from == 0 && m.header.kind == kStop) {
        PLAIT_RETURN_IF_ERROR(box_.send(0, Header{kAck}));
        return report_;
      }
      Status s = m.from == 0 ? command(m) : serveReplica(m);
      if (!s.isOk()) {
        if (m.from == 0 || !ps_.dropDeadReplicas || s.code() != Code::kRemoteError) return s;
        peers.erase(std::find(peers.begin(), peers.end(), m.from));  // a replica that died
      }
    }
  }

 private:
  Result<std::vector<float>*> vec(int64_t id) {
    if (id < 0 || id >= int64_t(v_.size())) return invalidArgument("vector " + std::to_string(id) + " out of range");
    return &v_[id];
  }

  Status command(const Message& m) {
    const Header& h = m.header;
    switch (h.kind) {
      case kCopy: case kAxpy: case kScale: {
        PLAIT_ASSIGN_OR_RETURN(std::vector<float>* dst, vec(h.index));
        PLAIT_ASSIGN_OR_RETURN(std::vector<float>* src, vec(h.kind == kScale ? h.index : h.arg));
        const float a = float(h.scalar);
        if (h.kind == kCopy) *dst = *src;
        else if (h.kind == kAxpy) for (size_t i = 0; i < dst->size(); ++i) (*dst)[i] += a * (*src)[i];
        else for (float& x : *dst) x *= a;
        return box_.send(0, Header{kAck});
      }
      case kDot: {
        PLAIT_ASSIGN_OR_RETURN(std::vector<float>* a, vec(h.index));
        PLAIT_ASSIGN_OR_RETURN(std::vector<float>* b, vec(h.arg));
        double sum = 0;
        for (size_t i = 0; i < a->size(); ++i) sum += double((*a)[i]) * double((*b)[i]);
        return box_.send(0, Header{kAck, 0, 0, 0, 0, sum});
      }
      case kBeginEval: {
        PLAIT_ASSIGN_OR_RETURN(evalPoint_, vec(h.index));
        PLAIT_ASSIGN_OR_RETURN(evalGrad_, vec(h.arg));
        std::fill(evalGrad_->begin(), evalGrad_->end(), 0.0f);
        evaluation_ = h.version;
        counted_.assign(portions_, 0);
        return box_.send(0, Header{kAck});
      }
      case kFetchVector: {
        PLAIT_ASSIGN_OR_RETURN(std::vector<float>* x, vec(h.index));
        return box_.send(0, Header{kShard}, x->data(), x->size());
      }
      default:
        return unexpected(m, "a coordinator's command");
    }
  }

  Status serveReplica(const Message& m) {
    const Header& h = m.header;
    const bool current = evaluation_ > 0 && h.version == evaluation_;
    if (h.kind == kFetch) {
      if (!current) return box_.send(m.from, Header{kStale});
      return box_.send(m.from, Header{kShard, 0, evaluation_}, evalPoint_->data(), evalPoint_->size());
    }
    if (h.kind != kPush) return unexpected(m, "a replica's fetch or push");
    if (current && h.index >= 0 && h.index < portions_ && !counted_[h.index]) {
      if (h.count != evalGrad_->size()) return Status(Code::kInternalError, "a push of the wrong length");
      for (size_t i = 0; i < evalGrad_->size(); ++i) (*evalGrad_)[i] += m.payload[i];
      counted_[h.index] = 1;
    }
    return box_.send(m.from, Header{kAck});
  }

  const TrainConfig& c_;
  const PsConfig& ps_;
  Mailbox& box_;
  int index_, replicas_, portions_;
  std::vector<std::vector<float>> v_;
  std::vector<float>*evalPoint_ = nullptr, *evalGrad_ = nullptr;
  int64_t evaluation_ = 0;
  std::vector<char> counted_;
  PsReport report_;
};

// ---- A replica: portions of the batch at the evaluation's point -------------

class Replica {
 public:
  Replica(const TrainConfig& c, const PsConfig& ps, Mailbox& box)
      : c_(c), ps_(ps), box_(box), index_(box.rank() - 1 - ps.servers),
        portions_(portionsOf(ps, box.nranks() - 1 - ps.servers)), model_(c.model, c.seed),
        batch_(fullBatch(c, SyntheticDataset(c.model, c.seed))) {
    report_.role = "replica";
    report_.index = index_;
  }

  Result<PsReport> run() {
    Header result{kRequest, 0, 0, -1, kResultNone};
    int taken = 0;
    for (;;) {
      PLAIT_RETURN_IF_ERROR(box_.send(0, result));
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(0));
      if (m.header.kind == kStop) return report_;
      if (m.header.kind != kWork) return unexpected(m, "work or stop");
      const int64_t evaluation = m.header.version;
      const int p = int(m.header.index);
      if (index_ == ps_.killReplica && taken == ps_.killStep) ::raise(SIGKILL);
      ++taken;
      if (index_ == ps_.slowReplica && ps_.slowMs > 0)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ps_.slowMs));
      result = Header{kRequest, 0, evaluation, p, kResultStale};
      if (evaluation != fetched_) {
        PLAIT_ASSIGN_OR_RETURN(bool fresh, fetch(evaluation));
        if (!fresh) continue;  // the coordinator moved on: this portion is done elsewhere
      }
      auto [b, e] = portionRows(c_.localBatch, portions_, p);
      model_.zeroGrads();
      result.scalar = model_.accumulate(sliceBatch(batch_, b, e), float(e - b) / float(c_.localBatch));
      PLAIT_RETURN_IF_ERROR(push(evaluation, p));
      result.arg = kResultDone;
      report_.points.push_back({int(report_.points.size()) + 1, result.scalar, 0, int64_t(e - b)});
    }
  }

 private:
  // The evaluation's point from every server; false when it is over.
  Result<bool> fetch(int64_t evaluation) {
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(box_.send(1 + s, Header{kFetch, 0, evaluation}));
    bool fresh = true;
    for (int s = 0; s < ps_.servers; ++s) {
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(1 + s));
      if (m.header.kind == kStale) {
        fresh = false;
        continue;
      }
      if (m.header.kind != kShard) return unexpected(m, "parameters");
      auto [b, e] = shardRange(model_.numel(), ps_.servers, s);
      if (m.header.count != e - b) return Status(Code::kInternalError, "a parameter shard of the wrong length");
      std::copy_n(m.payload, e - b, model_.weights().begin() + ptrdiff_t(b));
    }
    fetched_ = fresh ? evaluation : -1;
    return fresh;
  }

  Status push(int64_t evaluation, int p) {
    for (int s = 0; s < ps_.servers; ++s) {
      auto [b, e] = shardRange(model_.numel(), ps_.servers, s);
      PLAIT_RETURN_IF_ERROR(box_.send(1 + s, Header{kPush, 0, evaluation, p}, model_.grads().data() + b, e - b));
    }
    for (int s = 0; s < ps_.servers; ++s) {
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(1 + s));
      if (m.header.kind != kAck) return unexpected(m, "an acknowledgement");
    }
    return Status::ok();
  }

  const TrainConfig& c_;
  const PsConfig& ps_;
  Mailbox& box_;
  int index_, portions_;
  FlatModel model_;
  Batch batch_;
  int64_t fetched_ = -1;
  PsReport report_;
};

// ---- The serial reference ----------------------------------------------------

class MemorySpace : public VectorSpace {
 public:
  MemorySpace(const TrainConfig& c, int history)
      : model_(c.model, c.seed), batch_(fullBatch(c, SyntheticDataset(c.model, c.seed))) {
    v_.assign(lbfgsVectors(history), std::vector<float>(model_.numel(), 0.0f));
    v_[kParams] = model_.weights();
  }
  Status copy(int dst, int src) override {
    v_[dst] = v_[src];
    return Status::ok();
  }
  Status axpy(int dst, double alpha, int src) override {
    const float a = float(alpha);
    for (size_t i = 0; i < v_[dst].size(); ++i) v_[dst][i] += a * v_[src][i];
    return Status::ok();
  }
  Status scale(int dst, double alpha) override {
    for (float& x : v_[dst]) x *= float(alpha);
    return Status::ok();
  }
  Result<double> dot(int a, int b) override {
    double sum = 0;
    for (size_t i = 0; i < v_[a].size(); ++i) sum += double(v_[a][i]) * double(v_[b][i]);
    return sum;
  }
  Result<double> evaluate(int x, int g) override {
    model_.weights() = v_[x];
    model_.zeroGrads();
    const double loss = model_.accumulate(batch_, 1.0f);
    v_[g] = model_.grads();
    return loss;
  }
  const std::vector<float>& params() const { return v_[kParams]; }

 private:
  FlatModel model_;
  Batch batch_;
  std::vector<std::vector<float>> v_;
};

Status checkSandblaster(const TrainConfig& c, const PsConfig& ps, int nranks) {
  if (c.model.kind == "moe" || c.model.batchnorm)
    return invalidArgument("sandblaster sums the batch's gradient over portions: " +
                           std::string(c.model.batchnorm ? "batch norm" : "an MoE model's capacity") +
                           " makes it depend on how the batch is split");
  if (c.localBatch < 1) return invalidArgument("sandblaster needs a batch of at least one sample");
  if (ps.steps < 1 || ps.history < 0 || ps.maxLineSearch < 1)
    return invalidArgument("sandblaster: iterations and line-search tries must be at least 1, history at least 0");
  if (nranks < 0) return Status::ok();  // the serial reference
  if (ps.servers < 1 || nranks < ps.servers + 2)
    return invalidArgument("sandblaster needs a coordinator, at least one server and one replica: " +
                           std::to_string(nranks) + " ranks for " + std::to_string(ps.servers) + " servers");
  const int portions = portionsOf(ps, nranks - 1 - ps.servers);
  if (portions > c.localBatch)
    return invalidArgument(std::to_string(portions) + " portions of a batch of " + std::to_string(c.localBatch) +
                           " samples: at most one portion per sample");
  return Status::ok();
}

}  // namespace

Result<PsReport> runSandblaster(const TrainConfig& config, const PsConfig& ps, ncclComm_t comm) {
  PLAIT_ASSIGN_OR_RETURN(JobShape job, jobShape(config.model, config.seed, ps.servers, comm, "sandblaster",
                                                 [&](int n) { return checkSandblaster(config, ps, n); }));
  const size_t servers = size_t(ps.servers);
  PLAIT_ASSIGN_OR_RETURN(std::unique_ptr<Mailbox> box, Mailbox::open(comm, (job.params + servers - 1) / servers));
  if (job.rank == 0) return Coordinator(config, ps, *box).run();
  if (job.rank <= ps.servers) return Server(config, ps, *box).run();
  return Replica(config, ps, *box).run();
}

Result<PsReport> runSerialLbfgs(const TrainConfig& config, const PsConfig& ps) {
  PLAIT_RETURN_IF_ERROR(checkSandblaster(config, ps, -1));
  MemorySpace space(config, ps.history);
  PsReport report;
  report.role = "serial";
  const auto t0 = Clock::now();
  auto onIteration = [&](const LbfgsIteration& it) {
    report.points.push_back({it.iteration, it.loss, std::chrono::duration<double>(Clock::now() - t0).count(),
                             int64_t(it.evaluations) * config.localBatch});
    report.evaluations = it.evaluations;
  };
  PLAIT_ASSIGN_OR_RETURN(report.finalLoss, runLbfgs(space, ps.history, ps.steps, ps.maxLineSearch, onIteration));
  report.params = space.params();
  return report;
}

}  // namespace plait::training::ps
