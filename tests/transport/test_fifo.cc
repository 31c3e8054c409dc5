// The connector FIFO (transport/fifo.h) between threads and between forked
// processes: every byte and the order of every step, wrap-around (of the
// step ring and of the 32-bit futex word), back-pressure, deadlines, the
// abort flag, the other end's abort() and a dead peer process.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include "base/config.h"
#include "wait_test_util.h"
#include "base/shm.h"
#include "transport/fifo.h"

namespace plait {
namespace {

// ---- The payload of step `seq`: its size and every byte depend on seq. ----

size_t stepSize(uint64_t seq, size_t capacity) {
  static const size_t kFixed[] = {0, 1, 7, 8, 63, 64, 65, 1000};
  switch (seq % 4) {
    case 0: return std::min(kFixed[(seq / 4) % 8], capacity);
    case 1: return capacity;
    default: return static_cast<size_t>((seq * 2654435761u) % (capacity + 1));
  }
}

uint8_t patternByte(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + (i >> 8)); }

void fillStep(char* buf, uint64_t seq, size_t n) {
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>(patternByte(seq, i));
  if (n >= 8) std::memcpy(buf, &seq, 8);
}

bool stepIsRight(const char* buf, size_t n, uint64_t seq, size_t capacity) {
  if (n != stepSize(seq, capacity)) return false;
  if (n >= 8) {
    uint64_t got;
    std::memcpy(&got, buf, 8);
    if (got != seq) return false;
  }
  for (size_t i = n >= 8 ? 8 : 0; i < n; ++i)
    if (static_cast<uint8_t>(buf[i]) != patternByte(seq, i)) return false;
  return true;
}

Status sendSteps(FifoSender& sender, uint64_t first, uint64_t count) {
  size_t capacity = sender.shape().stepBytes;
  for (uint64_t seq = first; seq < first + count; ++seq) {
    PLAIT_ASSIGN_OR_RETURN(char* buf, sender.acquire());
    size_t n = stepSize(seq, capacity);
    fillStep(buf, seq, n);
    sender.post(n);
  }
  return Status::ok();
}

// Receives and checks `count` steps; the first wrong one is an InternalError.
Status receiveSteps(FifoReceiver& receiver, uint64_t first, uint64_t count) {
  size_t capacity = receiver.shape().stepBytes;
  for (uint64_t seq = first; seq < first + count; ++seq) {
    size_t n = 0;
    PLAIT_ASSIGN_OR_RETURN(const char* buf, receiver.acquire(&n));
    if (!stepIsRight(buf, n, seq, capacity))
      return internalError("step " + std::to_string(seq) + " (" + std::to_string(n) + " bytes) is wrong");
    receiver.release();
  }
  return Status::ok();
}

// A FIFO in a fresh shared segment with one wait context per end.
struct FifoFixture {
  explicit FifoFixture(FifoShape s) : shape(s) {
    auto created = SharedSegment::create(shape.totalBytes());
    REQUIRE(created.isOk());
    segment = std::move(created.value());
    sendCtx.deadline = recvCtx.deadline = Deadline::afterMs(120000);
    sendCtx.what = "fifo test send";
    recvCtx.what = "fifo test recv";
  }
  FifoSender sender() { return FifoSender(segment.data(), shape, &sendCtx); }
  FifoReceiver receiver() { return FifoReceiver(segment.data(), shape, &recvCtx); }

  FifoShape shape;
  SharedSegment segment;
  WaitContext sendCtx, recvCtx;
};

// Streams `steps` steps from a second thread to this one; returns both ends' results.
void streamBetweenThreads(FifoFixture& f, uint64_t steps) {
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  const uint64_t base = sender.stepIndex();  // non-zero when a test pre-set the counters
  Status sent;
  std::thread t([&] { sent = sendSteps(sender, 0, steps); });
  Status received = receiveSteps(receiver, 0, steps);
  if (!received.isOk()) sender.control()->receiverAborted = 1;  // let the sender stop
  t.join();
  INFO(received.toString());
  CHECK(received.isOk());
  INFO(sent.toString());
  CHECK(sent.isOk());
  CHECK(sender.stepIndex() == base + steps);
  CHECK(receiver.stepIndex() == base + steps);
  CHECK(receiver.pending() == 0);
  CHECK(sender.drained());
}

pid_t forkChild() {
  pid_t pid = fork();
  if (pid == 0) prctl(PR_SET_PDEATHSIG, SIGKILL);
  return pid;
}

}  // namespace

