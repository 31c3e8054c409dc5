// Downpour SGD (parameter_server.h): the server and replica loops.
//
// Messages (mailbox.h), every one answered before the next to the same peer:
//   replica → server  kFetch            server → replica  kShard (shard, version)
//   replica → server  kPush (gradient shard, the version it was computed from)
//                                       server → replica  kAck (new version)
//   replica → server  kDone (pushes it sent)   server → replica  kAck
//   server s → server 0  kFinal (shard, statistics)   server 0 → s  kAck
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "training/collectives.h"
#include "training/data.h"
#include "training/optim.h"
#include "training/parameter_server/flat_model.h"
#include "training/parameter_server/mailbox.h"
#include "training/parameter_server/parameter_server.h"

namespace plait::training::ps {
namespace {

using Clock = std::chrono::steady_clock;

enum Kind : uint32_t { kFetch = 1, kShard, kPush, kAck, kDone, kFinal };

Status unexpected(const Message& m, const char* waitingFor) {
  return Status(Code::kInternalError, "rank " + std::to_string(m.from) + " sent message kind " +
                                          std::to_string(m.header.kind) + " where " + waitingFor + " was due");
}

// A send or receive that failed because the peer is gone (RemoteError) may
// be survived when the peer is a replica and the configuration drops them.
bool survivable(const Status& s, const PsConfig& ps) { return ps.dropDeadReplicas && s.code() == Code::kRemoteError; }

class Server {
 public:
  Server(const TrainConfig& c, const PsConfig& ps, Mailbox& box)
      : c_(c), ps_(ps), box_(box), index_(box.rank()), replicas_(box.nranks() - ps.servers), opt_(c.optimizer) {
    FlatModel init(c.model, c.seed);
    total_ = init.numel();
    auto [b, e] = shardRange(total_, ps.servers, index_);
    w_.assign(init.weights().begin() + ptrdiff_t(b), init.weights().begin() + ptrdiff_t(e));
    state_.assign(w_.size() * size_t(opt_.stateFloats()), 0.0f);
    report_.role = "server";
    report_.index = index_;
    report_.pushesApplied.assign(replicas_, 0);
    report_.pushesSent.assign(replicas_, 0);
    report_.stalenessHistogram.assign(kStalenessBins, 0);
  }

  Result<PsReport> run() {
    std::vector<int> live;
    for (int r = 0; r < replicas_; ++r) live.push_back(ps_.servers + r);
    auto drop = [&](int rank) {
      report_.droppedReplicas.push_back(rank - ps_.servers);
      live.erase(std::find(live.begin(), live.end(), rank));
    };
    while (!live.empty()) {
      auto m = box_.receiveAny(live);
      if (!m.isOk()) {
        // Only when none of them can send any more: all of them are gone.
        if (!survivable(m.status(), ps_)) return m.status();
        while (!live.empty()) drop(live.front());
        break;
      }
      Status s = serve(*m, live);
      if (!s.isOk()) {
        if (!survivable(s, ps_)) return s;
        if (std::find(live.begin(), live.end(), m->from) != live.end()) drop(m->from);
      }
      // The wait takes the first ready peer in order: the one just served
      // goes last, so a busy replica cannot keep the others waiting.
      auto served = std::find(live.begin(), live.end(), m->from);
      if (served != live.end()) std::rotate(served, served + 1, live.end());
    }
    PLAIT_RETURN_IF_ERROR(gather());
    return report_;
  }

 private:
  Status serve(const Message& m, std::vector<int>& live) {
    const int replica = m.from - ps_.servers;
    const Header& h = m.header;
    switch (h.kind) {
      case kFetch:
        return box_.send(m.from, Header{kShard, 0, version_}, w_.data(), w_.size());
      case kPush: {
        if (h.count != w_.size())
          return Status(Code::kInternalError, "a push of " + std::to_string(h.count) + " floats for a shard of " +
                                                  std::to_string(w_.size()));
        const int64_t staleness = version_ - h.version;
        report_.stalenessHistogram[std::clamp<int64_t>(staleness, 0, kStalenessBins - 1)]++;
        opt_.update(w_.data(), m.payload, state_.empty() ? nullptr : state_.data(), w_.size(), int(++version_));
        report_.pushesApplied[replica]++;
        return box_.send(m.from, Header{kAck, 0, version_});
      }
      case kDone:
        report_.pushesSent[replica] = h.index;
        live.erase(std::find(live.begin(), live.end(), m.from));
        return box_.send(m.from, Header{kAck, 0, version_});
      default:
        return unexpected(m, "a replica's fetch, push or done");
    }
  }

