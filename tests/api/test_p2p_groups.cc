// Point-to-point and group semantics through the public C API: send/recv
// between every pair, to self, of zero bytes and of 16 MiB+3; an all-to-all
// written as n sends and n receives in one group in several orders; message
// order per peer; collectives and p2p in one group; groups over two
// communicators; nested groups; ncclGroupSimulateEnd. Communicator split
// and forked ranks are in test_p2p_split.cc. Data is checked against
// patterns built independently of the library (coll_util.h).
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "coll_util.h"
#include "p2p_util.h"

using namespace plait_test;

namespace {

// Every ordered pair (s, d), s != d, in the same order on every rank: s
// sends, d receives, the others wait. Outside a group, so each call is its
// own operation.
Outcome pairwise(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, size_t count) {
  FirstError fe;
  for (int s = 0; s < nranks; ++s)
    for (int d = 0; d < nranks; ++d) {
      if (s == d || (rank != s && rank != d)) continue;
      CaseInfo c = p2pCase("pairwise send/recv", t, count, nranks, rank);
      c.root = s;
      if (rank == s) {
        Guarded send(count, t);
        fillPattern(send.data(), 0, count, t, seedOf(s, d));
        if (ncclSend(send.data(), count, t, d, comm, nullptr) != ncclSuccess) return failedCall(c, "ncclSend", comm);
        Checker chk(c);
        chk.pattern("sendbuff (must not change)", send.data(), 0, count, seedOf(s, d));
        fe.add({chk.error()});
      } else {
        Guarded recv(count, t);
        if (ncclRecv(recv.data(), count, t, s, comm, nullptr) != ncclSuccess) return failedCall(c, "ncclRecv", comm);
        Checker chk(c);
        chk.pattern("recvbuff", recv.data(), 0, count, seedOf(s, d));
        chk.guard("recvbuff", recv);
        fe.add({chk.error()});
      }
    }
  return {fe.first};
}

// Order in which one rank posts the 2n operations of a p2p all-to-all.
enum class Order { kRecvsFirst, kSendsFirst, kReversed, kInterleaved, kShuffled };

const char* orderName(Order o) {
  switch (o) {
    case Order::kRecvsFirst:
      return "recvs first";
    case Order::kSendsFirst:
      return "sends first";
    case Order::kReversed:
      return "reversed peers, recvs first";
    case Order::kInterleaved:
      return "send/recv interleaved";
    default:
      return "shuffled";
  }
}

std::vector<P2pOp> alltoallOps(int rank, int nranks, Guarded& send, Guarded& recv, ncclDataType_t t, size_t count,
                               Order order) {
  const size_t w = sizeOf(t);
  std::vector<P2pOp> sends, recvs, ops;
  for (int p = 0; p < nranks; ++p) {
    sends.push_back({true, p, send.data() + p * count * w, count});
    recvs.push_back({false, p, recv.data() + p * count * w, count});
  }
  if (order == Order::kReversed) {
    std::reverse(sends.begin(), sends.end());
    std::reverse(recvs.begin(), recvs.end());
  }
  if (order == Order::kSendsFirst) std::swap(sends, recvs);  // ops = "recvs" then "sends"
  if (order == Order::kInterleaved) {
    for (int p = 0; p < nranks; ++p) {
      ops.push_back(sends[p]);
      ops.push_back(recvs[(rank + p) % nranks]);
    }
    return ops;
  }
  ops = recvs;
  ops.insert(ops.end(), sends.begin(), sends.end());
  if (order == Order::kShuffled) {
    std::mt19937 rng(1234u + static_cast<unsigned>(rank) * 7919u);
    std::shuffle(ops.begin(), ops.end(), rng);
  }
  return ops;
}

// n sends and n receives (self included) in one group: block p of the send
// buffer goes to rank p, block s of the receive buffer comes from rank s.
Outcome groupAlltoall(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, size_t count, Order order) {
  const size_t n = static_cast<size_t>(nranks);
  CaseInfo c = p2pCase("p2p all-to-all", t, count, nranks, rank);
  const std::string label = c.str() + " (" + orderName(order) + ")";
  Guarded send(n * count, t), recv(n * count, t);
  for (int p = 0; p < nranks; ++p) fillPattern(send.data(), p * count, count, t, seedOf(rank, p));
  std::string err = postGroup(comm, t, alltoallOps(rank, nranks, send, recv, t, count, order));
  if (!err.empty()) return {label + ": " + err, true};
  Checker chk(c);
  for (int s = 0; s < nranks; ++s) chk.pattern("recvbuff", recv.data(), s * count, count, seedOf(s, rank));
  chk.guard("recvbuff", recv);
  for (int p = 0; p < nranks; ++p)
    chk.pattern("sendbuff (must not change)", send.data(), p * count, count, seedOf(rank, p));
  return {chk.error().empty() ? "" : chk.error() + " (" + orderName(order) + ")"};
}

// Ring exchange in one group: send to rank+1, receive from rank-1.
Outcome ringExchange(int rank, int nranks, ncclComm_t comm, ncclDataType_t t, size_t count) {
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  CaseInfo c = p2pCase("ring send/recv", t, count, nranks, rank);
  Guarded send(count, t), recv(count, t);
  fillPattern(send.data(), 0, count, t, seedOf(rank, next));
  std::string err = postGroup(comm, t, {{false, prev, recv.data(), count}, {true, next, send.data(), count}});
  if (!err.empty()) return {c.str() + ": " + err, true};
  Checker chk(c);
  chk.pattern("recvbuff", recv.data(), 0, count, seedOf(prev, rank));
  chk.guard("recvbuff", recv);
  return {chk.error()};
}

// Point-to-point moves bytes: the element size matters, not the type's
// arithmetic. Quick sweeps (tests/api/values.h) take the narrowest and the
// widest.
const std::vector<ncclDataType_t> kP2pTypes =
    quickSweep() ? std::vector<ncclDataType_t>{ncclInt8, ncclFloat64}
                 : std::vector<ncclDataType_t>{ncclInt8, ncclFloat16, ncclInt32, ncclFloat64, ncclFloat8e5m2};

}  // namespace

