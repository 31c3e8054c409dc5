// The line FIFO (transport/line_fifo.h) between two threads: every message
// size up to kLineMaxMessageBytes arrives intact and in order across the
// wrap of the line ring; the non-blocking forms (trySend, hasRoom, ready)
// never post or consume what they should not; a sleeping receiver is woken
// by one doorbell ring per message, not one per line; abort from either end
// ends the other's wait with the right error.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/shm.h"
#include "transport/line_fifo.h"
#include "wait_test_util.h"

namespace plait {
namespace {

uint8_t byteOf(uint64_t msg, size_t i) { return static_cast<uint8_t>(msg * 131 + i * 7 + (i >> 6)); }

std::vector<unsigned char> messageBytes(uint64_t msg, size_t bytes) {
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = byteOf(msg, i);
  return v;
}

// Sizes cycle through the edges of a line and of the largest message.
size_t sizeOf(uint64_t msg) {
  static const size_t kSizes[] = {0, 1, 47, 48, 49, 95, 96, 97, 1000, 1024, kLineMaxMessageBytes - 1,
                                  kLineMaxMessageBytes};
  return kSizes[msg % (sizeof(kSizes) / sizeof(kSizes[0]))];
}

SharedSegment zeroedSegment() {
  auto created = SharedSegment::create(sizeof(LineFifoMemory));
  REQUIRE(created.isOk());
  return std::move(created.value());
}

WaitContext contextFor(const char* what) {
  WaitContext ctx;
  ctx.deadline = Deadline::afterMs(60000);
  ctx.what = what;
  return ctx;
}

// A line FIFO in a fresh (zeroed) shared segment, one wait context per end.
struct LineFixture {
  LineFifoMemory* memory() { return static_cast<LineFifoMemory*>(segment.data()); }

  SharedSegment segment = zeroedSegment();
  WaitContext sendCtx = contextFor("line test send"), recvCtx = contextFor("line test receive");
  LineSender sender{segment.data(), &sendCtx};
  LineReceiver receiver{segment.data(), &recvCtx};
};

// Waits (up to 10 s) until the receiver sleeps on the doorbell.
bool receiverSleeps(LineFifoMemory* m) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (m->recvSleepers.load() == 0)
    if (Clock::now() > until) return false;
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  return true;
}

}  // namespace

TEST_CASE("line FIFO: 5000 messages of every edge size arrive intact and in order", "[line]") {
  LineFixture f;
  constexpr uint64_t kMessages = 5000;
  Status sent;
  std::thread t([&] {
    for (uint64_t msg = 0; msg < kMessages && sent.isOk(); ++msg) sent = f.sender.send(messageBytes(msg, sizeOf(msg)).data(), sizeOf(msg));
  });
  std::string wrong;
  std::vector<unsigned char> got(kLineMaxMessageBytes);
  for (uint64_t msg = 0; msg < kMessages && wrong.empty(); ++msg) {
    Status s = f.receiver.recv(got.data(), sizeOf(msg));
    if (!s.isOk()) wrong = s.toString();
    else if (!std::equal(got.begin(), got.begin() + sizeOf(msg), messageBytes(msg, sizeOf(msg)).begin()))
      wrong = "message " + std::to_string(msg) + " differs";
  }
  if (!wrong.empty()) f.receiver.abort();
  t.join();
  CHECK(wrong == "");
  CHECK(sent.isOk());
}

