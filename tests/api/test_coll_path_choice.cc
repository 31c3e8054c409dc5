// Unregistered buffers between two processes, where each call may go
// through the FIFOs or be copied once by cross-memory attach, as measured
// (core/path_choice.h). With an exploration interval of 0 the two paths take
// turns, so every collective's sweep runs on both and must match the same
// checks; and the two paths give the same bits for every reduction at 2
// ranks, which is what lets the choice change from call to call.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "coll_checks.h"
#include "direct_test_env.h"

using namespace plait_test;

namespace {

struct Item {
  const char* name;  // as the library logs it, with a leading space
  SweepSpec spec;
  CheckFn check;
};

SweepSpec spec(const char* coll, bool rooted, bool reduction, std::vector<int> variants = {0, 1}) {
  SweepSpec s = reducedSpec(coll, rooted, reduction, std::move(variants));
  if (reduction) s.ops = {ncclSum, ncclMax, ncclAvg};
  s.types = {ncclFloat16, ncclFloat32, ncclInt32};
  s.counts = {4099, 70001};
  return s;
}

}  // namespace

TEST_CASE("Unregistered calls between processes alternate between the FIFOs and cross-memory attach, correctly",
          "[registered][process][cma][adapt]") {
  setenv("PLAIT_DIRECT_CMA_EXPLORE_MS", "0", 1);
  DirectTestEnv env("1", /*adapt=*/true);
  const std::vector<Item> list = {
      {" Broadcast", spec("ncclBroadcast", true, false), coll_data::checkBroadcast},
      {" AllGather", spec("ncclAllGather", false, false), coll_data::checkAllGather},
      {" Gather", spec("ncclGather", true, false), coll_data::checkGather},
      {" Scatter", spec("ncclScatter", true, false), coll_data::checkScatter},
      {" AlltoAll", spec("ncclAlltoAll", false, false, {0}), coll_data::checkAlltoAll},
      {" Reduce", spec("ncclReduce", true, true), coll_reduce::checkReduce},
      {" ReduceScatter", spec("ncclReduceScatter", false, true), coll_reduce::checkReduceScatter},
  };
  auto failures = runProcessesChecked(2, [&](int rank, ncclComm_t comm) {
    // Three passes: a rooted call is chosen by its root, each size class
    // runs the static rule's path twice and the other twice before the two
    // take turns.
    std::string first;
    for (int pass = 0; pass < 3; ++pass)
      for (const Item& item : list) {
        std::string err = sweep(rank, 2, comm, item.spec, item.check);
        if (first.empty()) first = err;
      }
    return first;
  });
  unsetenv("PLAIT_DIRECT_CMA_EXPLORE_MS");
  for (auto& f : failures) FAIL_CHECK(f);
  for (const Item& item : list) {
    INFO(item.name);
    CHECK(env.count(item.name, true) > 0);
    CHECK(env.count(item.name, false) > 0);
  }
}