TEST_CASE("Send/Recv between every pair of ranks", "[p2p]") {
  for (int nranks : {2, 3, 4, 5, 8}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (ncclDataType_t t : kP2pTypes)
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{70001}})
          if (!fe.add(pairwise(rank, nranks, comm, t, count))) return fe.first;
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("Send/Recv to self inside a group, in either order", "[p2p][self]") {
  for (int nranks : {1, 2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (size_t count : {size_t{1}, size_t{4099}, size_t{70001}})
        for (bool recvFirst : {false, true}) {
          CaseInfo c = p2pCase(recvFirst ? "self recv+send" : "self send+recv", ncclFloat32, count, nranks, rank);
          Guarded send(count, ncclFloat32), recv(count, ncclFloat32);
          fillPattern(send.data(), 0, count, ncclFloat32, seedOf(rank, rank));
          std::vector<P2pOp> ops = {{true, rank, send.data(), count}, {false, rank, recv.data(), count}};
          if (recvFirst) std::swap(ops[0], ops[1]);
          std::string err = postGroup(comm, ncclFloat32, ops);
          if (!err.empty()) return c.str() + ": " + err;
          Checker chk(c);
          chk.pattern("recvbuff", recv.data(), 0, count, seedOf(rank, rank));
          chk.guard("recvbuff", recv);
          fe.add({chk.error()});
        }
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

// A Gather's or Scatter's root and an AlltoAll's rank copy their own block
// apart from the caller's sends to itself: in a group that sends to self
// before the collective and receives after it, the send still reaches the
// receive (self messages pair in call order) and the block its own place,
// out of place and in place. Blocks of 4099 floats go through the batch.
TEST_CASE("Sends to self around a grouped Gather, Scatter or AlltoAll reach their receives", "[p2p][self][group]") {
  const size_t count = 4099;
  for (const char* coll : {"ncclGather", "ncclScatter", "ncclAlltoAll"})
    for (bool inPlace : {false, true}) {
#ifdef PLAIT_DEVICE_STAGING
      if (inPlace && std::string(coll) == "ncclAlltoAll") continue;  // refused on device buffers (test_collectives.cc)
#endif
      INFO(coll << (inPlace ? " in place" : " out of place"));
      auto failures = runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
        const std::string name = coll;
        const int root = 1;
        const bool gather = name == "ncclGather", scatter = name == "ncclScatter";
        Guarded selfSend(count, ncclFloat32), selfRecv(count, ncclFloat32);
        Guarded in(3 * count, ncclFloat32), out(3 * count, ncclFloat32);
        fillPattern(selfSend.data(), 0, count, ncclFloat32, seedOf(rank, 99));
        // Rank r's block j of an input is seedOf(r, j); a Gather's input is one block, seedOf(r, -1).
        char* input = inPlace ? out.data() : in.data();
        if (gather)
          fillPattern(input, inPlace ? rank * count : 0, count, ncclFloat32, seedOf(rank, -1));
        else
          for (int j = 0; j < 3; ++j) fillPattern(input, j * count, count, ncclFloat32, seedOf(rank, j));
        const size_t w = sizeof(float);
        if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
        ncclResult_t r = ncclSend(selfSend.data(), count, ncclFloat32, rank, comm, nullptr);
        if (gather)
          r = r != ncclSuccess ? r
                               : ncclGather(inPlace ? out.data() + rank * count * w : in.data(), out.data(), count,
                                            ncclFloat32, root, comm, nullptr);
        else if (scatter)
          r = r != ncclSuccess ? r
                               : ncclScatter(input, inPlace ? out.data() + rank * count * w : out.data(), count,
                                             ncclFloat32, root, comm, nullptr);
        else
          r = r != ncclSuccess ? r : ncclAlltoAll(input, out.data(), count, ncclFloat32, comm, nullptr);
        if (r == ncclSuccess) r = ncclRecv(selfRecv.data(), count, ncclFloat32, rank, comm, nullptr);
        const ncclResult_t end = ncclGroupEnd();
        if (r != ncclSuccess || end != ncclSuccess) return std::string("the group failed: ") + ncclGetLastError(comm);
        CaseInfo c = p2pCase(coll, ncclFloat32, count, 3, rank);
        c.inPlace = inPlace;
        Checker chk(c);
        chk.pattern("receive from self", selfRecv.data(), 0, count, seedOf(rank, 99));
        if (gather && rank == root)
          for (int j = 0; j < 3; ++j) chk.pattern("root output", out.data(), j * count, count, seedOf(j, -1));
        if (scatter)
          chk.pattern("output", out.data(), inPlace ? rank * count : 0, count, seedOf(root, rank));
        if (!gather && !scatter)
          for (int j = 0; j < 3; ++j) chk.pattern("output", out.data(), j * count, count, seedOf(j, rank));
        return chk.error();
      });
      for (auto& f : failures) FAIL_CHECK(f);
    }
}

TEST_CASE("Zero-byte sends and receives complete and write nothing", "[p2p][zero]") {
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      CaseInfo c = p2pCase("zero-byte p2p", ncclInt32, 0, nranks, rank);
      Guarded recv(4, ncclInt32), send(4, ncclInt32);
      // Outside a group, between every pair, then a whole zero-byte all-to-all in a group.
      FirstError fe;
      if (!fe.add(pairwise(rank, nranks, comm, ncclInt32, 0))) return fe.first;
      std::vector<P2pOp> ops;
      for (int p = 0; p < nranks; ++p) {
        ops.push_back({false, p, recv.data(), 0});
        ops.push_back({true, p, send.data(), 0});
      }
      std::string err = postGroup(comm, ncclInt32, ops);
      if (!err.empty()) return c.str() + ": " + err;
      Checker chk(c);
      chk.untouched("recvbuff", recv, 0, recv.bytes());
      chk.guard("recvbuff", recv);
      fe.add({chk.error()});
      fe.add(ringExchange(rank, nranks, comm, ncclInt32, 1));  // the comm still works
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("Large messages: 16 MiB + 3 bytes", "[p2p][large]") {
  const size_t count = (size_t{16} << 20) + 3;
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      if (fe.add(pairwise(rank, nranks, comm, ncclUint8, count)))
        fe.add(ringExchange(rank, nranks, comm, ncclInt8, count));
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("All-to-all as n sends and n receives in one group, in any posting order", "[p2p][group][alltoall]") {
  for (int nranks : {2, 3, 4, 5, 8}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (Order order :
           {Order::kRecvsFirst, Order::kSendsFirst, Order::kReversed, Order::kInterleaved, Order::kShuffled})
        for (ncclDataType_t t : {ncclInt8, ncclFloat32, ncclFloat64})
          for (size_t count : {size_t{1}, size_t{4099}, size_t{70001}})
            if (!fe.add(groupAlltoall(rank, nranks, comm, t, count, order))) return fe.first;
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

namespace {

// One batch of messages to the same peer: how many, each one's size, and
// whether the sends are posted before the receives.
struct Batch {
  const char* name;
  int messages;
  size_t (*count)(int m);
  bool sendsFirst;
};

const Batch kBatches[] = {
    {"5 equal messages", 5, [](int) { return size_t{1000}; }, false},
    {"5 messages of growing size", 5, [](int m) { return size_t(1 + 997 * m); }, true},
    {"64 small messages", 64, [](int m) { return size_t(257 + m % 3); }, true},
    {"12 messages of 70001", 12, [](int) { return size_t{70001}; }, false},
};

// Sends every message of the batch to next and receives as many from prev,
// in one group; message m must land in receive buffer m.
Outcome sendBatch(int rank, int nranks, ncclComm_t comm, const Batch& b) {
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  std::vector<Guarded> sends, recvs;
  for (int m = 0; m < b.messages; ++m) {
    sends.emplace_back(b.count(m), ncclInt32);
    recvs.emplace_back(b.count(m), ncclInt32);
    fillPattern(sends[m].data(), 0, b.count(m), ncclInt32, seedOf(rank, 100 + m));
  }
  std::vector<P2pOp> recvOps, ops;
  for (int m = 0; m < b.messages; ++m) {
    recvOps.push_back({false, prev, recvs[m].data(), b.count(m)});
    ops.push_back({true, next, sends[m].data(), b.count(m)});
  }
  ops.insert(b.sendsFirst ? ops.end() : ops.begin(), recvOps.begin(), recvOps.end());
  CaseInfo c = p2pCase(b.name, ncclInt32, 0, nranks, rank);
  std::string err = postGroup(comm, ncclInt32, ops);
  if (!err.empty()) return {c.str() + ": " + err, true};
  Checker chk(c);
  for (int m = 0; m < b.messages; ++m) {
    chk.pattern(("message " + std::to_string(m)).c_str(), recvs[m].data(), 0, b.count(m), seedOf(prev, 100 + m));
    chk.guard("recvbuff", recvs[m]);
  }
  return {chk.error()};
}

}  // namespace

TEST_CASE("Several messages to the same peer in one group arrive in order", "[p2p][group][order]") {
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (const Batch& b : kBatches)
        if (!fe.add(sendBatch(rank, nranks, comm, b))) return fe.first;
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

namespace {

// AllReduce inputs/outputs from values.h (independent reference).
struct ReduceBuffers {
  Guarded buf;
  CaseInfo c;
  ReduceBuffers(ncclDataType_t t, ncclRedOp_t op, size_t count, int nranks, int rank) : buf(count, t) {
    c = p2pCase("ncclAllReduce (in a group)", t, count, nranks, rank);
    c.op = op;
    c.inPlace = true;
    fillInputs(buf.data(), 0, count, t, op, rank, 0);
  }
  ncclResult_t post(ncclComm_t comm) {
    return ncclAllReduce(buf.data(), buf.data(), c.count, c.type, static_cast<ncclRedOp_t>(c.op), comm, nullptr);
  }
  std::string check() {
    Checker chk(c);
    chk.reduced("buff", buf.data(), c.count, static_cast<ncclRedOp_t>(c.op), 0);
    chk.guard("buff", buf);
    return chk.error();
  }
};

// AllGather of pattern seedOf(rank, tag) into a guarded buffer.
struct GatherBuffers {
  Guarded send, recv;
  CaseInfo c;
  int tag;
  GatherBuffers(ncclDataType_t t, size_t count, int nranks, int rank, int tag_)
      : send(count, t), recv(count * nranks, t), tag(tag_) {
    c = p2pCase("ncclAllGather (in a group)", t, count, nranks, rank);
    fillPattern(send.data(), 0, count, t, seedOf(rank, tag));
  }
  ncclResult_t post(ncclComm_t comm) { return ncclAllGather(send.data(), recv.data(), c.count, c.type, comm, nullptr); }
  std::string check() {
    Checker chk(c);
    for (int r = 0; r < c.nranks; ++r) chk.pattern("recvbuff", recv.data(), r * c.count, c.count, seedOf(r, tag));
    chk.guard("recvbuff", recv);
    return chk.error();
  }
};

// A ring exchange's buffers: send to next, receive from prev (tag tells
// messages of different rings apart).
struct RingBuffers {
  Guarded send, recv;
  CaseInfo c;
  int next, prev, tag;
  RingBuffers(ncclDataType_t t, size_t count, int nranks, int rank, int tag_, int step = 1)
      : send(count, t), recv(count, t), tag(tag_) {
    c = p2pCase("ring send/recv (in a group)", t, count, nranks, rank);
    next = ((rank + step) % nranks + nranks) % nranks;
    prev = ((rank - step) % nranks + nranks) % nranks;
    fillPattern(send.data(), 0, count, t, seedOf(rank, tag));
  }
  std::vector<P2pOp> ops() { return {{true, next, send.data(), c.count}, {false, prev, recv.data(), c.count}}; }
  std::string check() {
    Checker chk(c);
    chk.pattern("recvbuff", recv.data(), 0, c.count, seedOf(prev, tag));
    chk.guard("recvbuff", recv);
    return chk.error();
  }
};

std::string firstError(std::initializer_list<std::string> errors) {
  for (const auto& e : errors)
    if (!e.empty()) return e;
  return "";
}

// One group holding AllReduce, AllGather and a ring exchange, posted with
// the p2p operations first or last.
Outcome mixedGroup(int rank, int nranks, ncclComm_t comm, bool p2pFirst) {
  ReduceBuffers ar(ncclFloat32, ncclSum, 4099, nranks, rank);
  GatherBuffers ag(ncclInt8, 1023, nranks, rank, 1);
  RingBuffers ring(ncclFloat64, 70001, nranks, rank, 2);
  if (ncclGroupStart() != ncclSuccess) return {"ncclGroupStart failed", true};
  std::string err = p2pFirst ? postOps(comm, ring.c.type, ring.ops()) : "";
  if (err.empty() && ar.post(comm) != ncclSuccess) err = callFailed(ar.c, "ncclAllReduce", comm);
  if (err.empty() && ag.post(comm) != ncclSuccess) err = callFailed(ag.c, "ncclAllGather", comm);
  if (err.empty() && !p2pFirst) err = postOps(comm, ring.c.type, ring.ops());
  if (ncclGroupEnd() != ncclSuccess && err.empty()) err = std::string("ncclGroupEnd: ") + ncclGetLastError(comm);
  if (!err.empty()) return {err, true};
  return {firstError({ar.check(), ag.check(), ring.check()})};
}

}  // namespace

TEST_CASE("A group mixing collectives and send/recv", "[group][mixed]") {
  for (int nranks : {1, 2, 3, 4, 5}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) {
      FirstError fe;
      if (fe.add(mixedGroup(rank, nranks, comm, false))) fe.add(mixedGroup(rank, nranks, comm, true));
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

namespace {

// Every collective once, plus a ring exchange, in one group: each has its
// own buffers and the checks run after ncclGroupEnd.
struct AllCollectives {
  int rank, nranks;
  size_t count;
  size_t n() const { return static_cast<size_t>(nranks); }
  Guarded bcast, redIn, redOut, rsIn, rsOut, a2aIn, a2aOut, gIn, gOut, sIn, sOut;
  ReduceBuffers ar;
  RingBuffers ring;
  AllCollectives(int rank_, int nranks_, size_t count_)
      : rank(rank_),
        nranks(nranks_),
        count(count_),
        bcast(count, ncclInt32),
        redIn(count, ncclInt32),
        redOut(count, ncclInt32),
        rsIn(count * n(), ncclInt32),
        rsOut(count, ncclInt32),
        a2aIn(count * n(), ncclInt32),
        a2aOut(count * n(), ncclInt32),
        gIn(count, ncclInt32),
        gOut(count * n(), ncclInt32),
        sIn(count * n(), ncclInt32),
        sOut(count, ncclInt32),
        ar(ncclFloat32, ncclMax, count, nranks_, rank_),
        ring(ncclInt32, count, nranks_, rank_, 10) {
    const ncclDataType_t t = ncclInt32;
    if (rank == bcastRoot()) fillPattern(bcast.data(), 0, count, t, seedOf(rank, 11));
    fillInputs(redIn.data(), 0, count, t, ncclSum, rank, 0);
    fillInputs(rsIn.data(), 0, n() * count, t, ncclMin, rank, 0);
    for (int p = 0; p < nranks; ++p) fillPattern(a2aIn.data(), p * count, count, t, seedOf(rank, 20 + p));
    fillPattern(gIn.data(), 0, count, t, seedOf(rank, 12));
    for (int p = 0; p < nranks; ++p) fillPattern(sIn.data(), p * count, count, t, seedOf(rank, 40 + p));
  }
  int bcastRoot() const { return nranks / 2; }
  int reduceRoot() const { return nranks - 1; }
  int gatherRoot() const { return 0; }
  int scatterRoot() const { return nranks - 1; }

  std::string post(ncclComm_t comm) {
    const ncclDataType_t t = ncclInt32;
    CaseInfo c = p2pCase("all collectives in one group", t, count, nranks, rank);
    if (ncclBcast(bcast.data(), count, t, bcastRoot(), comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclBcast", comm);
    if (ncclReduce(redIn.data(), redOut.data(), count, t, ncclSum, reduceRoot(), comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclReduce", comm);
    if (ncclReduceScatter(rsIn.data(), rsOut.data(), count, t, ncclMin, comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclReduceScatter", comm);
    std::string err = postOps(comm, t, ring.ops());
    if (!err.empty()) return c.str() + ": " + err;
    if (ncclAlltoAll(a2aIn.data(), a2aOut.data(), count, t, comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclAlltoAll", comm);
    if (ar.post(comm) != ncclSuccess) return callFailed(c, "ncclAllReduce", comm);
    if (ncclGather(gIn.data(), gOut.data(), count, t, gatherRoot(), comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclGather", comm);
    if (ncclScatter(sIn.data(), sOut.data(), count, t, scatterRoot(), comm, nullptr) != ncclSuccess)
      return callFailed(c, "ncclScatter", comm);
    return "";
  }

  std::string check() {
    const ncclDataType_t t = ncclInt32;
    CaseInfo c = p2pCase("all collectives in one group", t, count, nranks, rank);
    Checker chk(c);
    chk.pattern("Bcast buffer", bcast.data(), 0, count, seedOf(bcastRoot(), 11));
    if (rank == reduceRoot()) chk.reduced("Reduce recvbuff", redOut.data(), count, ncclSum, 0);
    if (rank != reduceRoot()) chk.untouched("non-root Reduce recvbuff", redOut, 0, redOut.bytes());
    chk.reduced("ReduceScatter recvbuff", rsOut.data(), count, ncclMin, rank * count);
    for (int p = 0; p < nranks; ++p)
      chk.pattern("AlltoAll recvbuff", a2aOut.data(), p * count, count, seedOf(p, 20 + rank));
    if (rank == gatherRoot())
      for (int p = 0; p < nranks; ++p) chk.pattern("Gather recvbuff", gOut.data(), p * count, count, seedOf(p, 12));
    else
      chk.untouched("non-root Gather recvbuff", gOut, 0, gOut.bytes());
    chk.pattern("Scatter recvbuff", sOut.data(), 0, count, seedOf(scatterRoot(), 40 + rank));
    for (const Guarded* g : {&bcast, &redOut, &rsOut, &a2aOut, &gOut, &sOut}) chk.guard("an output", *g);
    return firstError({chk.error(), ar.check(), ring.check()});
  }
};

}  // namespace

TEST_CASE("Every collective and a ring exchange in one group", "[group][allcoll]") {
  for (int nranks : {1, 2, 3, 5}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (size_t count : {size_t{1}, size_t{1023}, size_t{70001}}) {
        AllCollectives all(rank, nranks, count);
        if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
        std::string err = all.post(comm);
        if (ncclGroupEnd() != ncclSuccess && err.empty()) err = std::string("ncclGroupEnd: ") + ncclGetLastError(comm);
        if (!fe.add({err.empty() ? all.check() : err, !err.empty()})) return fe.first;
      }
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

namespace {

// A group of the point-to-point batch alone (no other collective runs while
// its senders wait), so that between processes Gather's 64-256 KiB blocks are
// written into the root by their senders (PLAIT_P2P_PUT_*), and with 3 ranks
// on this machine's 2 cores AlltoAll's too, among the ring's messages.
Outcome batchGroup(int rank, int nranks, ncclComm_t comm, size_t count, bool ringFirst) {
  const ncclDataType_t t = ncclInt32;
  const size_t n = static_cast<size_t>(nranks);
  Guarded gIn(count, t), gOut(count * n, t), a2aIn(count * n, t), a2aOut(count * n, t);
  RingBuffers ring(t, count, nranks, rank, 30);
  fillPattern(gIn.data(), 0, count, t, seedOf(rank, 31));
  for (int p = 0; p < nranks; ++p) fillPattern(a2aIn.data(), p * count, count, t, seedOf(rank, 40 + p));
  CaseInfo c = p2pCase("Gather, AlltoAll and a ring in one group", t, count, nranks, rank);
  if (ncclGroupStart() != ncclSuccess) return {"ncclGroupStart failed", true};
  std::string err = ringFirst ? postOps(comm, t, ring.ops()) : "";
  if (err.empty() && ncclGather(gIn.data(), gOut.data(), count, t, 0, comm, nullptr) != ncclSuccess)
    err = callFailed(c, "ncclGather", comm);
  if (err.empty() && ncclAlltoAll(a2aIn.data(), a2aOut.data(), count, t, comm, nullptr) != ncclSuccess)
    err = callFailed(c, "ncclAlltoAll", comm);
  if (err.empty() && !ringFirst) err = postOps(comm, t, ring.ops());
  if (ncclGroupEnd() != ncclSuccess && err.empty()) err = std::string("ncclGroupEnd: ") + ncclGetLastError(comm);
  if (!err.empty()) return {err, true};
  Checker chk(c);
  if (rank == 0)
    for (int p = 0; p < nranks; ++p) chk.pattern("Gather recvbuff", gOut.data(), p * count, count, seedOf(p, 31));
  else
    chk.untouched("non-root Gather recvbuff", gOut, 0, gOut.bytes());
  for (int p = 0; p < nranks; ++p)
    chk.pattern("AlltoAll recvbuff", a2aOut.data(), p * count, count, seedOf(p, 40 + rank));
  chk.guard("Gather recvbuff", gOut);
  chk.guard("AlltoAll recvbuff", a2aOut);
  return {firstError({chk.error(), ring.check()})};
}

}  // namespace

TEST_CASE("Gather, AlltoAll and a ring exchange in one group, ranks as forked processes",
          "[group][batch][process]") {
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runProcessesChecked(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (size_t count : {size_t{1023}, size_t{20000}, size_t{50000}})  // blocks of 4, 80 and 200 KB
        for (bool ringFirst : {false, true})
          if (!fe.add(batchGroup(rank, nranks, comm, count, ringFirst))) return fe.first;
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("One group spanning two communicators, driven from the same threads", "[group][multicomm]") {
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    auto failures = runThreadsMulti(nranks, 2, [&](int rank, const std::vector<ncclComm_t>& comms) -> std::string {
      ncclComm_t a = comms[0], b = comms[1];
      ReduceBuffers ar(ncclFloat64, ncclMax, 5000, nranks, rank);
      GatherBuffers ag(ncclUint8, 777, nranks, rank, 3);
      RingBuffers ringA(ncclInt32, 4099, nranks, rank, 4, 1);
      RingBuffers ringB(ncclInt32, 1001, nranks, rank, 5, -1);  // the other direction, on b
      if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
      std::string err;
      if (ar.post(a) != ncclSuccess) err = callFailed(ar.c, "ncclAllReduce on comm A", a);
      if (err.empty() && ag.post(b) != ncclSuccess) err = callFailed(ag.c, "ncclAllGather on comm B", b);
      if (err.empty()) err = postOps(a, ncclInt32, ringA.ops());
      if (err.empty()) err = postOps(b, ncclInt32, ringB.ops());
      if (ncclGroupEnd() != ncclSuccess && err.empty()) err = std::string("ncclGroupEnd: ") + ncclGetLastError(a);
      if (!err.empty()) return err;
      return firstError({ar.check(), ag.check(), ringA.check(), ringB.check()});
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("Nested groups launch only at the outermost ncclGroupEnd", "[group][nested]") {
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      RingBuffers ring(ncclInt32, 4099, nranks, rank, 6);
      ReduceBuffers ar(ncclInt64, ncclSum, 1023, nranks, rank);
      GatherBuffers ag(ncclFloat16, 7, nranks, rank, 7);
      std::string err;
      if (ncclGroupStart() != ncclSuccess || ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
      err = postOps(comm, ncclInt32, ring.ops());
      if (ncclGroupEnd() != ncclSuccess && err.empty())
        err = std::string("inner ncclGroupEnd: ") + ncclGetLastError(comm);
      Checker early(ring.c);
      early.untouched("recvbuff after the inner ncclGroupEnd (nothing may run yet)", ring.recv, 0, ring.recv.bytes());
      if (err.empty()) err = early.error();
      if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart (level 2 again) failed";
      if (err.empty() && ar.post(comm) != ncclSuccess) err = callFailed(ar.c, "ncclAllReduce", comm);
      if (ncclGroupEnd() != ncclSuccess && err.empty()) err = "second inner ncclGroupEnd failed";
      if (err.empty() && ag.post(comm) != ncclSuccess) err = callFailed(ag.c, "ncclAllGather", comm);
      if (ncclGroupEnd() != ncclSuccess && err.empty())
        err = std::string("outer ncclGroupEnd: ") + ncclGetLastError(comm);
      if (!err.empty()) return err;
      return firstError({ring.check(), ar.check(), ag.check()});
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("ncclGroupSimulateEnd estimates a positive time and runs nothing", "[group][simulate]") {
  const int nranks = 3;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    const size_t count = 1 << 20;
    ReduceBuffers ar(ncclFloat32, ncclSum, count, nranks, rank);
    GatherBuffers ag(ncclInt32, 4099, nranks, rank, 8);
    RingBuffers ring(ncclInt8, 70001, nranks, rank, 9);
    std::string wrong;
    for (bool withP2p : {false, true}) {
      if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
      std::string err;
      if (ar.post(comm) != ncclSuccess) err = callFailed(ar.c, "ncclAllReduce", comm);
      if (err.empty() && ag.post(comm) != ncclSuccess) err = callFailed(ag.c, "ncclAllGather", comm);
      if (err.empty() && withP2p) err = postOps(comm, ncclInt8, ring.ops());
      ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
      if (ncclGroupSimulateEnd(&sim) != ncclSuccess && err.empty())
        err = std::string("ncclGroupSimulateEnd: ") + ncclGetLastError(comm);
      if (!err.empty()) return err;
      if (!(sim.estimatedTime > 0) && wrong.empty()) wrong = "estimatedTime is " + std::to_string(sim.estimatedTime);
      Checker chk(ar.c);  // nothing ran: inputs intact, outputs untouched
      for (size_t i = 0; i < count && chk.error().empty(); ++i)
        chk.value("AllReduce buffer after simulation", i, load(ar.buf.data(), i, ncclFloat32),
                  inputValue(ncclFloat32, ncclSum, rank, i), 0);
      chk.untouched("AllGather recvbuff after simulation", ag.recv, 0, ag.recv.bytes());
      chk.untouched("Recv buffer after simulation", ring.recv, 0, ring.recv.bytes());
      if (!chk.error().empty() && wrong.empty()) wrong = chk.error() + (withP2p ? " (with p2p)" : "");
    }
    // The communicator still runs real work. Restore the inputs first, in
    // case the simulation ran the reduction after all.
    ReduceBuffers fresh(ncclFloat32, ncclSum, count, nranks, rank);
    if (fresh.post(comm) != ncclSuccess) return callFailed(fresh.c, "ncclAllReduce after simulation", comm);
    return wrong.empty() ? fresh.check() : wrong;
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

TEST_CASE("Send/Recv and group all-to-all with ranks as forked processes", "[p2p][process]") {
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    auto failures = runProcessesChecked(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      FirstError fe;
      for (ncclDataType_t t : {ncclInt8, ncclFloat32, ncclFloat64})
        for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{70001}}) {
          if (!fe.add(pairwise(rank, nranks, comm, t, count))) return fe.first;
          for (Order order : {Order::kRecvsFirst, Order::kShuffled})
            if (!fe.add(groupAlltoall(rank, nranks, comm, t, count, order))) return fe.first;
        }
      if (fe.add(ringExchange(rank, nranks, comm, ncclUint8, (size_t{16} << 20) + 3)))
        fe.add(mixedGroup(rank, nranks, comm, true));
      return fe.first;
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}
