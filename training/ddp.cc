// Distributed data parallel, after PyTorch's DDP (Li et al., VLDB 2020).
//
// Every rank holds the whole model. At construction rank 0's parameters are
// broadcast so replicas start identical. Gradients live in buckets: the
// parameters are taken in reverse order (the order backward produces their
// gradients), packed into buckets of bucketBytes (the first only
// firstBucketBytes, so communication starts early), and each Param's g points
// into its bucket, so the all-reduce works in place and nothing is copied.
// When backward finishes a unit, its parameters are marked ready; a bucket
// whose parameters are all ready is all-reduced (ncclAvg) on a HostStream at
// once, overlapping the rest of backward. Buckets complete in the same order
// on every rank, so every rank issues the same collectives in the same order.
// After backward the step waits for the stream, then every replica applies the
// same update to the same averaged gradients and stays identical.
// no_sync: with accumulate = k, micro-batches 1..k−1 only accumulate into the
// buckets; the last one launches the reductions.
// Mixed precision (mixed_precision.h): a bucket is packed into 16-bit words
// when it launches and summed as ncclBfloat16/ncclFloat16; after the wait the
// words are unpacked into the fp32 bucket times 1/(loss scale × ranks), an
// inf/NaN flag is all-reduced with ncclMax, and the fp32 master weights are
// updated unless some rank saw an overflow.
// Isolation modes for the overlap benchmark (TrainConfig::ddpIsolate):
// "compute" runs forward/backward without any all-reduce (replicas drift
// apart: timing only); "comm" skips forward/backward and only all-reduces the
// buckets, so the benchmark can tell communication time from compute time.
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "plait/stream.hpp"
#include "training/collectives.h"
#include "training/trainer.h"

namespace plait::training {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Bucket {
  std::vector<float> grads;
  std::vector<uint16_t> words;  // the 16-bit wire copy under mixed precision
  std::vector<Param*> params;
  int ready = 0;
  bool launched = false;
};

class DdpTrainer : public Trainer, private Hooks {
 public:
  DdpTrainer(const TrainConfig& c, ncclComm_t comm)
      : c_(c), comm_(comm), model_(buildModel(c.model, {}, {}, DataParallelGroup{comm, stream_.handle()})),
        opt_(c.optimizer), data_(c.model, c.seed),
        sampler_(data_.size(), commSize(comm), commRank(comm), c.seed), precision_(parsePrecision(c.precision)),
        scaler_(precision_, c.lossScale), rank_(commRank(comm)) {
    for (int u = 0; u < model_->numUnits(); ++u) {
      weights_.emplace_back(model_->unitNumel(u), 0.0f);
      state_.emplace_back(model_->unitNumel(u) * opt_.stateFloats(), 0.0f);
      bindUnit(*model_, u, weights_[u].data(), nullptr);
    }
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
    model_->compute = precision_;
    buildBuckets();
    // Deliberately different on each rank: the broadcast must make them equal.
    initModel(*model_, c.seed + uint64_t(commRank(comm)));
  }

  // Makes every replica rank 0's (and then keeps fp32 masters of them under
  // mixed precision).
  Status broadcastParams() {
    Status s = catchCommError([&] {
      for (auto& w : weights_)
        check(ncclBroadcast(w.data(), w.data(), w.size(), ncclFloat32, 0, comm_, nullptr), "ncclBroadcast", comm_);
    });
    if (s.isOk() && precision_ != Precision::kFp32) {
      std::vector<std::vector<float>*> compute;
      for (auto& w : weights_) compute.push_back(&w);
      master_ = std::make_unique<MasterWeights>(precision_, compute);
    }
    return s;
  }

  Result<double> step(int k) override {
    return catchCommErrorLoss([&] { return runStep(k); });
  }

  MemoryReport memory() const override {
    MemoryReport m;
    for (size_t u = 0; u < weights_.size(); ++u) {
      m.paramBytes += weights_[u].size() * sizeof(float);
      m.optimizerBytes += state_[u].size() * sizeof(float);
    }
    for (const Bucket& b : buckets_) m.gradBytes += b.grads.size() * sizeof(float) + b.words.size() * 2;
    if (master_) m.paramBytes += master_->bytes();
    return m;
  }

  // The fp32 master weights under mixed precision.
  Result<std::vector<float>> fullParams() override {
    std::vector<float> all;
    for (size_t u = 0; u < weights_.size(); ++u) {
      const float* w = master_ ? master_->master(u) : weights_[u].data();
      all.insert(all.end(), w, w + weights_[u].size());
    }
    return all;
  }
  int rowsPerStep() const override { return rows_; }
  double lossScale() const override { return scaler_.scale(); }
  int skippedSteps() const override { return scaler_.skippedSteps(); }
  size_t numBuckets() const { return buckets_.size(); }