namespace {

// Inputs with the values that tell reduction orders apart: infinities, a NaN
// on one rank, zeros of both signs (not for max/min, whose choice between
// -0 and +0 is unspecified), and for 16-bit types raw bit patterns.
std::vector<unsigned char> inputs(ncclDataType_t t, ncclRedOp_t op, size_t count, int rank) {
  std::mt19937_64 gen(1234 + 77 * rank + 13 * static_cast<int>(t) + static_cast<int>(op));
  std::uniform_real_distribution<double> value(-3.0, 3.0);
  const size_t elem = sizeOf(t);
  std::vector<unsigned char> out(count * elem);
  const bool minMax = op == ncclMax || op == ncclMin;
  for (size_t i = 0; i < count; ++i) {
    double v = value(gen);
    if (i % 97 == 5) v = rank == 0 ? INFINITY : 1.5;
    if (i % 101 == 7) v = rank == 0 ? NAN : -2.0;
    if (!minMax && i % 89 == 3) v = rank == 0 ? -0.0 : 0.0;
    unsigned char* at = out.data() + i * elem;
    if (t == ncclFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
    } else if (t == ncclFloat64) {
      std::memcpy(at, &v, 8);
    } else if (t == ncclBfloat16) {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const uint16_t b = static_cast<uint16_t>(bits >> 16);
      std::memcpy(at, &b, 2);
    } else {  // float16: sign, exponent 13..17 (about 0.002 to 8), random mantissa; inf and NaN as above
      uint16_t h = static_cast<uint16_t>((gen() & 0x8000) | ((13 + gen() % 5) << 10) | (gen() & 0x3ff));
      if (std::isinf(v)) h = 0x7c00;
      if (std::isnan(v)) h = 0x7e00;
      if (v == 0.0) h = std::signbit(v) ? 0x8000 : 0;
      std::memcpy(at, &h, 2);
    }
  }
  return out;
}

// Every reduction of every floating type and op at 2 ranks on this rank,
// its outputs appended to `file`.
std::string reduceAll(int rank, ncclComm_t comm, const std::string& file) {
  std::ofstream out(file, std::ios::binary);
  const size_t count = 70001;  // several 64 KiB chunks, and a tail
  for (ncclDataType_t t : {ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64}) {
    for (ncclRedOp_t base : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclNumOps}) {
      const bool preMul = base == ncclNumOps;
      if (preMul && t != ncclFloat32 && t != ncclFloat64) continue;
      ncclRedOp_t op = base;
      if (preMul) {  // a different scalar on each rank
        const double d = 0.75 + 0.5 * rank;
        const float f = static_cast<float>(d);
        const void* scalar = t == ncclFloat64 ? static_cast<const void*>(&d) : &f;
        if (ncclRedOpCreatePreMulSum(&op, const_cast<void*>(scalar), t, ncclScalarHostImmediate, comm) != ncclSuccess)
          return std::string("ncclRedOpCreatePreMulSum: ") + ncclGetLastError(comm);
      }
      const std::vector<unsigned char> in = inputs(t, preMul ? ncclSum : base, 2 * count, rank);
      std::vector<unsigned char> res(in.size());
      const size_t elem = sizeOf(t);
      if (ncclAllReduce(in.data(), res.data(), 2 * count, t, op, comm, nullptr) != ncclSuccess)
        return std::string("ncclAllReduce: ") + ncclGetLastError(comm);
      out.write(reinterpret_cast<const char*>(res.data()), static_cast<std::streamsize>(res.size()));
      for (int root : {0, 1}) {
        std::fill(res.begin(), res.end(), 0);
        if (ncclReduce(in.data(), res.data(), 2 * count, t, op, root, comm, nullptr) != ncclSuccess)
          return std::string("ncclReduce: ") + ncclGetLastError(comm);
        if (rank == root) out.write(reinterpret_cast<const char*>(res.data()), static_cast<std::streamsize>(res.size()));
      }
      std::fill(res.begin(), res.end(), 0);
      if (ncclReduceScatter(in.data(), res.data(), count, t, op, comm, nullptr) != ncclSuccess)
        return std::string("ncclReduceScatter: ") + ncclGetLastError(comm);
      out.write(reinterpret_cast<const char*>(res.data()), static_cast<std::streamsize>(count * elem));
      if (preMul) ncclRedOpDestroy(op, comm);
    }
  }
  return out ? "" : "could not write " + file;
}

std::string slurp(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("At 2 ranks the FIFOs and cross-memory attach reduce to the same bits", "[registered][process][cma][adapt]") {
  const std::string base = "/tmp/plait-test-bits-" + std::to_string(getpid());
  for (bool cma : {false, true}) {
    INFO((cma ? "cross-memory attach" : "FIFOs"));
    // The static rule, either way: from 1 byte, or never.
    setenv("PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES", cma ? "0" : "4611686018427387904", 1);
    DirectTestEnv env("1", /*adapt=*/false);
    auto failures = runProcessesChecked(2, [&](int rank, ncclComm_t comm) {
      return reduceAll(rank, comm, base + (cma ? ".cma." : ".fifo.") + std::to_string(rank));
    });
    unsetenv("PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES");
    for (auto& f : failures) FAIL_CHECK(f);
    CHECK((env.count(" AllReduce", true) > 0) == cma);
    CHECK((env.count(" Reduce", true) > 0) == cma);
    CHECK((env.count(" ReduceScatter", true) > 0) == cma);
  }
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    const std::string fifo = slurp(base + ".fifo." + std::to_string(rank));
    const std::string cma = slurp(base + ".cma." + std::to_string(rank));
    CHECK(fifo.size() > 1000000);
    CHECK(fifo.size() == cma.size());
    size_t firstDiff = 0;
    while (firstDiff < std::min(fifo.size(), cma.size()) && fifo[firstDiff] == cma[firstDiff]) ++firstDiff;
    INFO("first differing byte " << firstDiff);
    CHECK(fifo == cma);
    std::remove((base + ".fifo." + std::to_string(rank)).c_str());
    std::remove((base + ".cma." + std::to_string(rank)).c_str());
  }
}
