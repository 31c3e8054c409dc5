// The reproducible mode (PLAIT_REPRODUCIBLE; issue 15 item 8): AllReduce,
// Reduce and ReduceScatter of floating types give the same bits whatever the
// algorithm selection, channel count, FIFO step and round sizes, buffer
// registration, transport (shared memory, TCP between "hosts") or in-place
// use — because every configuration must equal one reference computed here:
//   mode 1: y_r = x_r (PreMulSum: x_r * s_r rounded to the type), then
//           ((y_0 op y_1) op y_2) ..., each step computed in float (double
//           for double) and rounded to the type;
//   mode 2: the exact sum of the y_r rounded once, on inputs chosen so that
//           their sum in double is exact (so the reference is that double
//           sum, rounded once by the conversion).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "algorithms/format_reference.h"
#include "direct_test_env.h"
#include "harness.h"
#include "nccl.h"
#include "sweep_mode.h"

namespace {

using plait::testing::FormatReference;

// Sets one environment variable for a scope (ncclResetDebugInit makes the
// library read its tunables again); the old value comes back at exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
    plait_test::resetLibrarySettings();
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
    plait_test::resetLibrarySettings();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

const FormatReference& half() {
  static const FormatReference ref(plait::testing::kHalfSpec);
  return ref;
}
const FormatReference& bfloat16() {
  static const FormatReference ref(plait::testing::kBFloat16Spec);
  return ref;
}

// Values and arithmetic of each tested type, as doubles (exact for all).
double decode(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
    case ncclFloat32: return static_cast<const float*>(p)[i];
    case ncclFloat64: return static_cast<const double*>(p)[i];
    case ncclFloat16: return half().decode(static_cast<const uint16_t*>(p)[i]);
    case ncclBfloat16: return bfloat16().decode(static_cast<const uint16_t*>(p)[i]);
    default: return 0;
  }
}
// Rounds `v` to the type once (a float step's result is exact in double).
void encode(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case ncclFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = v; break;
    case ncclFloat16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(half().encode(v)); break;
    case ncclBfloat16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bfloat16().encode(v)); break;
    default: break;
  }
}
size_t sizeOf(ncclDataType_t t) { return t == ncclFloat64 ? 8 : t == ncclFloat32 ? 4 : 2; }

// One step of the fold in the kernel's arithmetic: float, or double for double.
double step(ncclDataType_t t, ncclRedOp_t op, double a, double b) {
  if (t == ncclFloat64) {
    switch (op) {
      case ncclProd: return a * b;
      case ncclMax: return a > b ? a : b;
      case ncclMin: return a < b ? a : b;
      default: return a + b;
    }
  }
  const float x = static_cast<float>(a), y = static_cast<float>(b);
  switch (op) {
    case ncclProd: return x * y;
    case ncclMax: return x > y ? x : y;
    case ncclMin: return x < y ? x : y;
    default: return x + y;
  }
}

// Each rank's PreMulSum scalar (exact in every type).
double scalarOf(int rank) { return rank % 2 == 0 ? 0.75 : 1.5; }

// Rank r's input: values whose rank-order fold differs from other orders
// (exponents over 2^-8 .. 2^8). Exact mode: multiples of 2^-6 below 2^10 in
// magnitude, so that their sum in double is exact.
std::vector<char> inputOf(ncclDataType_t t, int rank, size_t count, bool exactSafe) {
  std::vector<char> buf(count * sizeOf(t));
  std::mt19937 rng(1000 + 7 * rank + static_cast<int>(t));
  std::uniform_real_distribution<double> unit(-1, 1);
  std::uniform_int_distribution<int> exp(-8, 8);
  for (size_t i = 0; i < count; ++i) {
    double v = std::ldexp(unit(rng), exp(rng));
    if (exactSafe) v = std::ldexp(std::round(std::ldexp(v, 6)), -6);
    if (v == 0) v = 0.25;
    encode(t, buf.data(), i, v);
  }
  return buf;
}

// PLAIT_TEST_SWEEP=quick (the ASan pass in CI): float and half only, and
// the configurations that take different paths (the others run in the plain
// pass).
bool quickSweep() { return plait_test::quickSweepRequested(); }

enum Coll { kAllReduce, kReduce, kReduceScatter };

