// Rooted and scattered reductions (Reduce, ReduceScatter) against the
// independent reference of values.h: every type x op x count x placement x
// root, for rank counts {1,2,3,4,5,8} as threads; PreMulSum with per-rank
// scalars. Non-root outputs of Reduce must keep their sentinel.
#include "coll_checks.h"

using namespace plait_test;

namespace coll_reduce {

// Elements [first, first+count) of buf must still hold rank's inputs.
void expectInputs(Checker& chk, const char* what, const void* buf, size_t first, size_t count, const CaseInfo& c,
                  size_t index0) {
  chk.inputs(what, buf, first, count, static_cast<ncclRedOp_t>(c.op), index0);
}

// Elements [0, count) of buf must hold the reduction of indices index0...
void expectReduced(Checker& chk, const char* what, const void* buf, size_t count, const CaseInfo& c, size_t index0) {
  chk.reduced(what, buf, count, static_cast<ncclRedOp_t>(c.op), index0);
}

// Reduce: only root's recvbuff is written; in place when sendbuff ==
// recvbuff (on every rank: non-roots' buffers then keep their inputs).
Outcome checkReduce(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const auto op = static_cast<ncclRedOp_t>(c.op);
  Guarded send(c.count, t, c.sendShift()), recv(c.count, t, c.recvShift());
  fillInputs(send.data(), 0, c.count, t, op, c.rank, 0);
  Guarded& out = c.inPlace ? send : recv;
  if (ncclReduce(send.data(), out.data(), c.count, t, op, c.root, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclReduce", comm);
  Checker chk(c);
  if (c.rank == c.root)
    expectReduced(chk, "root recvbuff", out.data(), c.count, c, 0);
  else if (c.inPlace)
    expectInputs(chk, "non-root buffer (must not change)", out.data(), 0, c.count, c, 0);
  else
    chk.untouched("non-root recvbuff", recv, 0, recv.bytes());
  chk.guard("recvbuff", out);
  if (!c.inPlace) expectInputs(chk, "sendbuff (must not change)", send.data(), 0, c.count, c, 0);
  return {chk.error()};
}

// ReduceScatter: sendbuff holds nranks blocks of recvcount; rank r gets the
// reduction of block r. In place when recvbuff == sendbuff + rank*recvcount.
Outcome checkReduceScatter(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const auto op = static_cast<ncclRedOp_t>(c.op);
  const size_t n = static_cast<size_t>(c.nranks), w = sizeOf(t);
  Guarded send(n * c.count, t, c.sendShift()), recv(c.count, t, c.recvShift());
  fillInputs(send.data(), 0, n * c.count, t, op, c.rank, 0);
  void* out = c.inPlace ? send.data() + c.rank * c.count * w : recv.data();
  if (ncclReduceScatter(send.data(), out, c.count, t, op, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclReduceScatter", comm);
  Checker chk(c);
  expectReduced(chk, "recvbuff", out, c.count, c, c.rank * c.count);
  chk.guard(c.inPlace ? "sendbuff" : "recvbuff", c.inPlace ? send : recv);
  if (!c.inPlace) expectInputs(chk, "sendbuff (must not change)", send.data(), 0, n * c.count, c, 0);
  return {chk.error()};
}

}  // namespace coll_reduce

namespace {

using namespace coll_reduce;

SweepSpec reductionSpec(const char* coll, bool rooted) {
  SweepSpec s;
  s.coll = coll;
  s.rooted = rooted;
  s.reduction = true;
  return s;
}

// A large sweep: a few (type, op) pairs on 1M+7 elements.
SweepSpec largeSpec(SweepSpec s, std::vector<ncclDataType_t> types, std::vector<ncclRedOp_t> ops) {
  s.types = std::move(types);
  s.ops = std::move(ops);
  s.counts = {(size_t{1} << 20) + 7};
  return s;
}

// Creates a PreMulSum op with this rank's scalar (0.5*(rank+1) for floating
// types, rank+1 for integers), runs fn(op), destroys the op.
std::string withPreMulSum(ncclComm_t comm, ncclDataType_t t, int rank,
                          const std::function<std::string(ncclRedOp_t)>& fn) {
  alignas(8) char scalar[8] = {};
  store(scalar, 0, t, isFloat(t) ? 0.5 * (rank + 1) : rank + 1);
  ncclRedOp_t op;
  if (ncclRedOpCreatePreMulSum(&op, scalar, t, ncclScalarHostImmediate, comm) != ncclSuccess)
    return std::string("ncclRedOpCreatePreMulSum: ") + ncclGetLastError(comm);
  std::string err = fn(op);
  if (ncclRedOpDestroy(op, comm) != ncclSuccess && err.empty())
    err = std::string("ncclRedOpDestroy: ") + ncclGetLastError(comm);
  return err;
}

// sum over r of scalar_r * x_r(i), with x_r the sum inputs of values.h.
double preMulSumExpected(ncclDataType_t t, int nranks, size_t i) {
  double acc = 0;
  for (int r = 0; r < nranks; ++r) acc += (isFloat(t) ? 0.5 * (r + 1) : r + 1) * inputValue(t, ncclSum, r, i);
  return isFloat(t) ? acc : wrapInt(acc, t);
}

Outcome checkPreMulSum(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, size_t count, int root) {
  const size_t n = static_cast<size_t>(nranks);
  CaseInfo c;
  c.coll = root >= 0 ? "ncclReduce(PreMulSum)" : "ncclReduceScatter(PreMulSum)";
  c.type = t;
  c.count = count;
  c.root = root;
  c.nranks = nranks;
  c.rank = rank;
  const size_t inCount = root >= 0 ? count : n * count;
  Guarded send(inCount, t, c.sendShift()), recv(count, t, c.recvShift());
  for (size_t i = 0; i < inCount; ++i) store(send.data(), i, t, inputValue(t, ncclSum, rank, i));
  Outcome out;
  std::string err = withPreMulSum(comm, t, rank, [&](ncclRedOp_t op) -> std::string {
    ncclResult_t r = root >= 0 ? ncclReduce(send.data(), recv.data(), count, t, op, root, comm, nullptr)
                               : ncclReduceScatter(send.data(), recv.data(), count, t, op, comm, nullptr);
    if (r != ncclSuccess) return callFailed(c, c.coll, comm);
    Checker chk(c);
    if (root < 0 || rank == root) {
      const size_t index0 = root >= 0 ? 0 : rank * count;
      for (size_t i = 0; i < count && chk.error().empty(); ++i)
        chk.value("recvbuff", i, load(recv.data(), i, t), preMulSumExpected(t, nranks, index0 + i), 0);
    } else {
      chk.untouched("non-root recvbuff", recv, 0, recv.bytes());
    }
    chk.guard("recvbuff", recv);
    out.error = chk.error();  // a wrong result: the sweep goes on
    return "";
  });
  if (!err.empty()) return {err, true};
  return out;
}

}  // namespace

TEST_CASE("Reduce: every type, op, count, placement and root; non-roots untouched", "[reduce]") {
  runSweep(reductionSpec("ncclReduce", true), checkReduce, kRanks);
}

TEST_CASE("ReduceScatter: every type, op, count and placement", "[reducescatter]") {
  runSweep(reductionSpec("ncclReduceScatter", false), checkReduceScatter, kRanks);
}

TEST_CASE("Reductions: 1M+7 elements", "[large][reductions]") {
  const std::vector<int>& ranks = kSmallRanks;
  const std::vector<ncclDataType_t> types = {ncclFloat32, ncclFloat16, ncclInt8};
  SECTION("reduce sum") {
    runSweep(largeSpec(reductionSpec("ncclReduce", true), types, {ncclSum}), checkReduce, ranks);
  }
  SECTION("reduce max bfloat16") {
    runSweep(largeSpec(reductionSpec("ncclReduce", true), {ncclBfloat16}, {ncclMax}), checkReduce, ranks);
  }
  SECTION("reducescatter sum") {
    runSweep(largeSpec(reductionSpec("ncclReduceScatter", false), types, {ncclSum}), checkReduceScatter, ranks);
  }
  SECTION("reducescatter avg float64") {
    runSweep(largeSpec(reductionSpec("ncclReduceScatter", false), {ncclFloat64}, {ncclAvg}), checkReduceScatter, ranks);
  }
}

TEST_CASE("Reductions on buffers off 64-byte alignment", "[unaligned]") {
  const std::vector<int>& ranks = kSmallRanks;
  for (bool rooted : {true, false}) {
    SweepSpec s = reductionSpec(rooted ? "ncclReduce" : "ncclReduceScatter", rooted);
    s.misaligned = true;
    s.types = {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64};
    s.ops = {ncclSum, ncclMax};
    s.counts = {1, 7, 1023, 70001};
    runSweep(s, rooted ? CheckFn(checkReduce) : CheckFn(checkReduceScatter), ranks);
  }
}

// Reduce buffers and ReduceScatter blocks up to 3072 bytes, the most a line
// message holds (512 at 2 ranks), may run one-shot (core/one_shot.cc),
// larger ones on the ring: both sides of the limits, in and out of place.
TEST_CASE("Reductions on both sides of the line-FIFO limit", "[lines]") {
  for (bool rooted : {true, false}) {
    SweepSpec s = reductionSpec(rooted ? "ncclReduce" : "ncclReduceScatter", rooted);
    s.types = {ncclInt8};
    s.ops = {ncclSum, ncclMin};
    s.counts = {511, 512, 513, 3071, 3072, 3073};
    runSweep(s, rooted ? CheckFn(checkReduce) : CheckFn(checkReduceScatter), kSmallRanks);
    s.types = {ncclFloat32};
    s.ops = {ncclSum, ncclAvg};
    s.counts = {767, 768, 769};
    runSweep(s, rooted ? CheckFn(checkReduce) : CheckFn(checkReduceScatter), kSmallRanks);
  }
}

TEST_CASE("PreMulSum with Reduce and ReduceScatter: each rank scales its input by its own scalar", "[premulsum]") {
  for (int nranks : {1, 2, 3, 5}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (ncclDataType_t t : {ncclFloat64, ncclFloat32, ncclFloat16, ncclBfloat16, ncclInt32, ncclUint8})
        for (size_t count : {size_t{1}, size_t{1023}, size_t{70001}})
          for (int root : {0, nranks - 1, -1})  // -1: ReduceScatter
            if (!fe.add(checkPreMulSum(rank, nranks, comm, t, count, root))) return fe.first;
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

// The reference must be able to fail: wrong sums and a rank's missing
// contribution differ from expectedValue, and PreMulSum's scalars matter.
TEST_CASE("The reduction reference is not the identity", "[selftest]") {
  for (ncclDataType_t t : kAllTypes)
    for (ncclRedOp_t op : kAllOps) {
      bool differs = false;  // leaving out the last rank changes some element
      for (size_t i = 0; i < 64 && !differs; ++i) differs = expectedValue(t, op, 3, i) != expectedValue(t, op, 2, i);
      CHECK(differs);
    }
  CHECK(preMulSumExpected(ncclFloat32, 3, 1) != expectedValue(ncclFloat32, ncclSum, 3, 1));
}
