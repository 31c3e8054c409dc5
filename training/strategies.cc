// One entry point for every strategy name, for the CLI and the tests.
#include "training/strategies.h"

#include <stdexcept>

#include "training/collectives.h"

namespace plait::training {
namespace {

// A trainer over communicators split from the caller's: owns and destroys them
// after the trainer that uses them.
class SplitCommTrainer : public Trainer {
 public:
  SplitCommTrainer(std::unique_ptr<Trainer> inner, std::vector<ncclComm_t> comms)
      : inner_(std::move(inner)), comms_(std::move(comms)) {}
  ~SplitCommTrainer() override {
    inner_.reset();
    for (ncclComm_t c : comms_) ncclCommDestroy(c);
  }
  Result<double> step(int k) override {
    auto r = inner_->step(k);
    times_ = inner_->lastTimes();
    return r;
  }
  MemoryReport memory() const override { return inner_->memory(); }
  Result<std::vector<float>> fullParams() override { return inner_->fullParams(); }
  int rowsPerStep() const override { return inner_->rowsPerStep(); }
  double lossScale() const override { return inner_->lossScale(); }
  int skippedSteps() const override { return inner_->skippedSteps(); }

 private:
  std::unique_ptr<Trainer> inner_;
  std::vector<ncclComm_t> comms_;
};

// DP × TP: ranks [g·T, (g+1)·T) form tensor-parallel group g; ranks with
// the same position in their group form a data-parallel group.
Result<std::unique_ptr<Trainer>> makeDpTp(const TrainConfig& config, ncclComm_t comm) {
  const int n = commSizeOf(comm), T = config.tpSize;
  if (T < 1 || n % T != 0) return invalidArgument("dp-tp: ranks must divide by the tensor-parallel size");
  int rank = 0;
  ncclCommUserRank(comm, &rank);
  ncclComm_t tp = nullptr, dp = nullptr;
  if (ncclCommSplit(comm, rank / T, rank, &tp, nullptr) != ncclSuccess ||
      ncclCommSplit(comm, rank % T, rank, &dp, nullptr) != ncclSuccess)
    return Status(Code::kInternalError, std::string("ncclCommSplit: ") + ncclGetLastError(comm));
  auto inner = makeTensorParallelTrainer(config, tp, dp);
  if (!inner.isOk()) {
    ncclCommDestroy(tp);
    ncclCommDestroy(dp);
    return inner.status();
  }
  return std::unique_ptr<Trainer>(new SplitCommTrainer(std::move(*inner), {tp, dp}));
}

// DP × PP: ranks [g·P, (g+1)·P) form pipeline g (stage = rank mod P); the
// ranks holding the same stage of every pipeline form a data-parallel group.
// 1F1B schedule.
Result<std::unique_ptr<Trainer>> makeDpPp(const TrainConfig& config, ncclComm_t comm) {
  const int n = commSizeOf(comm), P = config.ppSize;
  if (P < 1 || n % P != 0) return invalidArgument("dp-pp: ranks must divide by the pipeline size (--pp-size)");
  int rank = 0;
  ncclCommUserRank(comm, &rank);
  ncclComm_t pp = nullptr, dp = nullptr;
  if (ncclCommSplit(comm, rank / P, rank, &pp, nullptr) != ncclSuccess ||
      ncclCommSplit(comm, rank % P, rank, &dp, nullptr) != ncclSuccess)
    return Status(Code::kInternalError, std::string("ncclCommSplit: ") + ncclGetLastError(comm));
  auto inner = makePipelineTrainer(config, pp, true, dp);
  if (!inner.isOk()) {
    ncclCommDestroy(pp);
    ncclCommDestroy(dp);
    return inner.status();
  }
  return std::unique_ptr<Trainer>(new SplitCommTrainer(std::move(*inner), {pp, dp}));
}

}  // namespace

Result<std::unique_ptr<Trainer>> makeTrainer(const TrainConfig& config, ncclComm_t comm) {
  const std::string& p = config.parallel;
  try {
    parsePrecision(config.precision);
  } catch (const std::invalid_argument& e) {
    return invalidArgument(e.what());
  }
  if (config.precision != "fp32" && p != "none" && p != "ddp")
    return invalidArgument("--precision " + config.precision + " is built for --parallel none and ddp only");
  if (p == "none") {
    if (commSizeOf(comm) != 1) return invalidArgument("--parallel none runs on one rank");
    return makeSerialTrainer(config);
  }
  if (p == "ddp") return makeDdpTrainer(config, comm);
  if (p == "zero1") return makeZeroTrainer(config, comm, 1);
  if (p == "zero2") return makeZeroTrainer(config, comm, 2);
  if (p == "zero3") return makeZeroTrainer(config, comm, 3);
  if (p == "tp") return makeTensorParallelTrainer(config, comm, nullptr);
  if (p == "dp-tp") return makeDpTp(config, comm);
  if (p == "dp-pp") return makeDpPp(config, comm);
  if (p == "ep") return makeExpertParallelTrainer(config, comm);
  if (p == "pp-gpipe") return makePipelineTrainer(config, comm, false);
  if (p == "pp-1f1b") return makePipelineTrainer(config, comm, true);
  return invalidArgument("unknown --parallel '" + p + "'");
}

int dataParallelSize(const TrainConfig& config, int nranks) {
  const std::string& p = config.parallel;
  if (p == "none" || p == "tp" || p == "pp-gpipe" || p == "pp-1f1b") return 1;
  if (p == "dp-tp") return nranks / std::max(1, config.tpSize);
  if (p == "dp-pp") return nranks / std::max(1, config.ppSize);
  return nranks;
}

int commSizeOf(ncclComm_t comm) {
  int n = 1;
  if (comm) ncclCommCount(comm, &n);
  return n;
}

}  // namespace plait::training
