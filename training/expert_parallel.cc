// Expert parallelism (GShard / Switch): the MoE layer's experts spread over
// the ranks, tokens data-parallel.
//
// Each rank takes its shard of the batch (DistributedSampler) and routes it as
// one group; MoeLayer moves token buffers to the experts' ranks and back with
// ncclAlltoAll (moe_layer.h). Replicated parameters (everything but the
// experts) get data-parallel gradients: averaged over ranks. An expert's
// gradient already sums the rows of every rank, each scaled by 1/(local rows);
// dividing by N makes it the gradient of the global mean loss, as in serial.
#include <chrono>

#include "training/collectives.h"
#include "training/trainer.h"

namespace plait::training {
namespace {

class ExpertParallelTrainer : public Trainer {
 public:
  ExpertParallelTrainer(const TrainConfig& c, ncclComm_t comm)
      : c_(c), comm_(comm), n_(commSize(comm)), rank_(commRank(comm)),
        model_(buildModel(withOneGroup(c.model), {}, ExpertParallel{comm, rank_, n_})), storage_(*model_),
        opt_(c.optimizer), data_(c.model, c.seed), sampler_(data_.size(), n_, rank_, c.seed) {
    initModel(*model_, c.seed);  // by name: expert k gets serial expert k's values
    for (int u = 0; u < model_->numUnits(); ++u) state_.emplace_back(model_->unitNumel(u) * opt_.stateFloats(), 0.0f);
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
    for (auto& u : model_->units)
      if (auto* moe = dynamic_cast<MoeLayer*>(u.get()))
        for (Param* p : moe->expertParams()) experts_.push_back(p);
  }

  Result<double> step(int k) override {
    return catchCommErrorLoss([&] { return runStep(k); });
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

  // Serial order; each rank's experts are a contiguous run of the MoE unit.
  Result<std::vector<float>> fullParams() override {
    std::vector<float> all;
    Status s = catchCommError([&] {
      for (Param* p : model_->params()) {
        if (!isExpert(p)) {
          all.insert(all.end(), p->w, p->w + p->numel);
          continue;
        }
        if (p != experts_.front()) continue;  // gathered as one block below
        size_t local = 0;
        for (Param* e : experts_) local += e->numel;
        std::vector<float> mine(experts_.front()->w, experts_.front()->w + local), every(local * n_);
        check(ncclAllGather(mine.data(), every.data(), local, ncclFloat32, comm_, nullptr), "ncclAllGather", comm_);
        all.insert(all.end(), every.begin(), every.end());
      }
    });
    if (!s.isOk()) return s;
    return all;
  }
  int rowsPerStep() const override { return rows_; }

 private:
  static ModelConfig withOneGroup(ModelConfig m) {
    m.moe.groups = 1;
    return m;
  }
  bool isExpert(Param* p) const { return std::find(experts_.begin(), experts_.end(), p) != experts_.end(); }

  double runStep(int k) {
    auto t0 = std::chrono::steady_clock::now();
    Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
    rows_ = batch.x.shape[0];
    storage_.zeroGrads();
    double loss = 0;
    for (const Batch& micro : splitBatch(batch, c_.accumulate))
      loss += model_->forwardBackward(micro, 1.0f / c_.accumulate).loss;
    for (Param* p : model_->params()) {
      if (isExpert(p))
        for (size_t i = 0; i < p->numel; ++i) p->g[i] /= float(n_);
      else
        allReduce(comm_, p->g, p->numel, ncclAvg);
    }
    ++steps_;
    for (int u = 0; u < model_->numUnits(); ++u)
      opt_.update(storage_.weights(u).data(), storage_.grads(u).data(), state_[u].empty() ? nullptr : state_[u].data(),
                  model_->unitNumel(u), steps_);
    times_.totalSeconds = times_.computeSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return allReduceScalar(comm_, loss / c_.accumulate, ncclAvg);
  }

  TrainConfig c_;
  ncclComm_t comm_;
  int n_, rank_;
  std::unique_ptr<Model> model_;
  FlatStorage storage_;
  Optimizer opt_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::vector<std::vector<float>> state_;
  std::vector<Param*> experts_;
  int steps_ = 0, rows_ = 0;
};

}  // namespace

Result<std::unique_ptr<Trainer>> makeExpertParallelTrainer(const TrainConfig& config, ncclComm_t comm) {
  if (config.model.kind != "moe") return invalidArgument("expert parallelism needs --model moe");
  if (config.model.moe.experts % commSize(comm) != 0)
    return invalidArgument("expert parallelism: experts must divide by the number of ranks");
  std::unique_ptr<Trainer> t;
  Status s = catchCommError([&] { t = std::make_unique<ExpertParallelTrainer>(config, comm); });
  if (!s.isOk()) return s;
  return t;
}

}  // namespace plait::training
