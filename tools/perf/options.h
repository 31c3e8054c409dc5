// tools/perf/options.h — nccl-tests' command line for the *_perf tools.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common.h"

namespace plait::perf {

struct Options {
  size_t minBytes = 32u << 20;
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  double stepFactor = 1;  // > 1: multiply the size each step, else add stepBytes
  int nThreads = 1;       // -t: threads per process
  int nGpus = 1;          // -g: ranks per thread (host "devices")
  int iters = 20;
  int warmupIters = 1;
  int aggIters = 1;       // -m: calls per timed iteration, grouped
  int check = 1;          // -c: 0 no check, else check once per size
  int root = 0;
  int blocking = 1;       // -z: host calls on a null stream always complete on return
  int average = 1;        // -a: 0 rank 0, 1 mean, 2 min, 3 max across ranks
  int timeoutSec = 0;     // -T: 0 means no watchdog
  int localRegister = 0;  // -R: 1 ncclCommRegister the buffers, 2 ncclCommWindowRegister them
  bool hostMalloc = false;  // --host_alloc malloc: plain heap buffers (as MPI's and torch's), not ncclMemAlloc's
  bool bindThreads = true;  // --bind_threads: -t threads on CPUs of their own while the process has enough
  std::string jsonPath;   // -J
  std::vector<ncclDataType_t> types{ncclFloat32};
  std::vector<TestOp> ops{TestOp::kSum};
};

// Parses argv with getopt_long. Returns false after printing the reason (or
// the usage for -h, with *exitCode = 0) when the program must stop.
bool parseOptions(int argc, char** argv, Options* options, int* exitCode);

// The sizes the sweep visits, in bytes, smallest first.
std::vector<size_t> sizeSteps(const Options& options);

}  // namespace plait::perf
