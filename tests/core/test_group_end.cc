// group::end (src/core/group.cc) sorts a group's operations by communicator and
// runs each communicator's part at once, keeping its sorting storage from one
// group to the next: each communicator gets exactly its own operations in
// call order, whatever the groups before held (more communicators, fewer,
// other orders); a part's error comes back; a group ended inside a part
// (nested) runs on storage of its own and leaves the outer group intact.
// The communicators are stand-in pointers: End only hands them to `run`.
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/group.h"

using namespace plait;

namespace {

std::mutex gMu;
std::map<ncclComm_t, std::vector<size_t>> gSeen;  // per communicator: its tasks' counts, in run order

ncclComm_t fakeComm(int i) { return reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x1000 * (i + 1))); }

Status record(ncclComm_t comm, std::vector<Task>& tasks) {
  std::lock_guard<std::mutex> lock(gMu);
  for (const Task& t : tasks) gSeen[comm].push_back(t.count);
  return Status::ok();
}

Status failOnSecond(ncclComm_t comm, std::vector<Task>& tasks) {
  if (comm == fakeComm(1)) return invalidArgument("part of communicator 1 failed");
  return record(comm, tasks);
}

// Communicator 0's part opens and ends a group of its own (on the calling
// thread: part 0 runs there) before recording its operations.
Status nestOnFirst(ncclComm_t comm, std::vector<Task>& tasks) {
  if (comm == fakeComm(0)) {
    group::start();
    Task inner;
    inner.count = 999;
    group::enqueue(fakeComm(7), inner);
    group::enqueue(fakeComm(8), inner);
    if (Status s = group::end(&record); !s.isOk()) return s;
  }
  return record(comm, tasks);
}

// Runs one group: ops[i] = (communicator index, count), in call order.
Status runGroup(const std::vector<std::pair<int, size_t>>& ops, group::GroupRun run = &record) {
  {
    std::lock_guard<std::mutex> lock(gMu);
    gSeen.clear();
  }
  group::start();
  for (const auto& [c, count] : ops) {
    Task t;
    t.count = count;
    group::enqueue(fakeComm(c), t);
  }
  return group::end(run);
}

// What each communicator should have run: its counts in call order.
std::map<ncclComm_t, std::vector<size_t>> expected(const std::vector<std::pair<int, size_t>>& ops) {
  std::map<ncclComm_t, std::vector<size_t>> out;
  for (const auto& [c, count] : ops) out[fakeComm(c)].push_back(count);
  return out;
}

}  // namespace

TEST_CASE("End gives each communicator exactly its operations, group after group", "[group]") {
  const std::vector<std::vector<std::pair<int, size_t>>> groups = {
      {{0, 1}, {1, 2}, {2, 3}, {0, 4}, {2, 5}},  // three communicators
      {{1, 10}},                                  // fewer: one, not the first of before
      {{3, 20}, {0, 21}, {3, 22}, {1, 23}, {2, 24}},  // more, in another order
      {{2, 30}, {2, 31}},                         // one with two operations
      {{0, 40}, {1, 41}},
  };
  for (const auto& ops : groups) {
    REQUIRE(runGroup(ops).isOk());
    std::lock_guard<std::mutex> lock(gMu);
    CHECK(gSeen == expected(ops));
  }
}

TEST_CASE("End returns a part's error, and the next group runs normally", "[group]") {
  const Status s = runGroup({{0, 1}, {1, 2}, {2, 3}}, &failOnSecond);
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("part of communicator 1 failed") != std::string::npos);
  const std::vector<std::pair<int, size_t>> next = {{0, 5}, {1, 6}};
  REQUIRE(runGroup(next).isOk());
  std::lock_guard<std::mutex> lock(gMu);
  CHECK(gSeen == expected(next));
}

TEST_CASE("A group ended inside a part leaves the outer group's operations intact", "[group]") {
  const std::vector<std::pair<int, size_t>> ops = {{0, 1}, {1, 2}, {0, 3}, {2, 4}};
  REQUIRE(runGroup(ops, &nestOnFirst).isOk());
  auto want = expected(ops);
  want[fakeComm(7)] = {999};
  want[fakeComm(8)] = {999};
  std::lock_guard<std::mutex> lock(gMu);
  CHECK(gSeen == want);
}

TEST_CASE("End without a matching Start is refused", "[group]") {
  CHECK(group::end(&record).code() == Code::kInvalidUsage);
}
