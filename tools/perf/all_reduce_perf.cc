// tools/perf/all_reduce_perf.cc — AllReduce: every rank ends with the reduction of all inputs.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw * 2(n-1)/n: each rank sends and receives 2(n-1)/n of the buffer.
double busFactor(int n) { return 2.0 * (n - 1) / n; }

CollSizes sizes(size_t count, int, int) { return {count, count, count, 0, 0}; }

ncclResult_t call(const CollCall& c) {
  return ncclAllReduce(c.sendbuff, c.recvbuff, c.count, c.type, c.op, c.comm, nullptr);
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  out.push_back({0, ctx.sizes.recvCount, ctx.reduced, 0});
}

constexpr CollSpec kSpec = {"AllReduce", "ncclAllReduce", true, false, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
