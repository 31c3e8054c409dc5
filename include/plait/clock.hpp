// plait/clock.hpp — monotonic time and deadlines. Every blocking call in Plait takes
// a Deadline; Deadline::never() exists for tests and is never used by the
// library itself.
#pragma once

#include <chrono>
#include <cstdint>

namespace plait {

using Clock = std::chrono::steady_clock;

inline uint64_t nowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// The longest wait a Deadline represents: about 34 years. Longer requests (a
// PLAIT_TIMEOUT of "10G" seconds) saturate here instead of overflowing the
// clock's 64-bit nanosecond count.
inline constexpr int64_t kMaxWaitMs = int64_t(1) << 40;

// Seconds to milliseconds for timeouts read from the environment: negative is 0,
// and the product saturates at kMaxWaitMs instead of overflowing.
inline constexpr int64_t secondsToWaitMs(int64_t seconds) {
  if (seconds <= 0) return 0;
  return seconds >= kMaxWaitMs / 1000 ? kMaxWaitMs : seconds * 1000;
}

// a + b for non-negative wait lengths, saturating at kMaxWaitMs.
inline constexpr int64_t addWaitMs(int64_t a, int64_t b) {
  a = a < 0 ? 0 : (a > kMaxWaitMs ? kMaxWaitMs : a);
  b = b < 0 ? 0 : (b > kMaxWaitMs ? kMaxWaitMs : b);
  return a + b > kMaxWaitMs ? kMaxWaitMs : a + b;
}

class Deadline {
 public:
  // Negative lengths are "already expired"; lengths past kMaxWaitMs saturate.
  static Deadline after(std::chrono::nanoseconds d) {
    constexpr std::chrono::nanoseconds kMax = std::chrono::milliseconds(kMaxWaitMs);
    if (d < std::chrono::nanoseconds::zero()) d = std::chrono::nanoseconds::zero();
    return Deadline(Clock::now() + (d > kMax ? kMax : d));
  }
  static Deadline afterMs(int64_t ms) {
    return after(std::chrono::milliseconds(ms < 0 ? 0 : (ms > kMaxWaitMs ? kMaxWaitMs : ms)));
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  bool expired() const { return at_ != Clock::time_point::max() && Clock::now() >= at_; }
  // Milliseconds left (0 if expired, INT64_MAX if never).
  int64_t remainingMs() const {
    if (at_ == Clock::time_point::max()) return INT64_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace plait