 private:
  void buildBuckets() {
    std::vector<Param*> all = model_->params();
    Bucket current;
    size_t bytes = 0;
    auto close = [&] {
      if (current.params.empty()) return;
      buckets_.push_back(std::move(current));
      current = Bucket();
      bytes = 0;
    };
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      current.params.push_back(*it);
      bytes += (*it)->numel * sizeof(float);
      if (bytes >= (buckets_.empty() ? c_.firstBucketBytes : c_.bucketBytes)) close();
    }
    close();
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = buckets_[i];
      size_t n = 0;
      for (Param* p : b.params) n += p->numel;
      b.grads.assign(n, 0.0f);
      if (precision_ != Precision::kFp32) b.words.assign(n, 0);
      size_t off = 0;
      for (Param* p : b.params) {
        p->g = b.grads.data() + off;  // the gradient is a view into its bucket
        off += p->numel;
        bucketOf_[p] = i;
      }
    }
  }

  void launch(Bucket& b) {
    b.launched = true;
    if (c_.ddpIsolate == "compute") return;
    if (precision_ == Precision::kFp32)
      return allReduce(comm_, b.grads.data(), b.grads.size(), ncclAvg, stream_.handle());
    if (step_ == c_.injectOverflowStep && rank_ == c_.injectOverflowRank && &b == &buckets_.front())
      b.grads[0] = INFINITY;
    packGradients(precision_, b.grads.data(), b.grads.size(), b.words.data());
    check(ncclAllReduce(b.words.data(), b.words.data(), b.words.size(), gradientType(precision_), ncclSum, comm_,
                        stream_.handle()),
          "ncclAllReduce", comm_);
  }

  // Mixed precision, after the wait: unscales the reduced gradients; returns
  // whether every rank found them finite (and tells the scaler).
  bool unscaleGradients(double scale) {
    const float factor = float(1.0 / (scale * commSize(comm_)));
    bool overflow = false;
    for (Bucket& b : buckets_) {
      unpackGradients(precision_, b.words.data(), b.words.size(), factor, b.grads.data());
      overflow = overflow || hasNonFinite(b.grads.data(), b.grads.size());
    }
    overflow = allReduceScalar(comm_, overflow ? 1.0 : 0.0, ncclMax) != 0.0;
    return scaler_.update(overflow);
  }

  void update() {
    ++steps_;
    for (size_t u = 0; u < weights_.size(); ++u) {
      // A unit's gradients may span buckets; update param by param.
      size_t off = 0;
      for (Param* p : model_->unitParams(int(u))) {
        float* w = master_ ? master_->master(u) + off : p->w;
        opt_.updateStrided(w, p->g, state_[u].data(), off, weights_[u].size(), p->numel, steps_);
        off += p->numel;
      }
    }
    if (master_) master_->refresh();
  }

  // Launches every complete bucket that is next in order.
  void launchReady() {
    while (next_ < buckets_.size() && buckets_[next_].ready == int(buckets_[next_].params.size()))
      launch(buckets_[next_++]);
  }

  void postBackward(int unit) override {
    if (!sync_) return;
    for (Param* p : model_->unitParams(unit)) buckets_[bucketOf_.at(p)].ready++;
    if (c_.overlap) launchReady();
  }

  double runStep(int k) {
    auto t0 = Clock::now();
    Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
    rows_ = batch.x.shape[0] * (c_.model.kind == "transformer" ? c_.model.seq : 1);
    for (Bucket& b : buckets_) {
      std::fill(b.grads.begin(), b.grads.end(), 0.0f);
      b.ready = 0;
      b.launched = false;
    }
    next_ = 0;
    step_ = k;
    std::vector<Batch> micro = splitBatch(batch, c_.accumulate);
    double loss = 0;
    const double scale = scaler_.scale();
    for (int i = 0; i < c_.accumulate && c_.ddpIsolate != "comm"; ++i) {
      sync_ = i == c_.accumulate - 1;  // earlier micro-batches run under no_sync
      loss += model_->forwardBackward(micro[i], float(scale / c_.accumulate), this).loss;
    }
    for (Bucket& b : buckets_) b.ready = int(b.params.size());
    launchReady();  // all of them when !overlap; none left otherwise
    times_.computeSeconds = since(t0);
    auto t1 = Clock::now();
    Status s = stream_.synchronize();
    if (!s.isOk()) throw CommError(s);
    times_.commWaitSeconds = since(t1);
    if (precision_ == Precision::kFp32 || unscaleGradients(scale)) update();
    times_.totalSeconds = since(t0);
    return allReduceScalar(comm_, loss / c_.accumulate, ncclAvg);
  }

  TrainConfig c_;
  ncclComm_t comm_;
  HostStream stream_;  // before model_: SyncBN layers queue on it
  std::unique_ptr<Model> model_;
  Optimizer opt_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::vector<std::vector<float>> weights_, state_;
  std::vector<Bucket> buckets_;
  std::unordered_map<Param*, size_t> bucketOf_;
  Precision precision_;
  LossScaler scaler_;
  std::unique_ptr<MasterWeights> master_;  // mixed precision only
  size_t next_ = 0;
  bool sync_ = true;
  int steps_ = 0, rows_ = 0, step_ = 0, rank_ = 0;
};

}  // namespace

Result<std::unique_ptr<Trainer>> makeDdpTrainer(const TrainConfig& config, ncclComm_t comm) {
  std::unique_ptr<DdpTrainer> t;
  Status s = catchCommError([&] { t = std::make_unique<DdpTrainer>(config, comm); });
  if (s.isOk()) s = t->broadcastParams();
  if (!s.isOk()) return s;
  return std::unique_ptr<Trainer>(std::move(t));
}

}  // namespace plait::training
