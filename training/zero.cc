// ZeRO (Rajbhandari et al., SC 2020), stages 1–3, one flat parameter per unit
// sharded over the N data-parallel ranks like FSDP's flat parameters.
//
// Each unit's parameters are one flat array, padded to a multiple of N; rank r
// owns elements [r·s, (r+1)·s), s = padded/N, and holds the master copy and
// the optimizer state of that shard only (stage 1 on). Adam is elementwise, so
// updating shards is bit-for-bit updating the whole.
//   stage 1: full parameters and full gradients on every rank; after backward
//            each unit's gradient is reduce-scattered (ncclAvg) to its shard,
//            the shard is updated, and the unit all-gathered back.
//   stage 2: + a unit's full gradient exists only during its backward: it is
//            reduce-scattered into the shard as soon as the unit is done and
//            freed.
//   stage 3: + a unit's full parameters exist only while it runs: all-gathered
//            before its forward and again before its backward, freed after.
// Traffic per step: 2Ψ for stages 1–2 (reduce-scatter + all-gather), 3Ψ for
// stage 3 (two all-gathers + reduce-scatter).
#include <chrono>

#include "training/collectives.h"
#include "training/trainer.h"

namespace plait::training {
namespace {

using Clock = std::chrono::steady_clock;

struct Unit {
  size_t numel = 0, shard = 0;  // real elements; shard = padded / N
  std::vector<float> master;    // this rank's shard of the parameters
  std::vector<float> gradShard;
  std::vector<float> state;     // optimizer state for the shard
  std::vector<float> full;      // all parameters (always for stages 1–2; while used for 3)
  std::vector<float> fullGrad;  // all gradients (always for stage 1; during backward for 2–3)
};

class ZeroTrainer : public Trainer, private Hooks {
 public:
  ZeroTrainer(const TrainConfig& c, ncclComm_t comm, int stage)
      : c_(c), comm_(comm), stage_(stage), nranks_(commSize(comm)), rank_(commRank(comm)),
        model_(buildModel(c.model, {}, {}, DataParallelGroup{comm, nullptr})), opt_(c.optimizer), data_(c.model, c.seed),
        sampler_(data_.size(), nranks_, rank_, c.seed) {
    model_->checkpoint.assign(model_->numUnits(), c.checkpoint);
    units_.resize(model_->numUnits());
    for (int u = 0; u < model_->numUnits(); ++u) {
      Unit& unit = units_[u];
      unit.numel = model_->unitNumel(u);
      unit.shard = (unit.numel + nranks_ - 1) / nranks_;
      // Initialise the whole unit once (same seed everywhere) and keep the shard.
      std::vector<float> whole(unit.shard * nranks_, 0.0f);
      bindUnit(*model_, u, whole.data(), nullptr);
      for (Param* p : model_->unitParams(u)) initParam(*p, c.seed, nameKey(p->name));
      unit.master.assign(whole.begin() + rank_ * unit.shard, whole.begin() + (rank_ + 1) * unit.shard);
      unit.gradShard.assign(unit.shard, 0.0f);
      unit.state.assign(unit.shard * opt_.stateFloats(), 0.0f);
      if (stage_ <= 2) unit.full = std::move(whole);
      if (stage_ == 1) unit.fullGrad.assign(unit.shard * nranks_, 0.0f);
      bindUnit(*model_, u, stage_ <= 2 ? unit.full.data() : nullptr,
               stage_ == 1 ? unit.fullGrad.data() : nullptr);
    }
  }

  Result<double> step(int k) override {
    return catchCommErrorLoss([&] { return runStep(k); });
  }

  MemoryReport memory() const override {
    MemoryReport m;
    for (const Unit& u : units_) {
      m.paramBytes += (u.master.size() + (stage_ <= 2 ? u.full.size() : 0)) * sizeof(float);
      m.gradBytes += (u.gradShard.size() + (stage_ == 1 ? u.fullGrad.size() : 0)) * sizeof(float);
      m.optimizerBytes += u.state.size() * sizeof(float);
    }
    m.peakTransientBytes = peakTransient_ * sizeof(float);
    return m;
  }

  Result<std::vector<float>> fullParams() override {
    std::vector<float> all;
    Status s = catchCommError([&] {
      for (Unit& u : units_) {
        std::vector<float> whole(u.shard * nranks_);
        gather(u, whole);
        all.insert(all.end(), whole.begin(), whole.begin() + u.numel);
      }
    });
    if (!s.isOk()) return s;
    return all;
  }
  int rowsPerStep() const override { return rows_; }

