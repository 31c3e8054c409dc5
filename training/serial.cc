// The serial reference trainer, and helpers every trainer shares.
#include <chrono>
#include <cmath>

#include "training/trainer.h"

namespace plait::training {

std::vector<Batch> splitBatch(const Batch& batch, int k) {
  const int samples = batch.x.shape[0], per = samples / k;
  const size_t xPer = batch.x.size() / samples, lPer = batch.labels.size() / samples;
  std::vector<Batch> out(k);
  for (int i = 0; i < k; ++i) {
    std::vector<int> shape = batch.x.shape;
    shape[0] = per;
    out[i].x = Tensor(shape);
    std::copy_n(batch.x.data.begin() + i * per * xPer, per * xPer, out[i].x.data.begin());
    out[i].labels.assign(batch.labels.begin() + i * per * lPer, batch.labels.begin() + (i + 1) * per * lPer);
  }
  return out;
}

namespace {

class SerialTrainer : public Trainer {
 public:
  explicit SerialTrainer(const TrainConfig& c)
      : c_(c), model_(buildModel(c.model)), storage_(*model_), opt_(c.optimizer), data_(c.model, c.seed),
        precision_(parsePrecision(c.precision)), scaler_(precision_, c.lossScale) {
    initModel(*model_, c.seed);
    std::vector<std::vector<float>*> compute;
    for (int u = 0; u < model_->numUnits(); ++u) {
      state_.emplace_back(model_->unitNumel(u) * opt_.stateFloats(), 0.0f);
      compute.push_back(&storage_.weights(u));
    }
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
    model_->compute = precision_;
    if (precision_ != Precision::kFp32) master_ = std::make_unique<MasterWeights>(precision_, compute);
  }

  Result<double> step(int k) override {
    auto t0 = std::chrono::steady_clock::now();
    Batch batch = globalBatch(data_, k, c_.localBatch, c_.nranksData, c_.seed);
    storage_.zeroGrads();
    double loss = 0;
    const double scale = scaler_.scale();
    for (const Batch& micro : splitBatch(batch, c_.accumulate))
      loss += model_->forwardBackward(micro, float(scale / c_.accumulate)).loss;
    if (precision_ == Precision::kFp32 || unscaleGradients(k, scale)) {
      ++steps_;
      for (int u = 0; u < model_->numUnits(); ++u)
        opt_.update(master_ ? master_->master(u) : storage_.weights(u).data(), storage_.grads(u).data(),
                    state_[u].data(), model_->unitNumel(u), steps_);
      if (master_) master_->refresh();
    }
    times_.totalSeconds = times_.computeSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rows_ = batch.x.shape[0] * (c_.model.kind == "transformer" ? c_.model.seq : 1);
    return loss / c_.accumulate;
  }

  MemoryReport memory() const override {
    MemoryReport m;
    for (int u = 0; u < model_->numUnits(); ++u) {
      m.paramBytes += model_->unitNumel(u) * sizeof(float);
      m.gradBytes += model_->unitNumel(u) * sizeof(float);
      m.optimizerBytes += state_[u].size() * sizeof(float);
    }
    if (master_) m.paramBytes += master_->bytes();
    return m;
  }

  // The fp32 master weights under mixed precision.
  Result<std::vector<float>> fullParams() override {
    if (!master_) return storage_.flatWeights();
    std::vector<float> all;
    for (int u = 0; u < model_->numUnits(); ++u)
      all.insert(all.end(), master_->master(u), master_->master(u) + model_->unitNumel(u));
    return all;
  }
  int rowsPerStep() const override { return rows_; }
  double lossScale() const override { return scaler_.scale(); }
  int skippedSteps() const override { return scaler_.skippedSteps(); }

 private:
  // Mixed precision: the gradients as one rank would communicate them (16-bit,
  // then unscaled by 1/scale in fp32). Returns false, with the scaler told,
  // when the step must be skipped for an inf or NaN.
  bool unscaleGradients(int k, double scale) {
    bool overflow = false;
    for (int u = 0; u < model_->numUnits(); ++u) {
      std::vector<float>& g = storage_.grads(u);
      if (k == c_.injectOverflowStep && u == 0 && !g.empty()) g[0] = INFINITY;
      std::vector<uint16_t> words(g.size());
      packGradients(precision_, g.data(), g.size(), words.data());
      unpackGradients(precision_, words.data(), g.size(), float(1.0 / scale), g.data());
      overflow = overflow || hasNonFinite(g.data(), g.size());
    }
    return scaler_.update(overflow);
  }

  TrainConfig c_;
  std::unique_ptr<Model> model_;
  FlatStorage storage_;
  Optimizer opt_;
  SyntheticDataset data_;
  std::vector<std::vector<float>> state_;
  Precision precision_;
  LossScaler scaler_;
  std::unique_ptr<MasterWeights> master_;  // mixed precision only
  int steps_ = 0, rows_ = 0;
};

}  // namespace

std::unique_ptr<Trainer> makeSerialTrainer(const TrainConfig& config) {
  return std::make_unique<SerialTrainer>(config);
}

}  // namespace plait::training
