// perf/common/peer_reference.h — buffer sizes and expected results for the
// peer benchmarks (Open MPI, Gloo), in nccl-tests' conventions: count is
// bytes / 4 (float32), per-rank blocks are count / nranks, and the printed
// size is the larger of the send and receive buffers.
//
// Inputs are small integers (exact in float), so #wrong is an exact compare.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdlib>

namespace plait::perf::peer {

// "64", "4K", "1.5M", "2G" as bytes (powers of 1024), for -b / -e.
inline size_t parseBytes(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024.0;
  if (*end == 'M' || *end == 'm') v *= 1024.0 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAlltoAll, kGather, kScatter };

// Element counts for one size step.
struct Counts {
  size_t send, recv, param;  // param: the per-call count (per rank block where blocked)
};

inline Counts countsFor(Coll c, size_t count, int n) {
  size_t base = count / n;
  switch (c) {
    case Coll::kAllGather: case Coll::kGather: return {base, base * n, base};
    case Coll::kReduceScatter: case Coll::kScatter: return {base * n, base, base};
    case Coll::kAlltoAll: return {base * n, base * n, base};
    default: return {count, count, count};
  }
}

inline bool isReduction(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }
inline bool isRooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

inline float inputValue(int rank, size_t i) { return static_cast<float>((i * 7 + rank * 13 + 3) % 17); }

// Element i of `rank`'s output (sum for reductions), NaN where undefined.
inline float expectedValue(Coll c, int root, int rank, int n, Counts k, size_t i) {
  auto sum = [n](size_t j) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += inputValue(r, j);
    return s;
  };
  auto block = [k](size_t j) { return static_cast<int>(j / k.param); };
  switch (c) {
    case Coll::kAllReduce: return sum(i);
    case Coll::kReduce: return rank == root ? sum(i) : NAN;
    case Coll::kReduceScatter: return sum(rank * k.recv + i);
    case Coll::kBroadcast: return inputValue(root, i);
    case Coll::kAllGather: return inputValue(block(i), i % k.param);
    case Coll::kGather: return rank == root ? inputValue(block(i), i % k.param) : NAN;
    case Coll::kScatter: return inputValue(root, rank * k.recv + i);
    case Coll::kAlltoAll: return inputValue(block(i), rank * k.param + i % k.param);
  }
  return NAN;
}

// Wrong elements among the first `count` of `out` for `rank`.
inline long long countWrong(Coll c, int root, int rank, int n, Counts k, const float* out, size_t count) {
  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float e = expectedValue(c, root, rank, n, k, i);
    if (!std::isnan(e) && out[i] != e) ++wrong;
  }
  return wrong;
}

}  // namespace plait::perf::peer
