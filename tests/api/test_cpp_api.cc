// The C++ API (include/plait/comm.hpp) on 3 ranks as threads: every typed
// operation, groups and split, against values computed here.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "plait/comm.hpp"

namespace {

constexpr int kRanks = 3;
constexpr size_t kCount = 1000;

int32_t valueOf(int rank, size_t i) { return static_cast<int32_t>(rank * 1000 + i % 997); }

// Runs body(rank, comm) on kRanks threads; returns failures.
std::vector<std::string> onRanks(const std::function<std::string(int, plait::Comm&)>& body) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      auto comm = plait::Comm::create(id, kRanks, r);
      if (!comm.isOk()) {
        errors[r] = comm.status().toString();
        return;
      }
      errors[r] = body(r, *comm);
    });
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (int r = 0; r < kRanks; ++r)
    if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
  return failed;
}

#define EXPECT_OK(expr)                                     \
  do {                                                      \
    plait::Status s_ = (expr);                              \
    if (!s_.isOk()) return #expr ": " + s_.toString();      \
  } while (0)

std::string collectives(int rank, plait::Comm& comm) {
  if (comm.rank() != rank || comm.size() != kRanks) return "rank()/size() disagree with creation";
  std::vector<int32_t> in(kCount), out(kCount * kRanks);
  for (size_t i = 0; i < kCount; ++i) in[i] = valueOf(rank, i);

  EXPECT_OK(comm.allReduce(std::span<const int32_t>(in), std::span<int32_t>(out.data(), kCount)));
  for (size_t i = 0; i < kCount; ++i)
    if (out[i] != valueOf(0, i) + valueOf(1, i) + valueOf(2, i)) return "allReduce element " + std::to_string(i);

  EXPECT_OK(comm.allGather(std::span<const int32_t>(in), std::span<int32_t>(out)));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kCount; ++i)
      if (out[r * kCount + i] != valueOf(r, i)) return "allGather block " + std::to_string(r);

  std::vector<int32_t> blocks(kCount * kRanks), mine(kCount);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = valueOf(rank, i);
  EXPECT_OK(comm.reduceScatter(std::span<const int32_t>(blocks), std::span<int32_t>(mine), ncclMax));
  for (size_t i = 0; i < kCount; ++i)
    if (mine[i] != valueOf(kRanks - 1, rank * kCount + i)) return "reduceScatter element " + std::to_string(i);

  std::vector<int32_t> b = in;
  EXPECT_OK(comm.broadcast(std::span<int32_t>(b), 1));
  for (size_t i = 0; i < kCount; ++i)
    if (b[i] != valueOf(1, i)) return "broadcast element " + std::to_string(i);

  std::vector<int32_t> red(kCount, -7);
  EXPECT_OK(comm.reduce(std::span<const int32_t>(in), std::span<int32_t>(red), 2, ncclMin));
  for (size_t i = 0; i < kCount; ++i)
    if (red[i] != (rank == 2 ? valueOf(0, i) : -7)) return "reduce element " + std::to_string(i);

  EXPECT_OK(comm.allToAll(std::span<const int32_t>(blocks), std::span<int32_t>(out)));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kCount; ++i)
      if (out[r * kCount + i] != valueOf(r, rank * kCount + i)) return "allToAll block " + std::to_string(r);
  return "";
}

std::string ringExchange(int rank, plait::Comm& comm) {
  std::vector<int32_t> in(kCount), got(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = valueOf(rank, i);
  plait::Group group;  // receive first, then send: the group makes the order irrelevant
  EXPECT_OK(comm.recv(std::span<int32_t>(got), (rank + kRanks - 1) % kRanks));
  EXPECT_OK(comm.send(std::span<const int32_t>(in), (rank + 1) % kRanks));
  EXPECT_OK(group.end());
  for (size_t i = 0; i < kCount; ++i)
    if (got[i] != valueOf((rank + kRanks - 1) % kRanks, i)) return "ring exchange element " + std::to_string(i);
  return "";
}

std::string splitHalves(int rank, plait::Comm& comm) {
  // Ranks 0 and 2 form a communicator (keys reverse their order); 1 stays out.
  auto child = comm.split(rank == 1 ? -1 : 0, -rank);
  if (!child.isOk()) return child.status().toString();
  if (rank == 1) return child->valid() ? "NOCOLOR rank got a communicator" : "";
  if (child->size() != 2 || child->rank() != (rank == 2 ? 0 : 1)) return "split ranks are not ordered by key";
  int32_t v = rank;
  EXPECT_OK(child->allReduce(std::span<int32_t>(&v, 1)));
  return v == 2 ? "" : "split allReduce gave " + std::to_string(v);
}

}  // namespace

TEST_CASE("C++ API: typed collectives match the reference", "[cpp]") {
  for (auto& f : onRanks(collectives)) FAIL_CHECK(f);
}

TEST_CASE("C++ API: send/recv in a Group, in any order", "[cpp]") {
  for (auto& f : onRanks(ringExchange)) FAIL_CHECK(f);
}

TEST_CASE("C++ API: split by color and key", "[cpp]") {
  for (auto& f : onRanks(splitHalves)) FAIL_CHECK(f);
}

TEST_CASE("C++ API: size mismatches are refused before any call", "[cpp]") {
  auto failures = onRanks([](int, plait::Comm& comm) -> std::string {
    std::vector<int32_t> in(10), out(11);
    plait::Status s = comm.allReduce(std::span<const int32_t>(in), std::span<int32_t>(out));
    if (s.code() != plait::Code::kInvalidArgument) return "allReduce accepted 10 -> 11 elements";
    s = comm.allGather(std::span<const int32_t>(in), std::span<int32_t>(out));
    if (s.code() != plait::Code::kInvalidArgument) return "allGather accepted a short output";
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
}
