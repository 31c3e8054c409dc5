// Pipeline parallelism: the model's units cut into p contiguous stages, one
// per rank, activations and their gradients passed over ncclSend/ncclRecv.
//
// The batch is split into m micro-batches (TrainConfig::accumulate). Each
// stage runs a schedule of F(i) / B(i) operations:
//   GPipe: F(0..m−1), then B(0..m−1): all m micro-batches' activations live.
//   1F1B:  stage s runs min(p−1−s, m) warm-up forwards, then alternates one
//          forward and one backward, then drains the backwards: at most p−s
//          micro-batches in flight (Narayanan et al., PipeDream-Flush).
// Backwards run in micro-batch order in both, so gradients accumulate in the
// same order as serial accumulation over m micro-batches.
// A stage keeps one replica of its layers per micro-batch in flight (layers
// cache activations per object), all bound to the same parameter and gradient
// storage. A send is fused with the next receive in one ncclGroupStart/End
// (Megatron's send_forward_recv_backward), so neighbours never wait on each
// other in a cycle. Messages have a fixed size (a shape header and the largest
// activation), so a receiver needs no separate size message.
// DP × PP (dpComm): D pipelines side by side, each on its shard of the global
// batch; after the flush every stage averages its gradients (ncclAvg) with the
// same stage of the other pipelines, then updates. BatchNorm layers
// synchronise over the same group.
// Bubble: each stage times its compute; measured bubble = 1 − Σ busy / (p ×
// step time), next to the ideal (p−1)/(m+p−1).
#include <chrono>
#include <map>

#include "training/collectives.h"
#include "training/trainer.h"

namespace plait::training {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Op {
  bool forward;
  int micro;
};

std::vector<Op> schedule(bool oneFOneB, int stage, int stages, int m) {
  std::vector<Op> ops;
  if (!oneFOneB) {
    for (int i = 0; i < m; ++i) ops.push_back({true, i});
    for (int i = 0; i < m; ++i) ops.push_back({false, i});
    return ops;
  }
  const int warm = std::min(stages - 1 - stage, m);
  for (int i = 0; i < warm; ++i) ops.push_back({true, i});
  for (int j = 0; j < m - warm; ++j) ops.push_back({true, warm + j}), ops.push_back({false, j});
  for (int j = m - warm; j < m; ++j) ops.push_back({false, j});
  return ops;
}

class PipelineTrainer : public Trainer {
 public:
  PipelineTrainer(const TrainConfig& c, ncclComm_t comm, bool oneFOneB, ncclComm_t dpComm)
      : c_(c), comm_(comm), dpComm_(dpComm), oneFOneB_(oneFOneB), p_(commSize(comm)), s_(commRank(comm)),
        opt_(c.optimizer), data_(c.model, c.seed), sampler_(data_.size(), commSize(dpComm), commRank(dpComm), c.seed) {
    shape_ = buildModel(c.model, {}, {}, DataParallelGroup{dpComm, nullptr});
    const int U = shape_->numUnits();
    if (U < p_) throw std::invalid_argument("more pipeline stages than model units");
    first_ = s_ * U / p_;
    last_ = (s_ + 1) * U / p_;
    for (int u = first_; u < last_; ++u) {
      weights_.emplace_back(shape_->unitNumel(u), 0.0f);
      grads_.emplace_back(shape_->unitNumel(u), 0.0f);
      state_.emplace_back(shape_->unitNumel(u) * opt_.stateFloats(), 0.0f);
      bindUnit(*shape_, u, weights_.back().data(), grads_.back().data());
    }
    for (int u = first_; u < last_; ++u)
      for (Param* p : shape_->unitParams(u)) initParam(*p, c.seed, nameKey(p->name));
    const ModelConfig& m = c.model;
    int width = m.kind == "transformer" ? std::max(m.d, m.vocab) : std::max({m.inputs, m.hidden, m.classes, m.moe.d});
    int rowsPerSample = m.kind == "transformer" ? m.seq : 1;
    msgFloats_ = 4 + size_t(c.localBatch / c.accumulate) * rowsPerSample * width;
  }

  Result<double> step(int k) override {
    return catchCommErrorLoss([&] { return runStep(k); });
  }

