// What the direct path accepts from a peer's descriptor (review of
// 2026-11-30). A peer in another process named a buffer as "an address in
// this process" and was believed, so it could have this rank read or write
// any address of its own; and the agreement compared only the low 32 bits of
// the count, so ranks whose counts differed by a multiple of 2^32 went on
// with blocks their peers' buffers did not hold.
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/direct.h"

using namespace plait;

TEST_CASE("a peer's buffer reference is accepted only where the job can have made it", "[direct]") {
  constexpr int32_t kNone = -1, kPointer = -2, kCma = -3;  // direct.cc's BufferRef::fd values
  // Ranks in several processes, cross-memory attach agreed.
  CHECK(DirectPath::possibleRef(kNone, false, true));
  CHECK(DirectPath::possibleRef(kCma, false, true));
  CHECK(DirectPath::possibleRef(7, false, true));
  CHECK_FALSE(DirectPath::possibleRef(kPointer, false, true));  // an address in *this* process: never from another
  // Without cross-memory attach: memfds only.
  CHECK_FALSE(DirectPath::possibleRef(kCma, false, false));
  CHECK(DirectPath::possibleRef(3, false, false));
  // Every rank a thread of one process: addresses here, no memfds, no attach.
  CHECK(DirectPath::possibleRef(kPointer, true, false));
  CHECK_FALSE(DirectPath::possibleRef(5, true, false));
  CHECK_FALSE(DirectPath::possibleRef(kCma, true, false));
  // Values no rank writes.
  CHECK_FALSE(DirectPath::possibleRef(-4, false, true));
  CHECK_FALSE(DirectPath::possibleRef(INT32_MIN, true, true));
}

TEST_CASE("the descriptor's count check tells apart counts that differ in their high bits, and roots", "[direct]") {
  Task a;
  a.coll = CollType::kAllGather;
  a.count = 1000;
  Task b = a;
  CHECK(DirectPath::countCheck(a) == DirectPath::countCheck(b));
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1} << 20, uint64_t{0xffffffff}}) {
    b.count = a.count + (k << 32);
    CHECK(DirectPath::countCheck(a) != DirectPath::countCheck(b));
  }
  b.count = a.count + 1;
  CHECK(DirectPath::countCheck(a) != DirectPath::countCheck(b));
  // Rooted collectives: the shape holds the root mod 128, the check the rest.
  Task r = a;
  r.coll = CollType::kBroadcast;
  r.root = 3;
  Task r2 = r;
  r2.root = 3 + 128;
  CHECK(DirectPath::countCheck(r) != DirectPath::countCheck(r2));
  r2.root = 3;
  CHECK(DirectPath::countCheck(r) == DirectPath::countCheck(r2));
  // Unrooted ones ignore the root field.
  Task u = a;
  u.root = 500;
  CHECK(DirectPath::countCheck(a) == DirectPath::countCheck(u));
}