TEST_CASE("FifoShape sizes and validity", "[fifo]") {
  CHECK(FifoShape{8, 4096}.totalBytes() == 4096 + 8 * 4096);
  CHECK(FifoShape{3, 64}.totalBytes() == 8192);
  CHECK(FifoShape{1, 64}.valid());
  CHECK(FifoShape{64, 512 << 10}.valid());
  CHECK_FALSE(FifoShape{0, 64}.valid());
  CHECK_FALSE(FifoShape{65, 64}.valid());
  CHECK_FALSE(FifoShape{4, 100}.valid());
  CHECK(offsetof(FifoControl, head) == 64);  // tail and head on separate cache lines
}

TEST_CASE("100k steps between two threads arrive complete and in order", "[fifo][large]") {
  FifoFixture f({8, 4096});
  streamBetweenThreads(f, 100000);
}

TEST_CASE("streaming over a sweep of FIFO shapes", "[fifo][large]") {
  for (int nSteps : {1, 2, 3, 8, 16}) {
    for (size_t stepBytes : {size_t(64), size_t(4096), size_t(64) << 10}) {
      INFO("nSteps " << nSteps << ", stepBytes " << stepBytes);
      FifoFixture f({nSteps, stepBytes});
      streamBetweenThreads(f, stepBytes > 4096 ? 500 : 5000);
    }
  }
}

TEST_CASE("oversubscribed mode streams correctly without spinning", "[fifo]") {
  FifoFixture f({4, 1024});
  f.sendCtx.oversubscribed = f.recvCtx.oversubscribed = true;
  streamBetweenThreads(f, 20000);
}

