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

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline afterMs(int64_t ms) { return after(std::chrono::milliseconds(ms)); }
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
