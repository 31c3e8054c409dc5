// tools/perf/options.cc — getopt_long parsing of nccl-tests' flags.
#include "options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace plait::perf {
namespace {

// "64", "8K", "1M", "2G" (powers of 1024, as nccl-tests).
bool parseBytes(const char* text, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  switch (*end) {
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; ++end; break;
    case 'M': case 'm': v *= 1024.0 * 1024; ++end; break;
    case 'K': case 'k': v *= 1024.0; ++end; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v);
  return true;
}

bool parseInt(const char* text, int* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end != '\0') return false;
  *out = static_cast<int>(v);
  return true;
}

constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,
                                        ncclInt64,   ncclUint64,  ncclFloat16,  ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr TestOp kAllOps[] = {TestOp::kSum, TestOp::kProd, TestOp::kMax,
                              TestOp::kMin, TestOp::kAvg,  TestOp::kMulSum};

bool parseTypes(std::string_view text, std::vector<ncclDataType_t>* out) {
  out->clear();
  if (text == "all") {
    out->assign(std::begin(kAllTypes), std::end(kAllTypes));
    return true;
  }
  // Aliases nccl-tests accepts besides the table names.
  if (text == "char") text = "int8";
  if (text == "int") text = "int32";
  if (text == "fp16" || text == "float16") text = "half";
  if (text == "fp32" || text == "float32") text = "float";
  if (text == "fp64" || text == "float64") text = "double";
  if (text == "bf16") text = "bfloat16";
  for (ncclDataType_t t : kAllTypes) {
    if (text == typeName(t)) {
      out->push_back(t);
      return true;
    }
  }
  return false;
}

bool parseOps(std::string_view text, std::vector<TestOp>* out) {
  out->clear();
  if (text == "all") {
    out->assign(std::begin(kAllOps), std::end(kAllOps));
    return true;
  }
  for (TestOp op : kAllOps) {
    if (text == opName(op)) {
      out->push_back(op);
      return true;
    }
  }
  return false;
}

void printUsage(const char* program) {
  std::printf(
      "USAGE: %s\n"
      "  [-t,--nthreads <threads per process>]\n"
      "  [-g,--ngpus <ranks per thread>]\n"
      "  [-b,--minbytes <min size in bytes, K/M/G suffixes>]\n"
      "  [-e,--maxbytes <max size in bytes>]\n"
      "  [-i,--stepbytes <increment size>]\n"
      "  [-f,--stepfactor <increment factor>]\n"
      "  [-n,--iters <iteration count>]\n"
      "  [-m,--agg_iters <aggregated iteration count>]\n"
      "  [-w,--warmup_iters <warmup iteration count>]\n"
      "  [-c,--check <check iteration count, 0 disables>]\n"
      "  [-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
      "  [-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
      "  [-r,--root <root>]\n"
      "  [-z,--blocking <0/1> (host calls on a null stream always complete on return)]\n"
      "  [-a,--average <0/1/2/3> report rank 0 / mean / min / max time across ranks]\n"
      "  [-J,--output_file <JSON output file>]\n"
      "  [-T,--timeout <seconds per size step, 0 disables>]\n"
      "  [-R,--local_register <0/1/2> register ncclMemAlloc buffers: 1 ncclCommRegister, 2 ncclCommWindowRegister]\n"
      "  [--host_alloc <shared/malloc> host buffers from ncclMemAlloc's shared memory (default), or from the heap\n"
      "   as MPI's and torch's (no -R); default from PLAIT_PERF_HOST_ALLOC]\n"
      "  [--bind_threads <0/1> bind each of -t threads to a CPU of its own while the process may run on\n"
      "   enough of them, as plait-run and mpirun bind processes (default 1)]\n"
      "  [-h,--help]\n"
      "Ranks: under plait-run (PLAIT_RANK/PLAIT_NRANKS), under mpirun (OMPI_COMM_WORLD_*), or one\n"
      "process; every process runs -t threads of -g ranks each.\n",
      program);
}

constexpr int kHostAlloc = 1000;  // long options only: nccl-tests may take any letter
constexpr int kBindThreads = 1001;

const struct option kLongOptions[] = {
    {"nthreads", required_argument, nullptr, 't'},     {"ngpus", required_argument, nullptr, 'g'},
    {"minbytes", required_argument, nullptr, 'b'},     {"maxbytes", required_argument, nullptr, 'e'},
    {"stepbytes", required_argument, nullptr, 'i'},    {"stepfactor", required_argument, nullptr, 'f'},
    {"iters", required_argument, nullptr, 'n'},        {"agg_iters", required_argument, nullptr, 'm'},
    {"warmup_iters", required_argument, nullptr, 'w'}, {"check", required_argument, nullptr, 'c'},
    {"op", required_argument, nullptr, 'o'},           {"datatype", required_argument, nullptr, 'd'},
    {"root", required_argument, nullptr, 'r'},         {"blocking", required_argument, nullptr, 'z'},
    {"average", required_argument, nullptr, 'a'},      {"output_file", required_argument, nullptr, 'J'},
    {"timeout", required_argument, nullptr, 'T'},      {"local_register", required_argument, nullptr, 'R'},
    {"host_alloc", required_argument, nullptr, kHostAlloc}, {"bind_threads", required_argument, nullptr, kBindThreads},
    {"help", no_argument, nullptr, 'h'},
    {nullptr, 0, nullptr, 0}};

