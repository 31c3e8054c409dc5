// tools/perf/common.h — the shared harness of Plait's nccl-tests–compatible
// benchmarks (all_reduce_perf and friends).
//
// Each tool is one small file that describes its collective as a CollSpec
// (buffer sizes, the call, the expected result, the bus-bandwidth factor) and
// hands it to runPerfTool(). The harness owns everything else: nccl-tests'
// flags, rank detection (plait-run, mpirun, standalone), communicators, one
// thread per -t with -g ranks each, buffers, timing, the #wrong check against
// an independent reference, the table, the footer and the JSON file.
//
// The tools use only the public C API (nccl.h) and include/plait/*.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace plait::perf {

// ---- Types and operations -----------------------------------------------------

// Name used by nccl-tests in the table and on the command line ("float",
// "bfloat16", "f8e4m3", ...), or "?" for an unknown type.
const char* typeName(ncclDataType_t type);
size_t typeSize(ncclDataType_t type);
bool isFloatingType(ncclDataType_t type);
// Writes v (exactly representable, or rounded to nearest) as one element.
void encodeValue(ncclDataType_t type, double v, void* dst);
// Reads one element as a double (NaN and infinities included).
double decodeValue(ncclDataType_t type, const void* src);

// The ops nccl-tests knows; kMulSum is ncclRedOpCreatePreMulSum with a host
// scalar (2), created per communicator by the harness.
enum class TestOp { kSum, kProd, kMax, kMin, kAvg, kMulSum, kNone };
const char* opName(TestOp op);

// ---- Reference values ---------------------------------------------------------

// The deterministic input pattern: rank r's input element i holds
// value(r, i mod kPatternPeriod). Values are small integers chosen so every
// partial and final result of the op over nranks is exactly representable in
// the type (avg on floating types is the one inexact case: it is checked
// with a tolerance). A prime period makes misplaced chunks visible.
inline constexpr size_t kPatternPeriod = 1009;

// One period of encoded elements plus their exact values.
struct PatternTable {
  ncclDataType_t type = ncclFloat32;
  std::vector<uint8_t> bytes;   // kPatternPeriod * typeSize(type)
  std::vector<double> values;   // the same elements as doubles
  double tolerance = 0;         // relative; 0 means exact
};

// The input of `rank` for `op` on nranks ranks.
PatternTable rankPattern(ncclDataType_t type, TestOp op, int rank, int nranks);
// What the reduction of every rank's rankPattern gives, computed here in
// double precision without the library.
PatternTable reducedPattern(ncclDataType_t type, TestOp op, int nranks);

// Writes count elements of `table` starting at pattern index `phase`.
void fillPattern(void* dst, size_t count, const PatternTable& table, size_t phase);
// Counts elements of `data` that differ from `table` from index `phase` on.
size_t countWrong(const void* data, size_t count, const PatternTable& table, size_t phase);

// The expected content of part of an output buffer: `count` elements at
// element offset `offset` hold `table` from pattern index `phase` on.
struct ExpectedSegment {
  size_t offset = 0;
  size_t count = 0;
  const PatternTable* table = nullptr;
  size_t phase = 0;
};

// ---- Collective description ---------------------------------------------------

// Element counts for one size step; offsets place the in-place input inside
// the output buffer (nccl-tests' getCollByteCount).
struct CollSizes {
  size_t sendCount = 0;
  size_t recvCount = 0;
  size_t paramCount = 0;        // the count argument of the NCCL call
  size_t sendInplaceOffset = 0; // elements from recvbuff where in-place input lives
  size_t recvInplaceOffset = 0; // elements from recvbuff where in-place output lives
};

// Everything one call needs.
struct CollCall {
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  ncclComm_t comm = nullptr;
};

// What the checker needs to know about one rank's expected output.
struct ExpectContext {
  int rank = 0;
  int nranks = 1;
  int root = 0;
  CollSizes sizes;
  const std::vector<PatternTable>* inputs = nullptr;  // rankPattern of every rank
  const PatternTable* reduced = nullptr;              // reducedPattern (reducing ops)
};

struct CollSpec {
  const char* name;      // "AllReduce": used in messages and JSON
  const char* ncclCall;  // "ncclAllReduce": used in error messages
  bool hasOp;            // false: the redop column says "none"
  bool hasRoot;          // false: the root column says -1
  double (*busFactor)(int nranks);
  CollSizes (*sizes)(size_t count, int nranks, int rank);
  ncclResult_t (*call)(const CollCall& call);
  // Appends the segments of rank ctx.rank's output that must hold known
  // values (element offsets relative to the output pointer).
  void (*expect)(const ExpectContext& ctx, std::vector<ExpectedSegment>& out);
};

// Parses nccl-tests' flags, runs the benchmark and returns the exit code:
// 0 when every call succeeded and #wrong is 0 everywhere, non-zero otherwise.
int runPerfTool(const CollSpec& spec, int argc, char** argv);

}  // namespace plait::perf