struct Case {
  ncclDataType_t type;
  ncclRedOp_t op;  // ncclNumOps: a PreMulSum by scalarOf(rank)
};

// The reference result of all `count` elements of the n-rank reduction
// (ReduceScatter: of the whole concatenated input).
std::vector<char> computeReference(const Case& c, int nranks, size_t count, int mode) {
  const bool exactSafe = mode == 2;
  std::vector<std::vector<char>> in;
  for (int r = 0; r < nranks; ++r) in.push_back(inputOf(c.type, r, count, exactSafe));
  std::vector<char> out(count * sizeOf(c.type));
  std::vector<char> y(sizeOf(c.type));
  for (size_t i = 0; i < count; ++i) {
    double acc = 0;
    for (int r = 0; r < nranks; ++r) {
      double v = decode(c.type, in[r].data(), i);
      if (c.op == ncclNumOps) {  // scaled in the kernel's arithmetic, rounded to the type
        encode(c.type, y.data(), 0, step(c.type, ncclProd, v, scalarOf(r)));
        v = decode(c.type, y.data(), 0);
      }
      if (mode == 2) {
        acc += v;  // exact (see inputOf)
        continue;
      }
      if (r == 0) acc = v;
      else {
        encode(c.type, y.data(), 0, step(c.type, c.op, acc, v));
        acc = decode(c.type, y.data(), 0);
      }
    }
    encode(c.type, out.data(), i, acc);
  }
  return out;
}

// The reference (or, with `input`, rank's input), computed once for all
// ranks and configurations.
const std::vector<char>& reference(const Case& c, int rank, int nranks, size_t count, int mode, bool input) {
  static std::mutex mu;
  static std::map<std::string, std::vector<char>> cache;
  const std::string key = std::to_string(c.type) + "/" + std::to_string(c.op) + "/" + std::to_string(nranks) + "/" +
                          std::to_string(count) + "/" + std::to_string(mode) + "/" +
                          (input ? std::to_string(rank) : std::string("out"));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, input ? inputOf(c.type, rank, count, mode == 2) : computeReference(c, nranks, count, mode))
             .first;
  return it->second;
}

// Runs one collective on `comm` and compares with the reference; "" if equal.
std::string checkOne(ncclComm_t comm, int rank, int nranks, Coll coll, const Case& c, size_t count,
                     bool inPlace, bool registered, int mode) {
  const size_t elem = sizeOf(c.type);
  const size_t total = coll == kReduceScatter ? count * nranks : count;
  const std::vector<char>& mine = reference(c, rank, nranks, total, mode, true);
  const size_t outCount = coll == kReduceScatter ? count : total;
  void* send = nullptr;
  void* recv = nullptr;
  const size_t bytes = total * elem;
  if (registered) {
    if (ncclMemAlloc(&send, bytes) != ncclSuccess || ncclMemAlloc(&recv, bytes) != ncclSuccess)
      return std::string("ncclMemAlloc: ") + ncclGetLastError(comm);
  } else {
    send = std::malloc(bytes);
    recv = std::malloc(bytes);
  }
  void *sendHandle = nullptr, *recvHandle = nullptr;
  if (registered && (ncclCommRegister(comm, send, bytes, &sendHandle) != ncclSuccess ||
                     ncclCommRegister(comm, recv, bytes, &recvHandle) != ncclSuccess))
    return std::string("ncclCommRegister: ") + ncclGetLastError(comm);
  std::memcpy(send, mine.data(), bytes);
  std::memset(recv, 0x5a, bytes);
  void* out = inPlace ? send : recv;
  const void* in = send;
  void* outAt = out;
  if (inPlace && coll == kReduceScatter) outAt = static_cast<char*>(send) + rank * count * elem;
  ncclRedOp_t op = c.op;
  if (c.op == ncclNumOps) {
    std::vector<char> s(elem);
    encode(c.type, s.data(), 0, scalarOf(rank));
    if (ncclRedOpCreatePreMulSum(&op, s.data(), c.type, ncclScalarHostImmediate, comm) != ncclSuccess)
      return std::string("ncclRedOpCreatePreMulSum: ") + ncclGetLastError(comm);
  }
  const int root = 1 % nranks;
  ncclResult_t r = ncclSuccess;
  switch (coll) {
    case kAllReduce: r = ncclAllReduce(in, outAt, count, c.type, op, comm, nullptr); break;
    case kReduce: r = ncclReduce(in, outAt, count, c.type, op, root, comm, nullptr); break;
    default: r = ncclReduceScatter(in, outAt, count, c.type, op, comm, nullptr); break;
  }
  std::string failure;
  if (r != ncclSuccess) failure = std::string("collective: ") + ncclGetLastError(comm);
  const bool hasResult = coll != kReduce || rank == root;
  if (failure.empty() && hasResult) {
    const size_t first = coll == kReduceScatter ? rank * count : 0;
    const char* want = reference(c, rank, nranks, total, mode, false).data() + first * elem;
    if (std::memcmp(outAt, want, outCount * elem) != 0) {
      size_t bad = 0;
      while (bad < outCount && std::memcmp(static_cast<char*>(outAt) + bad * elem, want + bad * elem, elem) == 0)
        ++bad;
      failure = "element " + std::to_string(bad) + " of " + std::to_string(outCount) + ": got " +
                std::to_string(decode(c.type, outAt, bad)) + ", the fold gives " +
                std::to_string(decode(c.type, want, bad));
    }
  }
  if (c.op == ncclNumOps) ncclRedOpDestroy(op, comm);
  if (registered) {
    ncclCommDeregister(comm, sendHandle);
    ncclCommDeregister(comm, recvHandle);
    ncclMemFree(send);
    ncclMemFree(recv);
  } else {
    std::free(send);
    std::free(recv);
  }
  if (failure.empty()) return "";
  static const char* names[] = {"AllReduce", "Reduce", "ReduceScatter"};
  return std::string(names[coll]) + " type " + std::to_string(c.type) + " op " + std::to_string(c.op) + " count " +
         std::to_string(count) + (inPlace ? " in place" : "") + ": " + failure;
}

