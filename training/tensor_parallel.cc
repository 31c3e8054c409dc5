// Megatron-style tensor parallelism (Shoeybi et al., 2019), optionally
// combined with data parallelism (dp-tp).
//
// Within a tensor-parallel group every rank sees the same batch; each
// transformer block holds 1/T of the attention heads (Q, K, V column-parallel,
// output row-parallel) and 1/T of the MLP's hidden units (column- then
// row-parallel), with f/g all-reduces inside the layers (layers.h). Embedding,
// layer norms and the head are replicated; their gradients come out identical
// on every rank of the group (same inputs, same all-reduced gradients), so
// they need no communication. With a data-parallel communicator too, each
// tensor-parallel group takes its shard of the batch and every gradient is
// averaged over the data-parallel group (same shard of the same parameter on
// each member) after backward.
//
// Parameters start as slices of the serial model's initial values, so a run
// can be compared with serial training element for element.
#include <chrono>

#include "training/collectives.h"
#include "training/trainer.h"

namespace plait::training {
namespace {

enum class Split { kNone, kRows, kCols };

// How a shard's shape relates to the full parameter's.
Split splitOf(const Param& shard, const Param& full) {
  if (shard.shape == full.shape) return Split::kNone;
  if (shard.shape.size() == 2 && shard.shape[0] != full.shape[0]) return Split::kRows;
  return Split::kCols;  // a column slice of a matrix, or a slice of a vector
}

// Copies rank r's slice of full into shard (or, with toFull, back).
void copySlice(const Param& shard, const Param& full, const float* src, float* dst, int r, bool toFull) {
  Split s = splitOf(shard, full);
  const int rows = full.shape.size() == 2 ? full.shape[0] : 1, cols = full.shape.back();
  const int shardRows = shard.shape.size() == 2 ? shard.shape[0] : 1, shardCols = shard.shape.back();
  for (int i = 0; i < shardRows; ++i)
    for (int j = 0; j < shardCols; ++j) {
      int fi = s == Split::kRows ? r * shardRows + i : i, fj = s == Split::kCols ? r * shardCols + j : j;
      size_t si = size_t(i) * shardCols + j, f = size_t(fi) * cols + fj;
      (void)rows;
      if (toFull) dst[f] = src[si];
      else dst[si] = src[f];
    }
}

class TensorParallelTrainer : public Trainer {
 public:
  TensorParallelTrainer(const TrainConfig& c, ncclComm_t tpComm, ncclComm_t dpComm)
      : c_(c), tpComm_(tpComm), dpComm_(dpComm), tp_{tpComm, commRank(tpComm), commSize(tpComm)},
        model_(buildModel(c.model, tp_)), storage_(*model_), full_(buildModel(c.model)), fullStorage_(*full_),
        opt_(c.optimizer), data_(c.model, c.seed), sampler_(data_.size(), commSize(dpComm), commRank(dpComm), c.seed) {
    if (tp_.size == 1) tp_.comm = nullptr;
    initModel(*full_, c.seed);
    auto shards = model_->params(), fulls = full_->params();
    for (size_t i = 0; i < shards.size(); ++i) copySlice(*shards[i], *fulls[i], fulls[i]->w, shards[i]->w, tp_.rank, false);
    for (int u = 0; u < model_->numUnits(); ++u) state_.emplace_back(model_->unitNumel(u) * opt_.stateFloats(), 0.0f);
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
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

  // Gathers every shard from the tensor-parallel group into the full layout.
  Result<std::vector<float>> fullParams() override {
    Status s = catchCommError([&] {
      auto shards = model_->params(), fulls = full_->params();
      for (size_t i = 0; i < shards.size(); ++i) {
        std::vector<float> all(shards[i]->numel * tp_.size);
        if (tp_.size > 1)
          check(ncclAllGather(shards[i]->w, all.data(), shards[i]->numel, ncclFloat32, tpComm_, nullptr),
                "ncclAllGather", tpComm_);
        else
          std::copy_n(shards[i]->w, shards[i]->numel, all.data());
        for (int r = 0; r < tp_.size; ++r)
          copySlice(*shards[i], *fulls[i], all.data() + r * shards[i]->numel, fulls[i]->w, r, true);
      }
    });
    if (!s.isOk()) return s;
    return fullStorage_.flatWeights();
  }
  int rowsPerStep() const override { return rows_; }

 private:
  double runStep(int k) {
    auto t0 = std::chrono::steady_clock::now();
    Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
    rows_ = batch.x.shape[0] * (c_.model.kind == "transformer" ? c_.model.seq : 1);
    storage_.zeroGrads();
    double loss = 0;
    for (const Batch& micro : splitBatch(batch, c_.accumulate))
      loss += model_->forwardBackward(micro, 1.0f / c_.accumulate).loss;
    loss /= c_.accumulate;
    if (commSize(dpComm_) > 1) {
      for (int u = 0; u < model_->numUnits(); ++u)
        if (!storage_.grads(u).empty()) allReduce(dpComm_, storage_.grads(u).data(), storage_.grads(u).size(), ncclAvg);
      loss = allReduceScalar(dpComm_, loss, ncclAvg);
    }
    ++steps_;
    for (int u = 0; u < model_->numUnits(); ++u)
      opt_.update(storage_.weights(u).data(), storage_.grads(u).data(), state_[u].empty() ? nullptr : state_[u].data(),
                  model_->unitNumel(u), steps_);
    times_.totalSeconds = times_.computeSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return loss;
  }

  TrainConfig c_;
  ncclComm_t tpComm_, dpComm_;
  TensorParallel tp_;
  std::unique_ptr<Model> model_;
  FlatStorage storage_;
  std::unique_ptr<Model> full_;  // the serial layout, for initial values and fullParams()
  FlatStorage fullStorage_;
  Optimizer opt_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::vector<std::vector<float>> state_;
  int steps_ = 0, rows_ = 0;
};

}  // namespace

Result<std::unique_ptr<Trainer>> makeTensorParallelTrainer(const TrainConfig& config, ncclComm_t tpComm,
                                                           ncclComm_t dpComm) {
  if (config.model.kind != "transformer")
    return invalidArgument("tensor parallelism splits transformer blocks: use --model transformer");
  std::unique_ptr<Trainer> t;
  Status s = catchCommError([&] { t = std::make_unique<TensorParallelTrainer>(config, tpComm, dpComm); });
  if (!s.isOk()) return s;
  return t;
}

}  // namespace plait::training
