// Timeout arithmetic (issue 11, item 8). A timeout from the environment is
// multiplied into milliseconds and then nanoseconds; before the fix a
// PLAIT_TIMEOUT of "10G" seconds overflowed the steady clock, every Deadline
// was already expired and communicator creation failed at once, and a
// "9000000000G" overflowed the parser itself (undefined behaviour).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/config.h"
#include "plait/clock.hpp"

using namespace plait;

TEST_CASE("Deadlines saturate instead of overflowing the clock", "[timeouts]") {
  CHECK_FALSE(Deadline::afterMs(INT64_MAX).expired());
  CHECK_FALSE(Deadline::afterMs(int64_t(10) << 43).expired());  // 10G seconds in ms
  CHECK(Deadline::afterMs(INT64_MAX).remainingMs() > int64_t(1) << 39);
  CHECK(Deadline::afterMs(INT64_MAX).remainingMs() <= kMaxWaitMs);
  CHECK_FALSE(Deadline::after(std::chrono::nanoseconds::max()).expired());
  CHECK(Deadline::afterMs(-5).expired());
  CHECK(Deadline::afterMs(INT64_MIN).expired());
  CHECK(Deadline::afterMs(0).remainingMs() == 0);
  const int64_t left = Deadline::afterMs(60000).remainingMs();
  CHECK(left > 59000);
  CHECK(left <= 60000);
}

TEST_CASE("Seconds to milliseconds and sums of waits saturate", "[timeouts]") {
  CHECK(secondsToWaitMs(300) == 300000);
  CHECK(secondsToWaitMs(0) == 0);
  CHECK(secondsToWaitMs(-1) == 0);
  CHECK(secondsToWaitMs(int64_t(10) << 30) == kMaxWaitMs);
  CHECK(secondsToWaitMs(INT64_MAX) == kMaxWaitMs);
  CHECK(addWaitMs(1000, 2000) == 3000);
  CHECK(addWaitMs(kMaxWaitMs, kMaxWaitMs) == kMaxWaitMs);
  CHECK(addWaitMs(INT64_MAX, INT64_MAX) == kMaxWaitMs);
  CHECK(addWaitMs(-7, 5) == 5);
}

TEST_CASE("Integer parameters: suffixes scale, and values that overflow are rejected", "[timeouts]") {
  int64_t v = 0;
  CHECK(config::parseInt("10G", &v));
  CHECK(v == (int64_t(10) << 30));
  CHECK(config::parseInt("4k", &v));
  CHECK(v == 4096);
  CHECK_FALSE(config::parseInt("9000000000G", &v));
  CHECK_FALSE(config::parseInt("99999999999999999999", &v));
  CHECK_FALSE(config::parseInt("12x", &v));
  CHECK_FALSE(config::parseInt("", &v));
}

// A parameter's source used to be read without its value being loaded: asked
// first it said "default" whatever the environment held, and asked while
// another thread's first get() loaded the value it raced with that load's
// write (ncclParamDumpAll evaluates both in one call, in either order).
TEST_CASE("A parameter's source is known before its value was read, from any thread", "[timeouts]") {
  static plait::config::IntParam first("TEST_SOURCE_FIRST", 1, "test");
  static plait::config::IntParam raced("TEST_SOURCE_RACED", 1, "test");
  setenv("NCCL_TEST_SOURCE_FIRST", "7", 1);
  setenv("PLAIT_TEST_SOURCE_RACED", "9", 1);
  CHECK(first.source() == "NCCL_TEST_SOURCE_FIRST");
  CHECK(first.get() == 7);
  std::string seen;
  std::thread reader([&] { seen = raced.source(); });
  CHECK(raced.get() == 9);
  reader.join();
  CHECK(seen == "PLAIT_TEST_SOURCE_RACED");
  unsetenv("NCCL_TEST_SOURCE_FIRST");
  unsetenv("PLAIT_TEST_SOURCE_RACED");
}