  MemoryReport memory() const override {
    MemoryReport r;
    for (size_t i = 0; i < weights_.size(); ++i) {
      r.paramBytes += weights_[i].size() * sizeof(float);
      r.gradBytes += grads_[i].size() * sizeof(float);
      r.optimizerBytes += state_[i].size() * sizeof(float);
    }
    return r;
  }

  // Every stage broadcasts its units in turn.
  Result<std::vector<float>> fullParams() override {
    std::vector<float> all;
    Status st = catchCommError([&] {
      const int U = shape_->numUnits();
      for (int s = 0; s < p_; ++s) {
        size_t count = 0;
        for (int u = s * U / p_; u < (s + 1) * U / p_; ++u) count += shape_->unitNumel(u);
        std::vector<float> buf;
        if (s == s_)
          for (auto& w : weights_) buf.insert(buf.end(), w.begin(), w.end());
        buf.resize(count);
        if (count)
          check(ncclBroadcast(buf.data(), buf.data(), count, ncclFloat32, s, comm_, nullptr), "ncclBroadcast", comm_);
        all.insert(all.end(), buf.begin(), buf.end());
      }
    });
    if (!st.isOk()) return st;
    return all;
  }
  int rowsPerStep() const override { return rows_; }

 private:
  // Packs shape + data into a fixed-size message.
  std::vector<float> pack(const Tensor& t) const {
    std::vector<float> msg(msgFloats_, 0.0f);
    msg[0] = float(t.shape.size());
    for (size_t i = 0; i < t.shape.size(); ++i) msg[1 + i] = float(t.shape[i]);
    std::copy(t.data.begin(), t.data.end(), msg.begin() + 4);
    return msg;
  }
  static Tensor unpack(const std::vector<float>& msg) {
    std::vector<int> shape;
    for (int i = 0; i < int(msg[0]); ++i) shape.push_back(int(msg[1 + i]));
    Tensor t(shape);
    std::copy_n(msg.begin() + 4, t.size(), t.data.begin());
    return t;
  }

  // Sends the pending message (if any) and receives from `from` (if >= 0) in one group.
  Tensor exchange(int from) {
    std::vector<float> in(from >= 0 ? msgFloats_ : 0);
    check(ncclGroupStart(), "ncclGroupStart");
    if (pendingPeer_ >= 0)
      check(ncclSend(pending_.data(), msgFloats_, ncclFloat32, pendingPeer_, comm_, nullptr), "ncclSend", comm_);
    if (from >= 0) check(ncclRecv(in.data(), msgFloats_, ncclFloat32, from, comm_, nullptr), "ncclRecv", comm_);
    check(ncclGroupEnd(), "ncclGroupEnd");
    pendingPeer_ = -1;
    return from >= 0 ? unpack(in) : Tensor();
  }

  Model& replica(int micro) {
    auto it = replicas_.find(micro);
    if (it != replicas_.end()) return *it->second;
    std::unique_ptr<Model> r;
    if (!free_.empty()) {
      r = std::move(free_.back());
      free_.pop_back();
    } else {
      r = buildModel(c_.model, {}, {}, DataParallelGroup{dpComm_, nullptr});
      r->checkpoint.assign(r->numUnits(), c_.checkpoint);
      for (int u = first_; u < last_; ++u) bindUnit(*r, u, weights_[u - first_].data(), grads_[u - first_].data());
    }
    Model& ref = *r;
    replicas_[micro] = std::move(r);
    peakInFlight_ = std::max(peakInFlight_, int(replicas_.size()));
    return ref;
  }

  void forward(int i, const std::vector<Batch>& micro) {
    Tensor in = s_ == 0 ? micro[i].x : exchange(s_ - 1);
    if (s_ == 0) exchange(-1);
    auto t0 = Clock::now();
    Model& m = replica(i);
    for (auto& u : m.units) u->setGradScale(1.0f / c_.accumulate);
    Tensor out = m.forwardUnits(first_, last_, in, nullptr);
    if (s_ == p_ - 1) {
      Tensor dlogits;
      loss_ += lossAndGradient(m, out, micro[i].labels, 1.0f / c_.accumulate, &dlogits);
      dlogits_[i] = std::move(dlogits);
    } else {
      pending_ = pack(out);
      pendingPeer_ = s_ + 1;
    }
    busy_ += since(t0);
  }