TEST_CASE("four FIFO pairs at once, more threads than cores", "[fifo]") {
  constexpr int kPairs = 4;
  std::vector<std::unique_ptr<FifoFixture>> fifos;
  for (int i = 0; i < kPairs; ++i) {
    fifos.push_back(std::make_unique<FifoFixture>(FifoShape{4, 512}));
    fifos.back()->sendCtx.oversubscribed = fifos.back()->recvCtx.oversubscribed = hostOversubscribed(2 * kPairs);
  }
  std::vector<Status> results(2 * kPairs);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPairs; ++i) {
    threads.emplace_back([&, i] {
      FifoSender sender = fifos[i]->sender();
      results[2 * i] = sendSteps(sender, 0, 5000);
    });
    threads.emplace_back([&, i] {
      FifoReceiver receiver = fifos[i]->receiver();
      results[2 * i + 1] = receiveSteps(receiver, 0, 5000);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& r : results) {
    INFO(r.toString());
    CHECK(r.isOk());
  }
}

TEST_CASE("futex-only waiting streams correctly across the 32-bit futex word wrap", "[fifo]") {
  ScopedWaitTunables tunables("0", "0");
  FifoFixture f({4, 256});
  auto* ctrl = static_cast<FifoControl*>(f.segment.data());
  ctrl->tail = ctrl->head = 0xFFFFFFFFull - 2000;  // the low 32 bits wrap mid-stream
  auto start = Clock::now();
  // streamBetweenThreads numbers steps from 0 whatever the counters say.
  streamBetweenThreads(f, 5000);
  CHECK(ctrl->tail == 0xFFFFFFFFull - 2000 + 5000);
  CHECK(msSince(start) < 10000);  // a lost wake-up per step would cost 1 ms each
}

TEST_CASE("step buffers wrap around the ring", "[fifo]") {
  FifoFixture f({3, 128});
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  for (int i = 0; i < 10; ++i) {
    CHECK(sender.slot() == i % 3);
    auto buf = sender.acquire();
    REQUIRE(buf.isOk());
    CHECK(*buf == sender.stepBuffer(i % 3));
    CHECK(*buf == static_cast<char*>(f.segment.data()) + kFifoControlBytes + (i % 3) * 128);
    auto again = sender.acquire();  // idempotent before post()
    CHECK(*again == *buf);
    std::memset(*buf, i, 5);
    sender.post(5);
    CHECK(sender.stepIndex() == uint64_t(i + 1));
    size_t n = 0;
    auto got = receiver.acquire(&n);
    REQUIRE(got.isOk());
    CHECK(*got == receiver.stepBuffer(i % 3));
    CHECK(n == 5);
    CHECK((*got)[4] == i);
    receiver.release();
    CHECK(receiver.stepIndex() == uint64_t(i + 1));
  }
}

TEST_CASE("a sender faster than the receiver blocks until a step is released", "[fifo]") {
  FifoFixture f({4, 64});
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  REQUIRE(sendSteps(sender, 0, 4).isOk());
  CHECK(sender.tryAcquire() == nullptr);
  CHECK(sender.pending() == 4);
  CHECK(receiver.pending() == 4);

  std::atomic<bool> acquired{false};
  Result<char*> slot = Status(Code::kInternalError, "not run");
  std::thread t([&] {
    slot = sender.acquire();
    acquired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK_FALSE(acquired.load());
  REQUIRE(receiveSteps(receiver, 0, 1).isOk());
  t.join();
  REQUIRE(slot.isOk());
  CHECK(*slot == sender.stepBuffer(0));
  CHECK(sender.pending() == 3);
}

TEST_CASE("waits fail at the deadline with a message", "[fifo]") {
  FifoFixture f({2, 64});
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  SECTION("receiver on an empty FIFO") {
    f.recvCtx.deadline = Deadline::afterMs(100);
    auto start = Clock::now();
    size_t n;
    auto r = receiver.acquire(&n);
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kRemoteError);
    CHECK(r.status().message().find("timed out after") != std::string::npos);
    CHECK(r.status().message().find("fifo test recv") != std::string::npos);
    CHECK(msSince(start) >= 99);
    CHECK(receiver.tryAcquire(&n) == nullptr);
  }
  SECTION("sender on a full FIFO") {
    REQUIRE(sendSteps(sender, 0, 2).isOk());
    f.sendCtx.deadline = Deadline::afterMs(100);
    auto r = sender.acquire();
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().message().find("fifo test send") != std::string::npos);
  }
}

TEST_CASE("the abort flag set from another thread unblocks acquire within 50 ms", "[fifo]") {
  FifoFixture f({2, 64});
  std::atomic<uint32_t> abortFlag{0};
  f.recvCtx.abortFlag = &abortFlag;
  FifoReceiver receiver = f.receiver();
  Clock::time_point set;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    set = Clock::now();
    abortFlag.store(1);
  });
  size_t n;
  auto r = receiver.acquire(&n);
  auto returned = Clock::now();
  t.join();
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kRemoteError);
  CHECK(r.status().message() == "aborted during fifo test recv");
  CHECK(std::chrono::duration<double, std::milli>(returned - set).count() < 50);
}

TEST_CASE("one end's abort() fails the other end's wait", "[fifo]") {
  FifoFixture f({2, 64});
  f.sendCtx.peerRank = 1;
  f.recvCtx.peerRank = 0;
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  SECTION("the sender aborts") {
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      sender.abort();
    });
    size_t n;
    auto start = Clock::now();
    auto r = receiver.acquire(&n);
    t.join();
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().code() == Code::kRemoteError);
    CHECK(r.status().message() == "rank 0 aborted during fifo test recv");
    CHECK(msSince(start) < 500);
    CHECK(sender.aborted());
    CHECK(receiver.peerAborted());
    CHECK_FALSE(receiver.aborted());
    CHECK(receiver.acquire(&n).status().code() == Code::kRemoteError);
    REQUIRE(sendSteps(sender, 0, 2).isOk());  // free steps are still handed out...
    auto r2 = sender.acquire();                // ...but every wait fails
    REQUIRE_FALSE(r2.isOk());
    CHECK(r2.status().message() == "aborted during fifo test send");
  }
  SECTION("the receiver aborts") {
    REQUIRE(sendSteps(sender, 0, 2).isOk());
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      receiver.abort();
    });
    auto r = sender.acquire();
    t.join();
    REQUIRE_FALSE(r.isOk());
    CHECK(r.status().message() == "rank 1 aborted during fifo test send");
  }
}

