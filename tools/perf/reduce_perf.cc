// tools/perf/reduce_perf.cc — Reduce: the root ends with the reduction of all inputs.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw, as nccl-tests.
double busFactor(int) { return 1.0; }

CollSizes sizes(size_t count, int, int) { return {count, count, count, 0, 0}; }

ncclResult_t call(const CollCall& c) {
  return ncclReduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.root, c.comm, nullptr);
}

// Only the root's output is defined.
void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  if (ctx.rank == ctx.root) out.push_back({0, ctx.sizes.recvCount, ctx.reduced, 0});
}

constexpr CollSpec kSpec = {"Reduce", "ncclReduce", true, true, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