  void backward(int i) {
    Tensor dy;
    if (s_ == p_ - 1) {
      exchange(-1);
      dy = std::move(dlogits_[i]);
      dlogits_.erase(i);
    } else {
      dy = exchange(s_ + 1);
    }
    auto t0 = Clock::now();
    Model& m = replica(i);
    Tensor dx = m.backwardUnits(first_, last_, dy, nullptr);
    free_.push_back(std::move(replicas_[i]));
    replicas_.erase(i);
    if (s_ > 0) {
      pending_ = pack(dx);
      pendingPeer_ = s_ - 1;
    }
    busy_ += since(t0);
  }

  double runStep(int k) {
    auto t0 = Clock::now();
    Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
    rows_ = batch.x.shape[0] * (c_.model.kind == "transformer" ? c_.model.seq : 1);
    std::vector<Batch> micro = splitBatch(batch, c_.accumulate);
    for (auto& g : grads_) std::fill(g.begin(), g.end(), 0.0f);
    loss_ = busy_ = 0;
    for (const Op& op : schedule(oneFOneB_, s_, p_, c_.accumulate)) {
      if (op.forward) forward(op.micro, micro);
      else backward(op.micro);
    }
    exchange(-1);  // the last pending send
    if (commSize(dpComm_) > 1)
      for (auto& g : grads_)
        if (!g.empty()) allReduce(dpComm_, g.data(), g.size(), ncclAvg);
    ++steps_;
    for (size_t i = 0; i < weights_.size(); ++i)
      opt_.update(weights_[i].data(), grads_[i].data(), state_[i].empty() ? nullptr : state_[i].data(),
                  weights_[i].size(), steps_);
    double loss = loss_ / c_.accumulate;
    check(ncclBroadcast(&loss, &loss, 1, ncclFloat64, p_ - 1, comm_, nullptr), "ncclBroadcast", comm_);
    if (commSize(dpComm_) > 1) loss = allReduceScalar(dpComm_, loss, ncclAvg);
    times_.totalSeconds = since(t0);
    times_.computeSeconds = busy_;
    double busyAll = allReduceScalar(comm_, busy_, ncclSum), span = allReduceScalar(comm_, times_.totalSeconds, ncclMax);
    times_.bubbleMeasured = 1.0 - busyAll / (p_ * span);
    times_.bubbleTheory = double(p_ - 1) / (c_.accumulate + p_ - 1);
    times_.peakInFlight = peakInFlight_;
    return loss;
  }

  TrainConfig c_;
  ncclComm_t comm_, dpComm_;
  bool oneFOneB_;
  int p_, s_, first_ = 0, last_ = 0;
  Optimizer opt_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::unique_ptr<Model> shape_;  // this stage's units bound to storage; others unbound
  std::vector<std::vector<float>> weights_, grads_, state_;
  std::map<int, std::unique_ptr<Model>> replicas_;
  std::vector<std::unique_ptr<Model>> free_;
  std::map<int, Tensor> dlogits_;
  std::vector<float> pending_;
  int pendingPeer_ = -1;
  size_t msgFloats_ = 0;
  double loss_ = 0, busy_ = 0;
  int steps_ = 0, rows_ = 0, peakInFlight_ = 0;
};

}  // namespace

Result<std::unique_ptr<Trainer>> makePipelineTrainer(const TrainConfig& config, ncclComm_t comm, bool oneFOneB,
                                                     ncclComm_t dpComm) {
  if (config.localBatch % config.accumulate != 0)
    return invalidArgument("pipeline: the batch must divide into --accumulate micro-batches");
  std::unique_ptr<Trainer> t;
  try {
    Status s = catchCommError([&] { t = std::make_unique<PipelineTrainer>(config, comm, oneFOneB, dpComm); });
    if (!s.isOk()) return s;
  } catch (const std::invalid_argument& e) {
    return invalidArgument(e.what());
  }
  return t;
}

}  // namespace plait::training
