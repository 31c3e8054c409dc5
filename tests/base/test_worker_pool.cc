// runConcurrently's pool (src/base/worker_pool.h): bodies run at the same time,
// on the caller and on workers kept from call to call, nested calls and a
// fork's child get working threads, a thread's pool ends with it, and each
// body's Status (or exception) comes back at its index.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/no_throw.h"
#include "base/tsan.h"

using namespace plait;

namespace {

// Every body arrives, then waits (up to 10 s) for all n: true only when the n
// bodies ran at the same time. A pool that ran them one after another fails
// here instead of hanging.
struct Rendezvous {
  explicit Rendezvous(size_t n) : n(n) {}
  size_t n;
  std::atomic<size_t> arrived{0};
  bool meet() {
    arrived.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < n)
      if (std::chrono::steady_clock::now() > until) return false;
      else std::this_thread::yield();
    return true;
  }
};

// The bodies' threads for one call of n, checking they all ran at once.
std::vector<std::thread::id> runAndRecord(size_t n) {
  Rendezvous r(n);
  std::vector<std::thread::id> ids(n);
  const std::vector<Status> results = runConcurrently(n, [&](size_t i) {
    ids[i] = std::this_thread::get_id();
    return r.meet() ? Status::ok() : Status(Code::kInternalError, "body " + std::to_string(i) + " ran alone");
  });
  REQUIRE(results.size() == n);
  for (size_t i = 0; i < n; ++i) CHECK(results[i].isOk());
  return ids;
}

size_t threadsInProcess() {
  size_t count = 0;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++count;
  closedir(d);
  return count;
}

}  // namespace

TEST_CASE("runConcurrently runs every body at once, body 0 on the caller", "[worker_pool]") {
  for (size_t n : {1, 2, 4, 7}) {
    const std::vector<std::thread::id> ids = runAndRecord(n);
    CHECK(ids[0] == std::this_thread::get_id());
    CHECK(std::set<std::thread::id>(ids.begin(), ids.end()).size() == n);
  }
  CHECK(runConcurrently(0, [](size_t) { return Status::ok(); }).empty());
}

TEST_CASE("runConcurrently keeps its workers from one call to the next", "[worker_pool]") {
  std::thread owner([] {
    const std::vector<std::thread::id> first = runAndRecord(4);
    for (int round = 0; round < 200; ++round) {
      const std::vector<std::thread::id> again = runAndRecord(4);
      REQUIRE(std::set<std::thread::id>(again.begin() + 1, again.end()) ==
              std::set<std::thread::id>(first.begin() + 1, first.end()));
    }
    // A larger call adds workers; a smaller one uses some of them.
    const std::vector<std::thread::id> more = runAndRecord(6);
    CHECK(std::set<std::thread::id>(more.begin() + 1, more.end()).count(first[1]) == 1);
    const std::vector<std::thread::id> fewer = runAndRecord(2);
    CHECK(fewer[1] == more[1]);
  });
  owner.join();
}

TEST_CASE("a thread's pool ends, and its workers are joined, when the thread exits", "[worker_pool]") {
  const size_t before = threadsInProcess();
  std::thread owner([] { runAndRecord(5); });
  owner.join();
  CHECK(threadsInProcess() == before);
}

TEST_CASE("each body's Status comes back at its index, an exception as an error", "[worker_pool]") {
  const std::vector<Status> results = runConcurrently(4, [](size_t i) -> Status {
    if (i == 1) return Status(Code::kInvalidArgument, "body one refused");
    if (i == 3) throw std::runtime_error("body three threw");
    return Status::ok();
  });
  REQUIRE(results.size() == 4);
  CHECK(results[0].isOk());
  CHECK(results[1].code() == Code::kInvalidArgument);
  CHECK(results[1].message().find("body one refused") != std::string::npos);
  CHECK(results[2].isOk());
  CHECK(results[3].code() == Code::kInternalError);
  CHECK(results[3].message().find("body three threw") != std::string::npos);
}

TEST_CASE("a body that calls runConcurrently while its caller's pool is busy", "[worker_pool]") {
  for (size_t outerBody : {0, 2}) {  // nested on the calling thread, and on a worker
    std::atomic<int> inner{0};
    const std::vector<Status> results = runConcurrently(3, [&](size_t i) {
      if (i != outerBody) return Status::ok();
      const std::vector<std::thread::id> ids = runAndRecord(3);
      inner = static_cast<int>(std::set<std::thread::id>(ids.begin(), ids.end()).size());
      return Status::ok();
    });
    for (const Status& s : results) CHECK(s.isOk());
    CHECK(inner.load() == 3);
  }
}

TEST_CASE("a fork's child starts a pool of its own", "[worker_pool]") {
#ifdef PLAIT_TSAN
  SKIP("ThreadSanitizer cannot start threads in the child of a threaded process");
#endif
  runAndRecord(3);  // the parent's pool has two workers, which the child will not have
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    bool ok = true;
    for (int round = 0; round < 3 && ok; ++round) {
      Rendezvous r(3);
      const std::vector<Status> results = runConcurrently(3, [&](size_t) {
        return r.meet() ? Status::ok() : Status(Code::kInternalError, "alone");
      });
      for (const Status& s : results) ok = ok && s.isOk();
    }
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done == 0) kill(child, SIGKILL), waitpid(child, &status, 0);
  REQUIRE(done == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
