// One entry point for every strategy name, for the CLI and the tests.
#include "training/strategies.h"

namespace plait::training {

Result<std::unique_ptr<Trainer>> makeTrainer(const TrainConfig& config, ncclComm_t comm) {
  const std::string& p = config.parallel;
  if (p == "none") {
    if (commSizeOf(comm) != 1) return invalidArgument("--parallel none runs on one rank");
    return makeSerialTrainer(config);
  }
  if (p == "ddp") return makeDdpTrainer(config, comm);
  if (p == "zero1") return makeZeroTrainer(config, comm, 1);
  if (p == "zero2") return makeZeroTrainer(config, comm, 2);
  if (p == "zero3") return makeZeroTrainer(config, comm, 3);
  for (const char* later : {"tp", "pp-gpipe", "pp-1f1b", "ep", "dp-tp"})
    if (p == later) return Status(Code::kInvalidUsage, "--parallel " + p + " is not implemented yet");
  return invalidArgument("unknown --parallel '" + p + "'");
}

int dataParallelSize(const std::string& parallel, int nranks) {
  if (parallel == "none" || parallel == "tp" || parallel == "pp-gpipe" || parallel == "pp-1f1b") return 1;
  return nranks;
}

int commSizeOf(ncclComm_t comm) {
  int n = 1;
  if (comm) ncclCommCount(comm, &n);
  return n;
}

}  // namespace plait::training
