// The serial reference trainer, and helpers every trainer shares.
#include <chrono>

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
      : c_(c), model_(buildModel(c.model)), storage_(*model_), opt_(c.optimizer), data_(c.model, c.seed) {
    initModel(*model_, c.seed);
    for (int u = 0; u < model_->numUnits(); ++u)
      state_.emplace_back(model_->unitNumel(u) * opt_.stateFloats(), 0.0f);
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
  }

  Result<double> step(int k) override {
    auto t0 = std::chrono::steady_clock::now();
    Batch batch = globalBatch(data_, k, c_.localBatch, c_.nranksData, c_.seed);
    storage_.zeroGrads();
    double loss = 0;
    for (const Batch& micro : splitBatch(batch, c_.accumulate))
      loss += model_->forwardBackward(micro, 1.0f / c_.accumulate).loss;
    ++steps_;
    for (int u = 0; u < model_->numUnits(); ++u)
      opt_.update(storage_.weights(u).data(), storage_.grads(u).data(), state_[u].data(), model_->unitNumel(u),
                  steps_);
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
    return m;
  }

  Result<std::vector<float>> fullParams() override { return storage_.flatWeights(); }
  int rowsPerStep() const override { return rows_; }

 private:
  TrainConfig c_;
  std::unique_ptr<Model> model_;
  FlatStorage storage_;
  Optimizer opt_;
  SyntheticDataset data_;
  std::vector<std::vector<float>> state_;
  int steps_ = 0, rows_ = 0;
};

}  // namespace

std::unique_ptr<Trainer> makeSerialTrainer(const TrainConfig& config) {
  return std::make_unique<SerialTrainer>(config);
}

}  // namespace plait::training
