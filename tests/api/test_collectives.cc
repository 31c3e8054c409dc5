// Data-movement collectives (Broadcast/Bcast, AllGather, AlltoAll, Gather,
// Scatter) against patterns built independently of the library: every type
// x count x placement x root, for rank counts {1,2,3,4,5,8} as threads.
// Each check also asserts that nothing is written past an output (guard
// bytes), that inputs are left as they were, and that buffers NCCL does not
// write (non-root outputs) keep their sentinel. Reductions (Reduce,
// ReduceScatter) are in test_coll_reduce.cc, forked ranks in
// test_coll_process.cc; CMakeLists.txt runs the tags as separate entries.
#include <catch2/catch.hpp>

#include "coll_checks.h"

using namespace plait_test;

namespace coll_data {

// Broadcast: variant 0 out of place, 1 ncclBroadcast in place, 2 ncclBcast.
Outcome checkBroadcast(ncclComm_t comm, const CaseInfo& c0, int variant) {
  CaseInfo c = c0;
  if (variant == 2) c.coll = "ncclBcast";
  const ncclDataType_t t = c.type;
  const bool isRoot = c.rank == c.root;
  const uint64_t rootSeed = seedOf(c.root, -1);
  Guarded send(c.count, t, c.sendShift()), recv(c.count, t, c.recvShift());
  // Non-roots' send buffers hold their own data: it must be ignored.
  fillPattern(send.data(), 0, c.count, t, seedOf(c.rank, -1));
  if (c.inPlace && isRoot) fillPattern(recv.data(), 0, c.count, t, rootSeed);
  ncclResult_t r;
  if (variant == 2)
    r = ncclBcast(recv.data(), c.count, t, c.root, comm, nullptr);
  else
    r = ncclBroadcast(c.inPlace ? recv.data() : send.data(), recv.data(), c.count, t, c.root, comm, nullptr);
  if (r != ncclSuccess) return failedCall(c, variant == 2 ? "ncclBcast" : "ncclBroadcast", comm);
  Checker chk(c);
  chk.pattern("recvbuff", recv.data(), 0, c.count, rootSeed);
  chk.guard("recvbuff", recv);
  if (!c.inPlace) chk.pattern("sendbuff (must not change)", send.data(), 0, c.count, seedOf(c.rank, -1));
  return {chk.error()};
}

// AllGather: rank r's sendcount elements land at r*count of every recvbuff;
// in place when sendbuff == recvbuff + rank*count.
Outcome checkAllGather(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const size_t n = static_cast<size_t>(c.nranks), w = sizeOf(t);
  Guarded send(c.count, t, c.sendShift()), recv(n * c.count, t, c.recvShift());
  fillPattern(send.data(), 0, c.count, t, seedOf(c.rank, -1));
  const void* in = send.data();
  if (c.inPlace) {
    fillPattern(recv.data(), c.rank * c.count, c.count, t, seedOf(c.rank, -1));
    in = recv.data() + c.rank * c.count * w;
  }
  if (ncclAllGather(in, recv.data(), c.count, t, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclAllGather", comm);
  Checker chk(c);
  for (int r = 0; r < c.nranks; ++r) chk.pattern("recvbuff", recv.data(), r * c.count, c.count, seedOf(r, -1));
  chk.guard("recvbuff", recv);
  if (!c.inPlace) chk.pattern("sendbuff (must not change)", send.data(), 0, c.count, seedOf(c.rank, -1));
  return {chk.error()};
}

// AlltoAll: block j of rank i's sendbuff goes to block i of rank j's
// recvbuff. In place too (variant 1): NCCL's header defines no in-place
// form; in Plait sendbuff == recvbuff works as MPI_IN_PLACE does in
// MPI_Alltoall (the point-to-point batch stages the sends a receive would
// overwrite; on the direct path pairs of ranks swap their blocks).
Outcome checkAlltoAll(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const size_t n = static_cast<size_t>(c.nranks);
  Guarded send(n * c.count, t, c.sendShift()), recv(n * c.count, t, c.recvShift());
  for (int j = 0; j < c.nranks; ++j) fillPattern(send.data(), j * c.count, c.count, t, seedOf(c.rank, j));
  if (c.inPlace)  // the input is the output buffer, filled as sendbuff is
    for (int j = 0; j < c.nranks; ++j) fillPattern(recv.data(), j * c.count, c.count, t, seedOf(c.rank, j));
  const void* in = c.inPlace ? static_cast<const void*>(recv.data()) : send.data();
#ifdef PLAIT_DEVICE_STAGING
  // On device buffers Plait refuses it, with data and more than one rank (the
  // kernel cannot stage the blocks it overwrites: core/device_path.cc).
  if (c.inPlace && c.nranks > 1 && c.count > 0) {
    const ncclResult_t r = ncclAlltoAll(in, recv.data(), c.count, t, comm, nullptr);
    if (r == ncclInvalidArgument) return {""};
    return {c.str() + ": an in-place ncclAlltoAll on device buffers returned " + ncclGetErrorString(r) +
            ", not ncclInvalidArgument"};
  }
#endif
  if (ncclAlltoAll(in, recv.data(), c.count, t, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclAlltoAll", comm);
  Checker chk(c);
  for (int i = 0; i < c.nranks; ++i) chk.pattern("recvbuff", recv.data(), i * c.count, c.count, seedOf(i, c.rank));
  chk.guard("recvbuff", recv);
  for (int j = 0; j < c.nranks; ++j)
    chk.pattern("sendbuff (must not change)", send.data(), j * c.count, c.count, seedOf(c.rank, j));
  return {chk.error()};
}

// Gather: only root's recvbuff is written, rank r's data at r*count. In
// place (every rank) when sendbuff == recvbuff + rank*count.
Outcome checkGather(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const size_t n = static_cast<size_t>(c.nranks), w = sizeOf(t);
  const uint64_t mine = seedOf(c.rank, -1);
  Guarded send(c.count, t, c.sendShift()), recv(n * c.count, t, c.recvShift());
  fillPattern(send.data(), 0, c.count, t, mine);
  const void* in = send.data();
  if (c.inPlace) {
    fillPattern(recv.data(), c.rank * c.count, c.count, t, mine);
    in = recv.data() + c.rank * c.count * w;
  }
  if (ncclGather(in, recv.data(), c.count, t, c.root, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclGather", comm);
  Checker chk(c);
  if (c.rank == c.root) {
    for (int r = 0; r < c.nranks; ++r) chk.pattern("root recvbuff", recv.data(), r * c.count, c.count, seedOf(r, -1));
  } else if (c.inPlace) {  // only this rank's own block holds data; the rest is untouched
    chk.untouched("non-root recvbuff", recv, 0, c.rank * c.count * w);
    chk.pattern("non-root recvbuff (own block)", recv.data(), c.rank * c.count, c.count, mine);
    chk.untouched("non-root recvbuff", recv, (c.rank + 1) * c.count * w, recv.bytes());
  } else {
    chk.untouched("non-root recvbuff", recv, 0, recv.bytes());
  }
  chk.guard("recvbuff", recv);
  if (!c.inPlace) chk.pattern("sendbuff (must not change)", send.data(), 0, c.count, mine);
  return {chk.error()};
}

// Scatter: block r of root's sendbuff goes to rank r's recvbuff. In place
// (every rank) when recvbuff == sendbuff + rank*count. Non-roots pass a
// sendbuff holding their own data: it must be neither read nor written.
Outcome checkScatter(ncclComm_t comm, const CaseInfo& c, int) {
  const ncclDataType_t t = c.type;
  const size_t n = static_cast<size_t>(c.nranks), w = sizeOf(t);
  Guarded send(n * c.count, t, c.sendShift()), recv(c.count, t, c.recvShift());
  for (int j = 0; j < c.nranks; ++j) fillPattern(send.data(), j * c.count, c.count, t, seedOf(c.rank, j));
  void* out = c.inPlace ? send.data() + c.rank * c.count * w : recv.data();
  if (ncclScatter(send.data(), out, c.count, t, c.root, comm, nullptr) != ncclSuccess)
    return failedCall(c, "ncclScatter", comm);
  Checker chk(c);
  chk.pattern("recvbuff", out, 0, c.count, seedOf(c.root, c.rank));
  for (int j = 0; j < c.nranks; ++j)
    if (!(c.inPlace && j == c.rank))
      chk.pattern("sendbuff (must not change)", send.data(), j * c.count, c.count, seedOf(c.rank, j));
  chk.guard(c.inPlace ? "sendbuff" : "recvbuff", c.inPlace ? send : recv);
  return {chk.error()};
}

}  // namespace coll_data

namespace {

using namespace coll_data;

SweepSpec spec(const char* coll, bool rooted, std::vector<int> variants = {0, 1}) {
  SweepSpec s;
  s.coll = coll;
  s.rooted = rooted;
  s.variants = std::move(variants);
  return s;
}

CheckFn checkFor(const std::string& coll) {
  return coll == "ncclBroadcast"   ? CheckFn(checkBroadcast)
         : coll == "ncclAllGather" ? CheckFn(checkAllGather)
         : coll == "ncclAlltoAll"  ? CheckFn(checkAlltoAll)
         : coll == "ncclGather"    ? CheckFn(checkGather)
                                   : CheckFn(checkScatter);
}

SweepSpec largeSpec(SweepSpec s) {
  s.types = quickSweep() ? std::vector<ncclDataType_t>{ncclInt8, ncclFloat32}
                         : std::vector<ncclDataType_t>{ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64};
  s.counts = {(size_t{1} << 20) + 7};
  return s;
}

}  // namespace

TEST_CASE("Broadcast and Bcast: every type, count, placement and root", "[broadcast]") {
  runSweep(spec("ncclBroadcast", true, {0, 1, 2}), checkBroadcast, kRanks);
}

TEST_CASE("AllGather: every type, count and placement", "[allgather]") {
  runSweep(spec("ncclAllGather", false), checkAllGather, kRanks);
}

TEST_CASE("AlltoAll: every type, count and placement", "[alltoall]") {
  runSweep(spec("ncclAlltoAll", false), checkAlltoAll, kRanks);
}

TEST_CASE("Gather: every type, count, placement and root; non-roots untouched", "[gather]") {
  runSweep(spec("ncclGather", true), checkGather, kRanks);
}

TEST_CASE("Scatter: every type, count, placement and root", "[scatter]") {
  runSweep(spec("ncclScatter", true), checkScatter, kRanks);
}

TEST_CASE("Data-movement collectives: 1M+7 elements", "[large][data]") {
  const std::vector<int>& ranks = kSmallRanks;
  SECTION("broadcast") { runSweep(largeSpec(spec("ncclBroadcast", true, {0, 2})), checkBroadcast, ranks); }
  SECTION("allgather") { runSweep(largeSpec(spec("ncclAllGather", false)), checkAllGather, ranks); }
  SECTION("alltoall") { runSweep(largeSpec(spec("ncclAlltoAll", false)), checkAlltoAll, ranks); }
  SECTION("gather") { runSweep(largeSpec(spec("ncclGather", true, {0})), checkGather, ranks); }
  SECTION("scatter") { runSweep(largeSpec(spec("ncclScatter", true, {1})), checkScatter, ranks); }
}

TEST_CASE("Data-movement collectives on buffers off 64-byte alignment", "[unaligned]") {
  const std::vector<int>& ranks = kSmallRanks;
  for (SweepSpec s : {spec("ncclBroadcast", true, {0, 1}), spec("ncclAllGather", false),
                      spec("ncclAlltoAll", false), spec("ncclGather", true), spec("ncclScatter", true)}) {
    s.misaligned = true;
    s.types = {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64};
    s.counts = {1, 7, 1023, 70001};
    runSweep(s, checkFor(s.coll), ranks);
  }
}

// AlltoAll, Gather and Scatter send blocks up to PLAIT_P2P_LINE_MAX_BYTES
// (by default 2048 at 2 ranks with a core each, else 1024) through the line
// FIFOs and larger ones through the point-to-point FIFOs: blocks on both
// sides of 1024 bytes, of 2048 and of 3072, the
// most a line message holds (CMakeLists.txt runs this again with the limit
// at 3072), in and out of place, int8 and float. AllGather blocks and
// Broadcast buffers up to 3072 bytes (512 at 2 ranks) may run one-shot
// through the line FIFOs (core/one_shot.cc), larger ones on the ring.
TEST_CASE("Data movement on both sides of the line-FIFO limits", "[lines]") {
  for (SweepSpec s : {spec("ncclAlltoAll", false), spec("ncclGather", true), spec("ncclScatter", true),
                      spec("ncclAllGather", false), spec("ncclBroadcast", true, {0, 1})}) {
    s.types = {ncclInt8};
    s.counts = {511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 3071, 3072, 3073};
    runSweep(s, checkFor(s.coll), kSmallRanks);
    s.types = {ncclFloat32};
    s.counts = {255, 256, 257, 511, 512, 513, 767, 768, 769};
    runSweep(s, checkFor(s.coll), kSmallRanks);
  }
}

// The checks themselves must be able to fail: a copy that lands one element
// off, a truncated copy and an overrun are all caught.
TEST_CASE("The pattern checks catch misplaced, missing and overrunning data", "[selftest]") {
  CaseInfo c;
  c.coll = "selftest";
  c.type = ncclFloat16;
  c.count = 100;
  Guarded buf(c.count + 1, c.type);
  fillPattern(buf.data(), 1, c.count, c.type, 42);  // one element off
  {
    Checker chk(c);
    chk.pattern("buf", buf.data(), 0, c.count, 42);
    CHECK_FALSE(chk.error().empty());
  }
  Guarded exact(c.count, c.type);
  fillPattern(exact.data(), 0, c.count - 1, c.type, 42);  // last element missing
  {
    Checker chk(c);
    chk.pattern("buf", exact.data(), 0, c.count, 42);
    CHECK_FALSE(chk.error().empty());
  }
  fillPattern(exact.data(), 0, c.count + 1, c.type, 42);  // one element too many
  {
    Checker chk(c);
    chk.pattern("buf", exact.data(), 0, c.count, 42);
    CHECK(chk.error().empty());
    chk.guard("buf", exact);
    CHECK_FALSE(chk.error().empty());
  }
  for (ncclDataType_t t : kAllTypes) {  // distinct seeds give distinct data
    CHECK(patternBits(t, seedOf(0, 1), 3) != patternBits(t, seedOf(1, 0), 3));
    CHECK(patternMismatch(exact.data(), 0, 8, t, seedOf(2, -1)) >= 0);
  }
}
