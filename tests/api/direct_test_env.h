// direct_test_env.h — settings and log counting for tests of the direct path
// on registered buffers (core/direct.h).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "nccl.h"

namespace plait_test {

inline void resetLibrarySettings() {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();  // re-reads NCCL_DEBUG* and every PLAIT_* tunable
#pragma GCC diagnostic pop
}

// Sets the tunables of a test (the direct path from 1 byte, so small counts
// take it too) and logs TRACE COLL lines to a file that forked ranks append
// to as well; count() reads it.
class DirectTestEnv {
 public:
  explicit DirectTestEnv(const char* minBytes = "1", bool adapt = false) {
    path_ = "/tmp/plait-test-registration-" + std::to_string(getpid()) + ".log";
    std::remove(path_.c_str());
    setenv("PLAIT_DIRECT_MIN_BYTES", minBytes, 1);
    setenv("PLAIT_DIRECT_UNSYNCED_MIN_BYTES", minBytes, 1);
    setenv("PLAIT_DIRECT_CMA_MIN_BYTES", minBytes, 1);
    setenv("PLAIT_DIRECT_CMA_ADAPT", adapt ? "1" : "0", 1);  // off: the static thresholds decide, as tests expect
    // Every call agrees, so a registration counts from the next call on, as
    // these tests count (the default's skip: test_registration_lag.cc).
    setenv("PLAIT_DIRECT_AGREE", "1", 1);
    setenv("NCCL_DEBUG", "TRACE", 1);
    setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
    setenv("NCCL_DEBUG_FILE", path_.c_str(), 1);
    resetLibrarySettings();
  }
  ~DirectTestEnv() {
    for (const char* v : {"PLAIT_DIRECT_MIN_BYTES", "PLAIT_DIRECT_UNSYNCED_MIN_BYTES", "PLAIT_DIRECT_CMA_MIN_BYTES",
                          "PLAIT_DIRECT_CMA_ADAPT", "PLAIT_DIRECT_AGREE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) unsetenv(v);
    resetLibrarySettings();
    std::remove(path_.c_str());
  }
  DirectTestEnv(const DirectTestEnv&) = delete;
  DirectTestEnv& operator=(const DirectTestEnv&) = delete;

  // TRACE lines (one per rank and operation) saying `coll` ran direct
  // (direct true) or took the FIFO path.
  // With `detail`: only the lines that also say that.
  int count(const char* coll, bool direct, const char* detail = "") const {
    std::ifstream in(path_);
    std::string line;
    int n = 0;
    const std::string what = std::string(coll) + " ";
    while (std::getline(in, line))
      if (line.find(" TRACE ") != std::string::npos && line.find(what) != std::string::npos &&
          line.find(direct ? "bytes: direct" : "bytes: FIFO path") != std::string::npos &&
          line.find(detail) != std::string::npos)
        ++n;
    return n;
  }

 private:
  std::string path_;
};

}  // namespace plait_test