TEST_CASE("abort() from another thread unblocks this end's own wait (ncclCommAbort)", "[fifo]") {
  FifoFixture f({2, 64});
  f.sendCtx.peerRank = 1;
  FifoSender sender = f.sender();
  FifoReceiver receiver = f.receiver();
  Clock::time_point called;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    called = Clock::now();
    receiver.abort();  // while the main thread waits in receiver.acquire()
  });
  size_t n;
  auto r = receiver.acquire(&n);
  auto returned = Clock::now();
  t.join();
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().message() == "aborted during fifo test recv");
  CHECK(std::chrono::duration<double, std::milli>(returned - called).count() < 50);
  REQUIRE(sendSteps(sender, 0, 2).isOk());
  auto s = sender.acquire();
  REQUIRE_FALSE(s.isOk());
  CHECK(s.status().message() == "rank 1 aborted during fifo test send");
}

TEST_CASE("100k steps between two forked processes arrive complete and in order", "[fifo][process]") {
  FifoShape shape{8, 4096};
  auto created = SharedSegment::create(shape.totalBytes());
  REQUIRE(created.isOk());
  SharedSegment segment = std::move(created.value());
  int mapped[2];
  REQUIRE(pipe(mapped) == 0);
  const uint64_t kSteps = 100000;
  pid_t child = forkChild();
  REQUIRE(child >= 0);
  if (child == 0) {  // the sender: maps the receiver's segment by name, like a peer process
    auto peer = SharedSegment::open(segment.name(), shape.totalBytes());
    if (!peer.isOk()) _exit(10);
    char one = 1;
    if (write(mapped[1], &one, 1) != 1) _exit(11);
    WaitContext ctx;
    ctx.deadline = Deadline::afterMs(120000);
    ctx.peerPid = getppid();
    ctx.peerRank = 0;
    ctx.what = "fifo test send";
    FifoSender sender(peer->data(), shape, &ctx);
    _exit(sendSteps(sender, 0, kSteps).isOk() ? 0 : 12);
  }
  char one = 0;
  REQUIRE(read(mapped[0], &one, 1) == 1);
  REQUIRE(segment.unlink().isOk());  // the peer has mapped it: nothing can leak from here on
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(120000);
  ctx.peerPid = child;
  ctx.peerRank = 1;
  ctx.what = "fifo test recv";
  FifoReceiver receiver(segment.data(), shape, &ctx);
  Status received = receiveSteps(receiver, 0, kSteps);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO(received.toString());
  CHECK(received.isOk());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  close(mapped[0]);
  close(mapped[1]);
}

TEST_CASE("a forked peer that exits fails the survivor's wait with kRemoteError naming it", "[fifo][process]") {
  FifoShape shape{4, 256};
  auto created = SharedSegment::create(shape.totalBytes());
  REQUIRE(created.isOk());
  void* memory = created->data();
  bool childSends = GENERATE(true, false);
  pid_t child = forkChild();
  REQUIRE(child >= 0);
  if (child == 0) {  // posts (or consumes) 3 steps, then dies without a word
    WaitContext ctx;
    ctx.deadline = Deadline::afterMs(10000);
    if (childSends) {
      FifoSender sender(memory, shape, &ctx);
      _exit(sendSteps(sender, 0, 3).isOk() ? 0 : 1);
    }
    FifoReceiver receiver(memory, shape, &ctx);
    _exit(receiveSteps(receiver, 0, 3).isOk() ? 0 : 1);
  }
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(10000);
  ctx.peerPid = child;
  ctx.peerRank = 1;
  ctx.what = childSends ? "allreduce recv from rank 1" : "allreduce send to rank 1";
  Status survivor;
  auto start = Clock::now();
  if (childSends) {
    FifoReceiver receiver(memory, shape, &ctx);
    survivor = receiveSteps(receiver, 0, 4);
  } else {
    FifoSender sender(memory, shape, &ctx);
    survivor = sendSteps(sender, 0, 3 + 4 + 1);  // 3 consumed, 4 fill the ring, the 8th waits forever
  }
  double ms = msSince(start);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE_FALSE(survivor.isOk());
  CHECK(survivor.code() == Code::kRemoteError);
  CHECK(survivor.message() == "rank 1 (pid " + std::to_string(child) + ") died during " + ctx.what);
  CHECK(ms < 1500);
}

}  // namespace plait