// Every collective, type, operator and size of one configuration.
std::string checkAll(ncclComm_t comm, int rank, int nranks, int mode, bool registered) {
  const std::vector<ncclDataType_t> types = quickSweep() ? std::vector<ncclDataType_t>{ncclFloat32, ncclFloat16}
                                                        : std::vector<ncclDataType_t>{ncclFloat32, ncclFloat64,
                                                                                      ncclFloat16, ncclBfloat16};
  const ncclRedOp_t sumOps[] = {ncclSum, ncclNumOps};
  const ncclRedOp_t allOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclNumOps};
  for (Coll coll : {kAllReduce, kReduce, kReduceScatter})
    for (ncclDataType_t t : types)
      for (ncclRedOp_t op : mode == 2 ? std::vector<ncclRedOp_t>(sumOps, sumOps + 2)
                                      : std::vector<ncclRedOp_t>(allOps, allOps + 5))
        for (size_t count : {size_t(61), size_t(8009)})
          for (bool inPlace : {false, true}) {
            if (inPlace && count < 100 && op != ncclSum) continue;
            std::string e = checkOne(comm, rank, nranks, coll, Case{t, op}, count, inPlace, registered, mode);
            if (!e.empty()) return e;
          }
  return "";
}

struct Config {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
  bool registered = false;
  bool quickSkip = false;  // left out of a quick sweep
};

const std::vector<Config>& threadConfigs() {
  static const std::vector<Config> configs = {
      {"the tuner's choice", {}},
      {"ring selected", {{"NCCL_ALGO", "ring"}}, false, true},
      {"one channel, 4 KiB rounds", {{"PLAIT_NCHANNELS", "1"}, {"PLAIT_REPRODUCIBLE_SCRATCH_BYTES", "4096"}}},
      {"four channels, 4 KiB FIFO steps, single-copy p2p",
       {{"PLAIT_NCHANNELS", "4"}, {"PLAIT_SHM_P2P_STEP_BYTES", "4096"}, {"PLAIT_P2P_CMA", "1"}, {"PLAIT_P2P_CMA_MIN_BYTES", "4096"}},
       false, true},
      {"registered buffers (the direct path)", {}, true},
  };
  return configs;
}

