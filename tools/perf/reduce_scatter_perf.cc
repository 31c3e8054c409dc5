// tools/perf/reduce_scatter_perf.cc — ReduceScatter: rank r ends with block r of the reduction.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw * (n-1)/n with the size of the whole input buffer.
double busFactor(int n) { return (n - 1.0) / n; }

// The in-place output is this rank's block of the input.
CollSizes sizes(size_t count, int n, int rank) {
  size_t base = count / n;
  return {base * n, base, base, 0, base * rank};
}

ncclResult_t call(const CollCall& c) {
  return ncclReduceScatter(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.comm, nullptr);
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  size_t base = ctx.sizes.recvCount;
  out.push_back({0, base, ctx.reduced, base * ctx.rank});
}

constexpr CollSpec kSpec = {"ReduceScatter", "ncclReduceScatter", true, false, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