  // Server 0 assembles the parameters and the statistics of every server.
  Status gather() {
    report_.params = w_;
    if (ps_.servers == 1) return Status::ok();
    if (index_ != 0) {
      std::vector<float> payload = w_;
      for (int r = 0; r < replicas_; ++r) payload.push_back(float(report_.pushesApplied[r]));
      for (int r = 0; r < replicas_; ++r) payload.push_back(float(report_.pushesSent[r]));
      for (int64_t v : report_.stalenessHistogram) payload.push_back(float(v));
      std::vector<float> dead(replicas_, 0.0f);
      for (int d : report_.droppedReplicas) dead[d] = 1;
      payload.insert(payload.end(), dead.begin(), dead.end());
      PLAIT_RETURN_IF_ERROR(box_.send(0, Header{kFinal}, payload.data(), payload.size()));
      PLAIT_ASSIGN_OR_RETURN(Message ack, box_.receive(0));
      return ack.header.kind == kAck ? Status::ok() : unexpected(ack, "server 0's acknowledgement");
    }
    for (int s = 1; s < ps_.servers; ++s) {
      PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(s));
      if (m.header.kind != kFinal) return unexpected(m, "a server's final shard");
      auto [b, e] = shardRange(total_, ps_.servers, s);
      const float* p = m.payload;
      report_.params.insert(report_.params.end(), p, p + (e - b));
      p += e - b;
      for (int r = 0; r < replicas_; ++r) report_.pushesApplied[r] += int64_t(*p++);
      for (int r = 0; r < replicas_; ++r) report_.pushesSent[r] += int64_t(*p++);
      for (int b2 = 0; b2 < kStalenessBins; ++b2) report_.stalenessHistogram[b2] += int64_t(*p++);
      for (int r = 0; r < replicas_; ++r, ++p)
        if (*p != 0 && std::find(report_.droppedReplicas.begin(), report_.droppedReplicas.end(), r) ==
                           report_.droppedReplicas.end())
          report_.droppedReplicas.push_back(r);
      PLAIT_RETURN_IF_ERROR(box_.send(s, Header{kAck}));
    }
    return Status::ok();
  }

  const TrainConfig& c_;
  const PsConfig& ps_;
  Mailbox& box_;
  int index_, replicas_;
  Optimizer opt_;
  size_t total_ = 0;
  std::vector<float> w_, state_;
  int64_t version_ = 0;
  PsReport report_;
};

class Replica {
 public:
  Replica(const TrainConfig& c, const PsConfig& ps, Mailbox& box)
      : c_(c), ps_(ps), box_(box), index_(box.rank() - ps.servers), model_(c.model, c.seed), data_(c.model, c.seed),
        sampler_(data_.size(), box.nranks() - ps.servers, index_, c.seed), accum_(model_.numel(), 0.0f),
        versions_(ps.servers, 0) {
    report_.role = "replica";
    report_.index = index_;
  }

