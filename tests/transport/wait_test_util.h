// wait_test_util.h — helpers shared by the waiting and FIFO tests.
#pragma once

#include <chrono>
#include <cstdlib>

#include "base/clock.h"
#include "base/config.h"

namespace plait {

inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Sets PLAIT_WAIT_SPIN / PLAIT_WAIT_YIELD for a scope.
class ScopedWaitTunables {
 public:
  ScopedWaitTunables(const char* spin, const char* yield) {
    setenv("PLAIT_WAIT_SPIN", spin, 1);
    setenv("PLAIT_WAIT_YIELD", yield, 1);
    config::resetAll();
  }
  ~ScopedWaitTunables() {
    unsetenv("PLAIT_WAIT_SPIN");
    unsetenv("PLAIT_WAIT_YIELD");
    config::resetAll();
  }
};

}  // namespace plait
