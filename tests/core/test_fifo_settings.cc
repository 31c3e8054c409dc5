// FIFO settings (issue 11, item 5). Before the fix PLAIT_SHM_STEP_BYTES=-64
// was accepted (the size computation wrapped: AllReduce gave 3.0 for 2.0),
// 2^61 crashed every rank, and ranks with different FIFO shapes connected
// silently over shared memory (a 64 KiB AllReduce gave 0.0). Now the first
// two are init errors naming the variable, and differing shapes an error
// naming both ranks and their values.
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../resident.h"
#include "../scoped_env.h"
#include "base/config.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "transport/shm/shm_transport.h"

using namespace plait;

namespace {

// Creates a communicator of `nranks` threads; returns each rank's init status.
std::vector<Status> initAll(int nranks) {
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  std::vector<Status> result(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      Communicator comm(r, nranks);
      result[r] = comm.init(id.value(), CommOptions{});
    });
  for (auto& t : threads) t.join();
  return result;
}

using plait::test::ScopedEnv;

// Ranks as threads exchanging through shared memory.
class ThreadOob final : public OobExchange {
 public:
  struct Shared {
    explicit Shared(int n) : nranks(n), sync(n) {}
    int nranks;
    std::mutex mu;
    std::barrier<> sync;
    std::vector<char> data;
  };
  ThreadOob(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int nranks() const override { return s_.nranks; }
  Status allGather(void* data, size_t bytes, Deadline) override {
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      s_.data.resize(bytes * s_.nranks);
      std::memcpy(&s_.data[bytes * rank_], static_cast<char*>(data) + bytes * rank_, bytes);
    }
    s_.sync.arrive_and_wait();
    std::memcpy(data, s_.data.data(), bytes * s_.nranks);
    s_.sync.arrive_and_wait();
    return Status::ok();
  }
  Status barrier(Deadline) override {
    s_.sync.arrive_and_wait();
    return Status::ok();
  }

 private:
  Shared& s_;
  int rank_;
};

// Connects two thread ranks' shared-memory transports (one ring channel);
// `adjust` may change rank r's options first. Returns each rank's status and
// keeps the transports in *kept when given.
std::vector<Status> connectPair(const std::function<void(int, ShmTransportOptions&)>& adjust,
                                std::vector<std::unique_ptr<ShmTransport>>* kept = nullptr) {
  ThreadOob::Shared shared(2);
  std::vector<Status> result(2);
  if (kept != nullptr) kept->resize(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ShmTransportOptions o;
      o.nChannels = 1;
      o.ringPrev = o.ringNext = {1 - r};
      o.localRanks = {0, 1};
      o.waitTimeoutMs = 10000;
      adjust(r, o);
      ThreadOob oob(shared, r);
      auto t = ShmTransport::connect(oob, o, Deadline::afterMs(10000));
      result[r] = t.isOk() ? Status::ok() : t.status();
      if (t.isOk() && kept != nullptr) (*kept)[r] = std::move(t).value();
    });
  for (auto& t : threads) t.join();
  return result;
}

}  // namespace

TEST_CASE("out-of-range FIFO settings are init errors naming the variable", "[fifo]") {
  struct Case {
    const char* name;
    const char* value;
    const char* shown;
  };
  const Case c = GENERATE(Case{"PLAIT_SHM_STEP_BYTES", "-64", "PLAIT_SHM_STEP_BYTES=-64"},
                          Case{"PLAIT_SHM_STEP_BYTES", "2305843009213693952", "PLAIT_SHM_STEP_BYTES=2305843009213693952"},
                          Case{"PLAIT_SHM_STEP_BYTES", "100", "PLAIT_SHM_STEP_BYTES=100"},
                          Case{"PLAIT_SHM_P2P_STEP_BYTES", "-4096", "PLAIT_SHM_P2P_STEP_BYTES=-4096"},
                          Case{"PLAIT_SHM_MESH_STEP_BYTES", "2G", "PLAIT_SHM_MESH_STEP_BYTES=2147483648"},
                          Case{"PLAIT_SHM_STEPS", "4294967297", "PLAIT_SHM_STEPS=4294967297"},  // 1 after an int cast
                          Case{"PLAIT_SHM_P2P_STEPS", "0", "PLAIT_SHM_P2P_STEPS=0"});
  ScopedEnv env(c.name, c.value);
  for (const Status& s : initAll(2)) {
    INFO(s.toString());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(c.shown) && Catch::Contains("out of range"));
  }
}

