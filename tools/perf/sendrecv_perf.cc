// tools/perf/sendrecv_perf.cc — SendRecv: each rank sends to rank+1 and receives from rank-1 (a ring shift).
// nccl-tests' flags and table over Plait; the harness is in common.h.
#include "common.h"

namespace {

using namespace plait::perf;

// busbw = algbw: every rank moves its buffer once.
double busFactor(int) { return 1.0; }

CollSizes sizes(size_t count, int, int) { return {count, count, count, 0, 0}; }

// One grouped send/recv pair; groups nest, so -g > 1 still works.
ncclResult_t call(const CollCall& c) {
  int next = (c.rank + 1) % c.nranks;
  int prev = (c.rank - 1 + c.nranks) % c.nranks;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t sent = ncclSend(c.sendbuff, c.count, c.type, next, c.comm, nullptr);
  ncclResult_t received = sent == ncclSuccess ? ncclRecv(c.recvbuff, c.count, c.type, prev, c.comm, nullptr) : sent;
  r = ncclGroupEnd();
  return received != ncclSuccess ? received : r;
}

void expect(const ExpectContext& ctx, std::vector<ExpectedSegment>& out) {
  int prev = (ctx.rank - 1 + ctx.nranks) % ctx.nranks;
  out.push_back({0, ctx.sizes.recvCount, &(*ctx.inputs)[prev], 0});
}

constexpr CollSpec kSpec = {"SendRecv", "ncclSend/ncclRecv", false, false, busFactor, sizes, call, expect};

}  // namespace

int main(int argc, char** argv) { return plait::perf::runPerfTool(kSpec, argc, argv); }
