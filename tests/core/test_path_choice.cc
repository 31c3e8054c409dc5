// The choice between the FIFOs and cross-memory attach (core/path_choice.h),
// driven with made-up times: the static rule first, each path's first call
// not counted, the cheaper path kept, a path slow three calls running left
// (single slow calls ignored), and the other tried again once its figure is
// older than the interval.
#include <set>

#include <catch2/catch.hpp>

#include "core/path_choice.h"

using namespace plait;

namespace {
constexpr uint64_t kMs = 1'000'000;
constexpr int kColl = 0;
constexpr size_t kBytes = 1 << 20;

// Runs one call the way the library does: choose, then record what the
// chosen path "took" (fifoNs or cmaNs). Returns the choice.
bool call(PathChooser& c, uint64_t now, uint64_t fifoNs, uint64_t cmaNs, bool rule = false) {
  const bool cma = c.choose(kColl, kBytes, rule, now);
  c.record(kColl, kBytes, cma, cma ? cmaNs : fifoNs, now);
  return cma;
}
}  // namespace

TEST_CASE("The chooser starts with the rule, tries both paths three times, then keeps the cheaper", "[path_choice]") {
  for (bool rule : {false, true}) {
    INFO("rule " << rule);
    PathChooser c(100 * kMs);
    uint64_t now = 1000 * kMs;
    // The rule's path three times (the first call is not counted), then the other three times.
    CHECK(call(c, now++, 50'000, 150'000, rule) == rule);
    CHECK(call(c, now++, 50'000, 150'000, rule) == rule);
    CHECK(c.estimate(kColl, kBytes, rule) < 0);  // one counted call is not an estimate yet
    CHECK(call(c, now++, 50'000, 150'000, rule) == rule);
    CHECK(c.estimate(kColl, kBytes, rule) > 0);
    CHECK(c.estimate(kColl, kBytes, !rule) < 0);
    for (int i = 0; i < 3; ++i) CHECK(call(c, now++, 50'000, 150'000, rule) == !rule);
    // Both known: the FIFOs (50 us against 150) from now on, within the interval.
    for (int i = 0; i < 50; ++i) CHECK_FALSE(call(c, now++, 50'000, 150'000, rule));
    CHECK(c.estimate(kColl, kBytes, false) == Approx(50'000.0 / kBytes));
  }
}

TEST_CASE("A path slow three calls running is left; a recovered one is found again after the interval",
          "[path_choice]") {
  PathChooser c(100 * kMs);
  uint64_t now = 1000 * kMs;
  for (int i = 0; i < 6; ++i) call(c, now++, 50'000, 150'000);
  REQUIRE_FALSE(call(c, now++, 50'000, 150'000));
  // A slow window: the FIFOs take 700 us. The estimate is the cheapest of the
  // last three calls: after three slow ones, cross-memory attach.
  for (int i = 0; i < 3; ++i) CHECK_FALSE(call(c, now++, 700'000, 150'000));
  CHECK(c.estimate(kColl, kBytes, false) == Approx(700'000.0 / kBytes));
  CHECK(call(c, now++, 700'000, 150'000));
  for (int i = 0; i < 20; ++i) CHECK(call(c, now += kMs, 700'000, 150'000));
  // The window ends; within the interval nothing tells the chooser...
  CHECK(call(c, now += kMs, 50'000, 150'000));
  // ...once the FIFOs' figure is 100 ms old they are tried again, found fast, and kept.
  now += 100 * kMs;
  CHECK_FALSE(call(c, now++, 50'000, 150'000));
  for (int i = 0; i < 20; ++i) CHECK_FALSE(call(c, now += kMs, 50'000, 150'000));
  // And cross-memory attach is looked at again once per interval, for one call.
  now += 100 * kMs;
  CHECK(call(c, now++, 50'000, 150'000));
  CHECK_FALSE(call(c, now++, 50'000, 150'000));
}

TEST_CASE("A path's first estimate is the cheaper of its second and third calls", "[path_choice]") {
  // The cross-memory attach's second call still pays for first touches (42
  // us against 18 later): with one figure the FIFOs' 26 us would win.
  PathChooser c(100 * kMs);
  uint64_t now = 1000 * kMs;
  const uint64_t cmaNs[] = {285'000, 42'000, 18'000};
  for (uint64_t ns : cmaNs) CHECK(call(c, now++, 26'000, ns, /*rule=*/true));
  for (int i = 0; i < 3; ++i) CHECK_FALSE(call(c, now++, 26'000, 18'000, true));
  for (int i = 0; i < 20; ++i) CHECK(call(c, now++, 26'000, 18'000, true));
}

TEST_CASE("Single slow calls, or two in a row, do not move the choice", "[path_choice]") {
  // Ranks sharing cores: now and then a call takes 20x its time because a
  // rank was descheduled. Such calls among fast ones leave the estimate alone.
  PathChooser c(100 * kMs);
  uint64_t now = 1000 * kMs;
  for (int i = 0; i < 6; ++i) call(c, now++, 50'000, 150'000);
  for (int round = 0; round < 20; ++round) {
    const uint64_t slow = round % 3 == 0 ? 2 : 1;  // one slow call, and now and then two in a row
    for (uint64_t i = 0; i < slow; ++i) CHECK_FALSE(call(c, now++, 1'000'000, 150'000));
    CHECK_FALSE(call(c, now++, 50'000, 150'000));
    CHECK(c.estimate(kColl, kBytes, false) == Approx(50'000.0 / kBytes));
  }
}

TEST_CASE("Size classes and collectives keep figures of their own", "[path_choice]") {
  PathChooser c(100 * kMs);
  uint64_t now = 1000 * kMs;
  for (int i = 0; i < 7; ++i) call(c, now++, 50'000, 150'000);
  CHECK(c.estimate(kColl, kBytes, false) > 0);
  CHECK(c.estimate(kColl, kBytes + 1000, false) > 0);  // the same power-of-two class
  CHECK(c.estimate(kColl, 2 * kBytes, false) < 0);
  CHECK(c.estimate(kColl + 1, kBytes, false) < 0);
  CHECK(c.choose(kColl + 1, kBytes, true, now) == true);  // no figures: the rule
  // The same collective in place is a kind of its own (kColl's figures were
  // filed out of place: kindOf(kColl, false) == kColl).
  REQUIRE(PathChooser::kindOf(kColl, false) == kColl);
  const int inPlace = PathChooser::kindOf(kColl, true);
  CHECK(inPlace != kColl);
  CHECK(c.estimate(inPlace, kBytes, false) < 0);
  CHECK(c.choose(inPlace, kBytes, true, now) == true);
  // Every collective's two forms are kinds of their own.
  std::set<int> kinds;
  for (int coll = 0; coll < PathChooser::kColls; ++coll)
    for (bool form : {false, true}) kinds.insert(PathChooser::kindOf(coll, form));
  CHECK(kinds.size() == 2 * PathChooser::kColls);
  CHECK(*kinds.begin() >= 0);
  CHECK(*kinds.rbegin() < PathChooser::kKinds);
}

TEST_CASE("An interval of 0 alternates the paths on every call", "[path_choice]") {
  PathChooser c(0);
  uint64_t now = 1000 * kMs;
  for (int i = 0; i < 6; ++i) call(c, now++, 50'000, 150'000);
  bool last = call(c, now++, 50'000, 150'000);
  for (int i = 0; i < 10; ++i) {
    const bool next = call(c, now++, 50'000, 150'000);
    CHECK(next != last);
    last = next;
  }
}

TEST_CASE("Calls so long that exploring costs more than 2% wait longer between explorations", "[path_choice]") {
  PathChooser c(100 * kMs);
  uint64_t now = 1000 * kMs;
  // 64 MiB calls: the FIFOs 12 ms, cross-memory attach 20 ms, 50 x 20 ms = 1 s between tries.
  const size_t big = size_t{64} << 20;
  auto bigCall = [&](uint64_t at) {
    const bool cma = c.choose(kColl, big, false, at);
    c.record(kColl, big, cma, cma ? 20 * kMs : 12 * kMs, at);
    return cma;
  };
  for (int i = 0; i < 6; ++i) bigCall(now += 12 * kMs);
  int tries = 0;
  for (int i = 0; i < 250; ++i) tries += bigCall(now += 12 * kMs);  // 3 s
  CHECK(tries >= 2);
  CHECK(tries <= 3);
}
