// runConcurrently's pool (src/base/worker_pool.h): bodies run at the same time,
// on the caller and on workers kept from call to call; nested calls, calls
// from a thread-local's destructor and a fork's child get working threads; a
// thread's pool ends with it; and each body's Status (or exception) comes back
// at its index.
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

// One call of n bodies: their threads, and whether every body returned ok
// having met the others. No Catch2 macros: it also runs off the main thread.
struct Call {
  std::vector<std::thread::id> ids;
  bool ok = false;
};
Call runAndRecord(size_t n) {
  Rendezvous r(n);
  Call call;
  call.ids.resize(n);
  const std::vector<Status> results = runConcurrently(n, [&](size_t i) {
    call.ids[i] = std::this_thread::get_id();
    return r.meet() ? Status::ok() : Status(Code::kInternalError, "body " + std::to_string(i) + " ran alone");
  });
  call.ok = results.size() == n;
  for (const Status& s : results) call.ok = call.ok && s.isOk();
  return call;
}

std::set<std::thread::id> workersOf(const Call& c) { return {c.ids.begin() + 1, c.ids.end()}; }

size_t threadsInProcess() {
  size_t count = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++count;
  closedir(d);
  return count;
}

// A thread that pthread_join returned for may still be listed for a moment.
bool threadsFallTo(size_t want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (threadsInProcess() > want)
    if (std::chrono::steady_clock::now() > until) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return threadsInProcess() == want;
}

}  // namespace

TEST_CASE("runConcurrently runs every body at once, body 0 on the caller", "[worker_pool]") {
  for (size_t n : {1, 2, 4, 7}) {
    const Call c = runAndRecord(n);
    CHECK(c.ok);
    CHECK(c.ids[0] == std::this_thread::get_id());
    CHECK(std::set<std::thread::id>(c.ids.begin(), c.ids.end()).size() == n);
  }
  CHECK(runConcurrently(0, [](size_t) { return Status::ok(); }).empty());
}

TEST_CASE("runConcurrently keeps its workers from one call to the next", "[worker_pool]") {
  // On a thread of its own, whose pool starts empty; checked after it ended.
  Call first, more, fewer;
  int sameWorkers = 0, rounds = 200;
  bool allOk = true;
  std::thread owner([&] {
    first = runAndRecord(4);
    for (int round = 0; round < rounds; ++round) {
      const Call again = runAndRecord(4);
      allOk = allOk && again.ok;
      sameWorkers += workersOf(again) == workersOf(first) ? 1 : 0;
    }
    more = runAndRecord(6);   // a larger call adds workers
    fewer = runAndRecord(2);  // a smaller one uses the first of them
  });
  owner.join();
  CHECK(first.ok);
  CHECK(allOk);
  CHECK(sameWorkers == rounds);
  CHECK(more.ok);
  CHECK(fewer.ok);
  CHECK(workersOf(more).size() == 5);
  CHECK(workersOf(more).count(first.ids[1]) == 1);
  CHECK(fewer.ids[1] == more.ids[1]);
}

TEST_CASE("a thread's pool ends, and its workers are joined, when the thread exits", "[worker_pool]") {
  const size_t before = threadsInProcess();
  REQUIRE(before > 0);
  bool ok = false;
  std::thread owner([&] { ok = runAndRecord(5).ok; });
  owner.join();
  CHECK(ok);
  CHECK(threadsFallTo(before));
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
    Call inner;
    const std::vector<Status> results = runConcurrently(3, [&](size_t i) {
      if (i == outerBody) inner = runAndRecord(3);
      return Status::ok();
    });
    for (const Status& s : results) CHECK(s.isOk());
    CHECK(inner.ok);
    CHECK(std::set<std::thread::id>(inner.ids.begin(), inner.ids.end()).size() == 3);
  }
}

// A thread-local destroyed after the pool's (constructed before it) runs
// bodies at its thread's exit: they get threads of their own.
struct GroupAtExit {
  bool* ok = nullptr;
  ~GroupAtExit() {
    if (ok != nullptr) *ok = runAndRecord(3).ok;
  }
};

TEST_CASE("bodies run from a thread-local's destructor after the thread's pool is gone", "[worker_pool]") {
  bool ok = false;
  std::thread owner([&] {
    thread_local GroupAtExit atExit;  // constructed first: destroyed after the pool
    atExit.ok = &ok;
    (void)runAndRecord(2);  // the pool is made now, after atExit
  });
  owner.join();
  CHECK(ok);
}

// Forks from a process with threads: labelled forks (tests/base/CMakeLists.txt),
// so not under the sanitizers.
TEST_CASE("a fork's child starts a pool of its own", "[worker_pool][fork]") {
  REQUIRE(runAndRecord(3).ok);  // the parent's pool has two workers, which the child will not have
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    bool ok = true;
    for (int round = 0; round < 3 && ok; ++round) ok = runAndRecord(3).ok;
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