TEST_CASE("line FIFO: trySend, hasRoom and ready neither post nor consume by themselves", "[line]") {
  LineFixture f;
  const auto big = messageBytes(1, kLineMaxMessageBytes);
  std::vector<unsigned char> got(kLineMaxMessageBytes);
  CHECK_FALSE(f.receiver.ready(kLineMaxMessageBytes));
  CHECK(f.sender.hasRoom(kLineMaxMessageBytes));
  // kLineSlots / 64 of the largest messages (64 lines each) fill the ring; one more must wait.
  constexpr int kFill = kLineSlots / 64;
  static_assert(kFill >= 2 && kLineMaxMessageBytes == 64 * kLinePayloadBytes);
  for (int i = 0; i < kFill; ++i) REQUIRE(f.sender.trySend(big.data(), big.size()));
  CHECK_FALSE(f.sender.hasRoom(1));
  CHECK_FALSE(f.sender.trySend(big.data(), 1));
  CHECK(f.receiver.ready(kLineMaxMessageBytes));
  CHECK(f.receiver.ready(kLineMaxMessageBytes));  // asking again consumes nothing
  REQUIRE(f.receiver.recv(got.data(), got.size()).isOk());
  CHECK(got == big);
  CHECK(f.sender.hasRoom(kLineMaxMessageBytes));  // the receiver's head freed a message's lines
  for (int i = 1; i < kFill; ++i) {
    REQUIRE(f.receiver.recv(got.data(), got.size()).isOk());
    CHECK(got == big);
  }
  CHECK_FALSE(f.receiver.ready(10));
  // A message of another size is "ready" so that recv can report it.
  REQUIRE(f.sender.trySend(big.data(), 100));
  CHECK(f.receiver.ready(200));
  Status s = f.receiver.recv(got.data(), 200);
  CHECK(s.code() == Code::kInternalError);
  CHECK_THAT(s.message(), Catch::Contains("100-byte message where 200 bytes were expected"));
}

TEST_CASE("line FIFO: a sleeping receiver is woken by one doorbell ring per message", "[line]") {
  ScopedWaitTunables noSpin("0", "0");  // straight to the futex
  LineFixture f;
  const auto msg = messageBytes(7, kLineMaxMessageBytes);  // 64 lines
  std::vector<unsigned char> got(kLineMaxMessageBytes);
  Status received;
  std::thread t([&] { received = f.receiver.recv(got.data(), got.size()); });
  REQUIRE(receiverSleeps(f.memory()));
  REQUIRE(f.sender.send(msg.data(), msg.size()).isOk());
  t.join();
  CHECK(received.isOk());
  CHECK(got == msg);
  CHECK(f.memory()->doorbell.load() == 1);
  // Nobody asleep: no ring at all.
  REQUIRE(f.sender.send(msg.data(), msg.size()).isOk());
  CHECK(f.memory()->doorbell.load() == 1);
  CHECK(f.receiver.recv(got.data(), got.size()).isOk());
}

TEST_CASE("line FIFO: abort from either end ends the other's wait, each with its own error", "[line]") {
  ScopedWaitTunables noSpin("0", "0");
  std::vector<unsigned char> got(64);
  SECTION("the sender aborts while the receiver sleeps") {
    LineFixture f;
    Status received;
    std::thread t([&] { received = f.receiver.recv(got.data(), got.size()); });
    REQUIRE(receiverSleeps(f.memory()));
    const auto start = Clock::now();
    f.sender.abort();
    t.join();
    CHECK(msSince(start) < 500);  // the ring, not the sleep slice or the deadline
    CHECK(received.code() == Code::kRemoteError);
    CHECK_THAT(received.message(), Catch::StartsWith("peer aborted during line test receive"));
    CHECK_THAT(f.sender.abortError().message(), Catch::StartsWith("aborted during line test send"));  // its own
  }
  SECTION("the receiver aborts while the sender waits for room") {
    LineFixture f;
    const auto big = messageBytes(2, kLineMaxMessageBytes);
    for (int i = 0; i < kLineSlots / 64; ++i) REQUIRE(f.sender.send(big.data(), big.size()).isOk());  // full
    Status sent;
    std::thread t([&] { sent = f.sender.send(big.data(), big.size()); });
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (f.memory()->sendSleepers.load() == 0 && Clock::now() < until) std::this_thread::yield();
    f.receiver.abort();
    t.join();
    CHECK(sent.code() == Code::kRemoteError);
    CHECK_THAT(sent.message(), Catch::StartsWith("peer aborted during line test send"));
    CHECK_THAT(f.receiver.abortError().message(), Catch::StartsWith("aborted during line test receive"));
  }
}

}  // namespace plait