// Applies one parsed flag; false when its value is invalid.
bool applyFlag(int c, const char* arg, Options* o) {
  switch (c) {
    case 'b': return parseBytes(arg, &o->minBytes);
    case 'e': return parseBytes(arg, &o->maxBytes);
    case 'i': return parseBytes(arg, &o->stepBytes);
    case 'f': o->stepFactor = std::strtod(arg, nullptr); return o->stepFactor > 0;
    case 't': return parseInt(arg, &o->nThreads) && o->nThreads >= 1;
    case 'g': return parseInt(arg, &o->nGpus) && o->nGpus >= 1;
    case 'n': return parseInt(arg, &o->iters) && o->iters >= 0;
    case 'w': return parseInt(arg, &o->warmupIters) && o->warmupIters >= 0;
    case 'm': return parseInt(arg, &o->aggIters) && o->aggIters >= 1;
    case 'c': return parseInt(arg, &o->check) && o->check >= 0;
    case 'r': return parseInt(arg, &o->root) && o->root >= 0;
    case 'z': return parseInt(arg, &o->blocking);
    case 'a': return parseInt(arg, &o->average) && o->average >= 0 && o->average <= 3;
    case 'T': return parseInt(arg, &o->timeoutSec) && o->timeoutSec >= 0;
    case 'R': return parseInt(arg, &o->localRegister) && o->localRegister >= 0 && o->localRegister <= 2;
    case 'J': o->jsonPath = arg; return !o->jsonPath.empty();
    case kHostAlloc:
      o->hostMalloc = std::strcmp(arg, "malloc") == 0;
      return o->hostMalloc || std::strcmp(arg, "shared") == 0;
    case kBindThreads: {
      int bind = 0;
      if (!parseInt(arg, &bind) || (bind != 0 && bind != 1)) return false;
      o->bindThreads = bind == 1;
      return true;
    }
    case 'o': return parseOps(arg, &o->ops);
    case 'd': return parseTypes(arg, &o->types);
    default: return false;
  }
}

}  // namespace

bool parseOptions(int argc, char** argv, Options* options, int* exitCode) {
  *exitCode = 1;
  optind = 1;
  // The environment's default for --host_alloc, so that scripts that vary
  // only environments (perf/host/interleave.sh) can compare the two.
  if (const char* env = std::getenv("PLAIT_PERF_HOST_ALLOC"); env != nullptr && !applyFlag(kHostAlloc, env, options)) {
    std::fprintf(stderr, "%s: invalid value '%s' for PLAIT_PERF_HOST_ALLOC (shared or malloc)\n", argv[0], env);
    return false;
  }
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:c:o:d:r:z:a:J:T:R:h", kLongOptions, nullptr)) != -1) {
    if (c == 'h') {
      printUsage(argv[0]);
      *exitCode = 0;
      return false;
    }
    if (c == '?' || !applyFlag(c, optarg, options)) {
      if (c == kHostAlloc) std::fprintf(stderr, "%s: invalid value '%s' for --host_alloc\n", argv[0], optarg);
      else if (c == kBindThreads) std::fprintf(stderr, "%s: invalid value '%s' for --bind_threads (0 or 1)\n", argv[0], optarg);
      else if (c != '?') std::fprintf(stderr, "%s: invalid value '%s' for -%c\n", argv[0], optarg, c);
      printUsage(argv[0]);
      return false;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
    return false;
  }
  if (options->hostMalloc && options->localRegister != 0) {
    std::fprintf(stderr, "%s: -R registers ncclMemAlloc buffers; it cannot be used with --host_alloc malloc\n",
                 argv[0]);
    return false;
  }
  if (options->maxBytes < options->minBytes) {
    std::fprintf(stderr, "%s: -e (%zu) is smaller than -b (%zu)\n", argv[0], options->maxBytes, options->minBytes);
    return false;
  }
  return true;
}

std::vector<size_t> sizeSteps(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    sizes.push_back(size);
    size_t next = o.stepFactor > 1 ? static_cast<size_t>(static_cast<double>(size) * o.stepFactor)
                                   : size + o.stepBytes;
    if (next <= size) break;  // -b 0 with a factor, or -i 0: one step only
    size = next;
  }
  return sizes;
}

}  // namespace plait::perf
