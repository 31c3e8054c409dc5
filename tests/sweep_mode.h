// sweep_mode.h — whether a test run asked for quick sweeps
// (PLAIT_TEST_SWEEP=quick: scripts/test.sh sets it for the passes where each
// case costs more, the device emulator's and the sanitizers'). What a quick
// sweep leaves out is each test's own choice.
#pragma once

#include <cstdlib>
#include <cstring>

namespace plait_test {

inline bool quickSweepRequested() {
  const char* mode = std::getenv("PLAIT_TEST_SWEEP");
  return mode != nullptr && std::strcmp(mode, "quick") == 0;
}

}  // namespace plait_test
