// tools/perf/broadcast_perf.cc — Broadcast: every rank ends with the root's input.
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw: the root's buffer reaches every rank once.
double busFactor(int) { return 1.0; }

CollSizes sizes(size_t count, int, int) { return {count, count, count, 0, 0}; }

ncclResult_t call(const CollCall& c) {
  return ncclBroadcast(c.sendbuff, c.recvbuff, c.count, c.type, c.root, c.comm, nullptr);
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  out.push_back({0, ctx.sizes.recvCount, &(*ctx.inputs)[ctx.root], 0});
}

constexpr CollSpec kSpec = {"Broadcast", "ncclBroadcast", false, true, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