TEST_CASE("valid FIFO settings still initialise", "[fifo]") {
  ScopedEnv env("PLAIT_SHM_STEP_BYTES", "64K");
  for (const Status& s : initAll(2)) {
    INFO(s.toString());
    CHECK(s.isOk());
  }
}

TEST_CASE("the shared-memory transport refuses FIFO shapes that differ between ranks", "[fifo]") {
  const int which = GENERATE(0, 1, 2);  // ring, mesh, point-to-point
  const std::vector<Status> result = connectPair([&](int r, ShmTransportOptions& o) {
    FifoShape* shape = which == 0 ? &o.ring : which == 1 ? &o.mesh : &o.p2p;
    if (r == 1) *shape = FifoShape{16, 64 << 10};  // as PLAIT_SHM_*STEPS=16, *STEP_BYTES=64K on one rank
  });
  const char* kind[] = {"ring 16 x 65536", "mesh 16 x 65536", "point-to-point 16 x 65536"};
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << result[r].toString());
    CHECK(result[r].code() == Code::kInvalidUsage);
    CHECK_THAT(result[r].message(), Catch::Contains("FIFO shapes (steps x bytes) differ: rank " +
                                                    std::to_string(1 - r)) &&
                                        Catch::Contains(kind[which]) && Catch::Contains("PLAIT_SHM_STEP_BYTES"));
  }
}

// Before, the segment was created with ftruncate only and mapped lazily: a
// /dev/shm too small for the job showed up as a SIGBUS mid-collective, and the
// first calls of a run paid a page fault on each new FIFO slot in both
// processes. Now every page of every rank's segment is allocated at init and
// mapped in its creator, and each sender maps the parts of its peer's segment
// it writes (not the whole: that would grow with the square of the local
// ranks); past the budget, nothing is mapped ahead, as before.
TEST_CASE("the shared-memory transport's segments are allocated and mapped at init", "[fifo]") {
  const bool withinBudget = GENERATE(true, false);
  std::vector<std::unique_ptr<ShmTransport>> transports;
  const std::vector<Status> result = connectPair(
      [&](int, ShmTransportOptions& o) {
        if (!withinBudget) o.reserveBudgetBytes = 0;
      },
      &transports);
  REQUIRE(result[0].isOk());
  REQUIRE(result[1].isOk());
  const ShmTransportOptions shapes;
  const auto segments = plait::test::mappings("/dev/shm/plait-");
  REQUIRE(segments.size() == 4);  // each rank's own segment and its peer's
  int whole = 0, sendSide = 0;
  for (const auto& m : segments) {
    INFO(m.path << ": " << m.rssBytes << " of " << m.sizeBytes << " bytes resident");
    CHECK(m.sizeBytes >= (1u << 20));
    if (!withinBudget) {
      CHECK(m.rssBytes < (64u << 10));  // the FIFOs' control words only
    } else if (m.rssBytes == m.sizeBytes) {
      ++whole;  // a creator's
    } else {
      // A sender's view of its peer: at least the ring and point-to-point
      // FIFOs it writes, and not the peer's own slots.
      CHECK(m.rssBytes >= shapes.ring.totalBytes() + shapes.p2p.totalBytes());
      ++sendSide;
    }
  }
  if (withinBudget) {
    CHECK(whole == 2);
    CHECK(sendSide == 2);
  }
}

// A /dev/shm with room for one rank's segment but not two (docker's default
// is 64 MiB): init fails on every rank, naming /dev/shm and the fix. Before,
// each rank's ftruncate succeeded, init too, and the first write to a page
// tmpfs could not supply was a SIGBUS. Root only: a private mount namespace
// with a 4 MiB tmpfs over /dev/shm, in a child process.
TEST_CASE("a /dev/shm too small for every rank's segment fails init naming it", "[fifo]") {
  if (geteuid() != 0) {
    WARN("skipped: needs root for a private /dev/shm");
    return;
  }
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    std::string report;
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=4m") != 0) {
      report = std::string("setup: ") + std::strerror(errno);
    } else {
      for (const Status& st : initAll(2)) report += st.toString() + "\n";
    }
    ssize_t n = write(fds[1], report.data(), report.size());
    _exit(n == static_cast<ssize_t>(report.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, n);
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO(report);
  REQUIRE(WIFEXITED(status));  // not a SIGBUS
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(report.find("Success") == std::string::npos);  // no rank initialised
  CHECK_THAT(report, Catch::Contains("not enough space in /dev/shm") && Catch::Contains("docker --shm-size"));
}
