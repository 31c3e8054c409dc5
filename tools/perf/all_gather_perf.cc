// tools/perf/all_gather_perf.cc — AllGather: every rank ends with every rank's input, in rank order.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw * (n-1)/n with the size of the whole output buffer.
double busFactor(int n) { return (n - 1.0) / n; }

// The in-place input is this rank's slot of the output.
CollSizes sizes(size_t count, int n, int rank) {
  size_t base = count / n;
  return {base, base * n, base, base * rank, 0};
}

ncclResult_t call(const CollCall& c) {
  return ncclAllGather(c.sendbuff, c.recvbuff, c.count, c.type, c.comm, nullptr);
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  size_t base = ctx.sizes.sendCount;
  for (int r = 0; r < ctx.nranks; ++r) out.push_back({base * r, base, &(*ctx.inputs)[r], 0});
}

constexpr CollSpec kSpec = {"AllGather", "ncclAllGather", false, false, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