  Result<PsReport> run() {
    const auto t0 = Clock::now();
    int64_t samples = 0, pushes = 0;
    for (int k = 0; k < ps_.steps; ++k) {
      if (index_ == ps_.killReplica && k == ps_.killStep) ::raise(SIGKILL);
      if (k % ps_.nFetch == 0) PLAIT_RETURN_IF_ERROR(fetch());
      if (index_ == ps_.slowReplica && ps_.slowMs > 0)  // a slow machine: its compute takes longer
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ps_.slowMs));
      Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
      model_.zeroGrads();
      double loss = 0;
      for (const Batch& micro : splitBatch(batch, c_.accumulate))
        loss += model_.accumulate(micro, 1.0f / float(c_.accumulate));
      const std::vector<float>& g = model_.grads();
      for (size_t i = 0; i < g.size(); ++i) accum_[i] += g[i];
      samples += c_.localBatch;
      if ((k + 1) % ps_.nPush == 0 || k + 1 == ps_.steps) {
        PLAIT_RETURN_IF_ERROR(push());
        ++pushes;
      }
      report_.points.push_back({k + 1, loss / c_.accumulate,
                                std::chrono::duration<double>(Clock::now() - t0).count(), samples});
    }
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(box_.send(s, Header{kDone, 0, 0, pushes}));
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(expect(s, kAck).status());
    return report_;
  }

 private:
  Result<Message> expect(int server, uint32_t kind) {
    PLAIT_ASSIGN_OR_RETURN(Message m, box_.receive(server));
    if (m.header.kind != kind) return unexpected(m, kind == kAck ? "an acknowledgement" : "parameters");
    return m;
  }

  // Every server's shard, asked of all of them before any answer is read.
  Status fetch() {
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(box_.send(s, Header{kFetch}));
    for (int s = 0; s < ps_.servers; ++s) {
      PLAIT_ASSIGN_OR_RETURN(Message m, expect(s, kShard));
      auto [b, e] = shardRange(model_.numel(), ps_.servers, s);
      if (m.header.count != e - b)
        return Status(Code::kInternalError, "server " + std::to_string(s) + " sent " +
                                                std::to_string(m.header.count) + " parameters for a shard of " +
                                                std::to_string(e - b));
      std::copy_n(m.payload, e - b, model_.weights().begin() + ptrdiff_t(b));
      versions_[s] = m.header.version;
    }
    return Status::ok();
  }

  Status push() {
    for (int s = 0; s < ps_.servers; ++s) {
      auto [b, e] = shardRange(model_.numel(), ps_.servers, s);
      PLAIT_RETURN_IF_ERROR(box_.send(s, Header{kPush, 0, versions_[s]}, accum_.data() + b, e - b));
    }
    for (int s = 0; s < ps_.servers; ++s) PLAIT_RETURN_IF_ERROR(expect(s, kAck).status());
    std::fill(accum_.begin(), accum_.end(), 0.0f);
    return Status::ok();
  }

  const TrainConfig& c_;
  const PsConfig& ps_;
  Mailbox& box_;
  int index_;
  FlatModel model_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::vector<float> accum_;
  std::vector<int64_t> versions_;
  PsReport report_;
};

Status checkDownpour(const TrainConfig& c, const PsConfig& ps, int nranks) {
  if (ps.servers < 1 || nranks < ps.servers + 1)
    return invalidArgument("downpour needs at least one server and one replica: " + std::to_string(nranks) +
                           " ranks for " + std::to_string(ps.servers) + " servers");
  if (ps.nFetch < 1 || ps.nPush < 1)
    return invalidArgument("n_fetch and n_push must be at least 1 (got " + std::to_string(ps.nFetch) + ", " +
                           std::to_string(ps.nPush) + ")");
  if (ps.steps < 1) return invalidArgument("downpour needs at least one step");
  if (c.localBatch < 1 || c.accumulate < 1 || c.localBatch % c.accumulate != 0)
    return invalidArgument("the replica batch " + std::to_string(c.localBatch) + " must divide into " +
                           std::to_string(c.accumulate) + " micro-batches");
  if (c.precision != "fp32") return invalidArgument("downpour trains in fp32 only (precision " + c.precision + ")");
  return Status::ok();
}

}  // namespace

Result<PsReport> runDownpour(const TrainConfig& config, const PsConfig& ps, ncclComm_t comm) {
  PLAIT_ASSIGN_OR_RETURN(JobShape job, jobShape(config.model, config.seed, ps.servers, comm, "downpour",
                                                 [&](int n) { return checkDownpour(config, ps, n); }));
  const size_t replicas = size_t(job.nranks - ps.servers), servers = size_t(ps.servers);
  // The largest shard, and the statistics a server sends server 0 with it.
  const size_t capacity = (job.params + servers - 1) / servers + 3 * replicas + kStalenessBins;
  PLAIT_ASSIGN_OR_RETURN(std::unique_ptr<Mailbox> box, Mailbox::open(comm, capacity));
  if (job.rank < ps.servers) return Server(config, ps, *box).run();
  return Replica(config, ps, *box).run();
}

double stalenessMean(const std::vector<int64_t>& histogram) {
  double sum = 0, n = 0;
  for (size_t i = 0; i < histogram.size(); ++i) sum += double(i) * double(histogram[i]), n += double(histogram[i]);
  return n > 0 ? sum / n : 0;
}

int stalenessPercentile(const std::vector<int64_t>& histogram, double q) {
  int64_t n = 0;
  for (int64_t v : histogram) n += v;
  int64_t seen = 0;
  for (size_t i = 0; i < histogram.size(); ++i) {
    seen += histogram[i];
    if (n > 0 && double(seen) >= q * double(n)) return int(i);
  }
  return 0;
}

}  // namespace plait::training::ps