 private:
  void gather(Unit& u, std::vector<float>& out) {
    if (u.numel == 0) return;
    check(ncclAllGather(u.master.data(), out.data(), u.shard, ncclFloat32, comm_, nullptr), "ncclAllGather", comm_);
  }

  // Reduce-scatters the unit's full gradient (ncclAvg) and adds it to the shard.
  void reduceToShard(Unit& u) {
    if (u.numel == 0) return;
    std::vector<float> part(u.shard);
    check(ncclReduceScatter(u.fullGrad.data(), part.data(), u.shard, ncclFloat32, ncclAvg, comm_, nullptr),
          "ncclReduceScatter", comm_);
    for (size_t i = 0; i < u.shard; ++i) u.gradShard[i] += part[i];
  }

  void materialise(int unit, bool params, bool grads) {
    Unit& u = units_[unit];
    if (params) {
      u.full.assign(u.shard * nranks_, 0.0f);
      gather(u, u.full);
      transient_ += u.full.size();
    }
    if (grads) {
      u.fullGrad.assign(u.shard * nranks_, 0.0f);
      transient_ += u.fullGrad.size();
    }
    peakTransient_ = std::max(peakTransient_, transient_);
    bindUnit(*model_, unit, u.full.empty() ? nullptr : u.full.data(),
             u.fullGrad.empty() ? nullptr : u.fullGrad.data());
  }

  void release(int unit, bool params, bool grads) {
    Unit& u = units_[unit];
    if (params) {
      transient_ -= u.full.size();
      u.full = std::vector<float>();  // actually free the memory
    }
    if (grads) {
      transient_ -= u.fullGrad.size();
      u.fullGrad = std::vector<float>();
    }
    bindUnit(*model_, unit, u.full.empty() ? nullptr : u.full.data(),
             u.fullGrad.empty() ? nullptr : u.fullGrad.data());
  }

  void preForward(int unit) override {
    if (stage_ == 3) materialise(unit, true, false);
  }
  void postForward(int unit) override {
    if (stage_ == 3) release(unit, true, false);
  }
  void preBackward(int unit) override {
    if (stage_ >= 2) materialise(unit, stage_ == 3, true);
  }
  void postBackward(int unit) override {
    if (stage_ < 2) return;
    reduceToShard(units_[unit]);
    release(unit, stage_ == 3, true);
  }

  double runStep(int k) {
    auto t0 = Clock::now();
    Batch batch = data_.batch(sampler_.indices(k, c_.localBatch));
    rows_ = batch.x.shape[0] * (c_.model.kind == "transformer" ? c_.model.seq : 1);
    for (Unit& u : units_) {
      std::fill(u.gradShard.begin(), u.gradShard.end(), 0.0f);
      std::fill(u.fullGrad.begin(), u.fullGrad.end(), 0.0f);
    }
    double loss = 0;
    for (const Batch& micro : splitBatch(batch, c_.accumulate))
      loss += model_->forwardBackward(micro, 1.0f / c_.accumulate, this).loss;
    if (stage_ == 1)
      for (Unit& u : units_) reduceToShard(u);
    ++steps_;
    for (Unit& u : units_) {
      opt_.update(u.master.data(), u.gradShard.data(), u.state.empty() ? nullptr : u.state.data(), u.shard,
                  steps_);
      if (stage_ <= 2) gather(u, u.full);
    }
    times_.totalSeconds = times_.computeSeconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return allReduceScalar(comm_, loss / c_.accumulate, ncclAvg);
  }

  TrainConfig c_;
  ncclComm_t comm_;
  int stage_, nranks_, rank_;
  std::unique_ptr<Model> model_;
  Optimizer opt_;
  SyntheticDataset data_;
  DistributedSampler sampler_;
  std::vector<Unit> units_;
  size_t transient_ = 0, peakTransient_ = 0;
  int steps_ = 0, rows_ = 0;
};

}  // namespace

Result<std::unique_ptr<Trainer>> makeZeroTrainer(const TrainConfig& config, ncclComm_t comm, int stage) {
  if (stage < 1 || stage > 3) return invalidArgument("ZeRO stage must be 1, 2 or 3");
  std::unique_ptr<Trainer> t;
  Status s = catchCommError([&] { t = std::make_unique<ZeroTrainer>(config, comm, stage); });
  if (!s.isOk()) return s;
  return t;
}

}  // namespace plait::training
