// tools/perf/alltoall_perf.cc — AlltoAll: block j of rank i's input ends as block i of rank j's output.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw * (n-1)/n with the size of the whole buffer.
double busFactor(int n) { return (n - 1.0) / n; }

CollSizes sizes(size_t count, int n, int) {
  size_t base = count / n;
  return {base * n, base * n, base, 0, 0};
}

ncclResult_t call(const CollCall& c) {
  return ncclAlltoAll(c.sendbuff, c.recvbuff, c.count, c.type, c.comm, nullptr);
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  size_t base = ctx.sizes.recvCount / ctx.nranks;
  for (int r = 0; r < ctx.nranks; ++r) out.push_back({base * r, base, &(*ctx.inputs)[r], base * ctx.rank});
}

constexpr CollSpec kSpec = {"AlltoAll", "ncclAlltoAll", false, false, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