void runThreadConfigs(int mode, int nranks) {
  const std::string modeText = std::to_string(mode);
  ScopedEnv reproducible("PLAIT_REPRODUCIBLE", modeText.c_str());
  for (const Config& config : threadConfigs()) {
    if (quickSweep() && config.quickSkip) continue;
    std::vector<std::unique_ptr<ScopedEnv>> env;
    for (const auto& [name, value] : config.env) env.push_back(std::make_unique<ScopedEnv>(name, value));
    // Registered buffers: the direct path from 1 byte, and its TRACE lines
    // prove it ran each collective.
    std::unique_ptr<plait_test::DirectTestEnv> direct;
    if (config.registered) direct = std::make_unique<plait_test::DirectTestEnv>();
    INFO("PLAIT_REPRODUCIBLE=" << mode << ", " << nranks << " ranks, " << config.name);
    const auto failed = plait_test::runThreads(
        nranks, [&](int rank, ncclComm_t comm) { return checkAll(comm, rank, nranks, mode, config.registered); });
    for (const std::string& f : failed) FAIL_CHECK(f);
    if (direct)
      for (const char* coll : {"AllReduce", "Reduce", "ReduceScatter"}) {
        INFO(coll << " ran direct");
        CHECK(direct->count(coll, true) > 0);
      }
  }
}

}  // namespace

TEST_CASE("rank-order mode: every configuration gives the fold's bits", "[threads]") {
  runThreadConfigs(1, 3);
  if (!quickSweep()) runThreadConfigs(1, 4);
}

TEST_CASE("exact mode: every configuration gives the exact sum rounded once", "[threads]") {
  runThreadConfigs(2, 3);
}

// Ranks as processes on pretend hosts (NCCL_HOSTID): the pairs on different
// "hosts" talk over TCP, the others over shared memory.
TEST_CASE("reproducible across transports: TCP between hosts, mixed", "[process]") {
  for (int mode : {1, 2}) {
    for (const std::vector<const char*>& hosts : {std::vector<const char*>{"a", "b", "c"},
                                                  std::vector<const char*>{"a", "a", "b"}}) {
      const int n = static_cast<int>(hosts.size());
      const auto codes = plait_test::runProcesses(n, [&](int rank, const ncclUniqueId& id) {
        setenv("NCCL_HOSTID", hosts[rank], 1);
        setenv("PLAIT_REPRODUCIBLE", std::to_string(mode).c_str(), 1);
        plait_test::resetLibrarySettings();  // rank 0 is this process: forget the last case's values
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
          std::fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
          return 2;
        }
        const std::string e = checkAll(comm, rank, n, mode, false);
        if (!e.empty()) std::fprintf(stderr, "rank %d (host %s, mode %d): %s\n", rank, hosts[rank], mode, e.c_str());
        ncclCommDestroy(comm);
        return e.empty() ? 0 : 1;
      });
      INFO("mode " << mode << ", hosts " << hosts[0] << hosts[1] << hosts[2]);
      for (int c : codes) CHECK(c == 0);
    }
  }
}

TEST_CASE("ranks that disagree on the mode, or a bad value, fail init with the reason", "[process]") {
  const auto codes = plait_test::runProcesses(2, [](int rank, const ncclUniqueId& id) {
    setenv("PLAIT_REPRODUCIBLE", rank == 0 ? "1" : "0", 1);
    plait_test::resetLibrarySettings();
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, 2, id, rank);
    const std::string why = ncclGetLastError(nullptr);
    if (r == ncclSuccess) ncclCommDestroy(comm);
    const bool named = why.find("PLAIT_REPRODUCIBLE differs across ranks: rank 0 has 1, rank 1 has 0") !=
                       std::string::npos;
    if (r != ncclInvalidUsage || !named) std::fprintf(stderr, "rank %d: %d %s\n", rank, r, why.c_str());
    return r == ncclInvalidUsage && named ? 0 : 1;
  });
  for (int c : codes) CHECK(c == 0);
  ScopedEnv bad("PLAIT_REPRODUCIBLE", "7");
  const auto failed = plait_test::runThreads(1, [](int, ncclComm_t) { return std::string("init succeeded"); });
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].find("PLAIT_REPRODUCIBLE=7: expected 0") != std::string::npos);
  ScopedEnv on("PLAIT_REPRODUCIBLE", "1");
  ScopedEnv tiny("PLAIT_REPRODUCIBLE_SCRATCH_BYTES", "-5");
  const auto refused = plait_test::runThreads(1, [](int, ncclComm_t) { return std::string("init succeeded"); });
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].find("PLAIT_REPRODUCIBLE_SCRATCH_BYTES=-5: must be at least 4096") != std::string::npos);
}
