// One rank of a multi-process AllReduce check, launched by plait-run,
// mpirun, torchrun or Slurm (plait::detectLaunch finds out which). Sweeps
// counts {0, 1, 7, 1023, 1M+7} x types x ops x {in-place, out-of-place}
// against the independent reference in tests/api/values.h; exits non-zero
// with a message on the first wrong element.
#include <cstdio>
#include <string>
#include <vector>

#include "api/values.h"
#include "plait/launch.hpp"

using namespace plait_test;

namespace {

int check(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count, bool inPlace) {
  const size_t bytes = count * sizeOf(t);
  std::vector<char> send(bytes + 1), recv(bytes + 1);
  // values.cc's loops: optimised in every build (the sanitizers' -O0 too).
  fillInputs(send.data(), 0, count, t, op, rank, 0);
  void* out = inPlace ? send.data() : recv.data();
  if (ncclAllReduce(send.data(), out, count, t, op, comm, nullptr) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclAllReduce failed: %s\n", rank, ncclGetLastError(comm));
    return 1;
  }
  const Mismatch bad = firstReducedMismatch(out, 0, count, t, op, nranks, 0);
  if (bad.index >= 0) {
    fprintf(stderr, "rank %d: type %d op %d count %zu %s: element %lld is %g, expected %g\n", rank, t, op, count,
            inPlace ? "in-place" : "out-of-place", bad.index, bad.got, bad.want);
    return 1;
  }
  return 0;
}

}  // namespace

int main() {
  auto launched = plait::initLaunchedComm(plait::Deadline::afterMs(60000));
  if (!launched.isOk()) {
    fprintf(stderr, "%s\n", launched.status().toString().c_str());
    return 2;
  }
  const plait::LaunchInfo* info = &launched->info;
  ncclComm_t comm = launched->comm;
  const ncclDataType_t types[] = {ncclInt8, ncclUint32, ncclInt64, ncclFloat16, ncclFloat32,
                                  ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  int failures = 0;
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1023), (size_t(1) << 20) + 7})
    for (ncclDataType_t t : types)
      for (ncclRedOp_t op : ops) {
        // The 1M+7 case: every type with sum, and float with every op.
        if (count > 1023 && op != ncclSum && t != ncclFloat32) continue;
        for (bool inPlace : {false, true}) failures += check(info->rank, info->nranks, comm, t, op, count, inPlace);
        if (failures) break;
      }
  ncclCommDestroy(comm);
  if (info->rank == 0 && failures == 0) printf("allreduce_rank: %d ranks (%s): all results correct\n", info->nranks,
                                               info->launcher.c_str());
  return failures ? 1 : 0;
}
