// bench_reduce — throughput of the host reduce-copy kernels against memcpy,
// per element type, for buffers that live in L2, in L3 and in DRAM.
//
// "reduce" is the 2-source case dst = src0 + src1 (the fused receive of a
// ring all-reduce); "reduce_nt" the same with streaming stores; "memcpy" and
// "copy_nt" are the references measured in the same run. Throughput is
// reported as bytes_per_second of memory traffic: 3 x buffer bytes per call
// for a 2-source reduce (2 reads, 1 write), 2 x for a copy, so the numbers
// compare directly with the machine's memory bandwidth. Quote medians and
// ratios to memcpy (run with --benchmark_repetitions=5
// --benchmark_report_aggregates_only=true).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/reduce.h"

namespace {

struct SizeClass {
  const char* name;
  size_t bytesPerBuffer;
};
// Three buffers each: L2 is 1 MiB per core here, L3 32 MiB shared.
constexpr SizeClass kSizes[] = {{"L2", 128 << 10}, {"L3", 4 << 20}, {"DRAM", 128 << 20}};

struct Buffers {
  explicit Buffers(size_t bytes) : size(bytes) {
    for (void*& p : ptr) {
      p = std::aligned_alloc(64, bytes);
      std::memset(p, 0x3c, bytes);  // a small positive value in every type
    }
  }
  ~Buffers() {
    for (void* p : ptr) std::free(p);
  }
  size_t size;
  void* ptr[3];
};

void benchReduce(benchmark::State& state, ncclDataType_t type, size_t bytes, bool nonTemporal) {
  Buffers buf(bytes);
  plait::RedOp op;
  plait::makeRedOp(type, ncclSum, 2, &op);
  const plait::ReduceCopyFn fn = plait::reduceCopyFn(type, op.kind);
  plait::ReduceCopyArgs args;
  args.nSrcs = 2;
  args.srcs[0] = buf.ptr[0];
  args.srcs[1] = buf.ptr[1];
  args.dsts[0] = buf.ptr[2];
  args.count = bytes / plait::typeSize(type);
  args.nonTemporal = nonTemporal;
  for (auto _ : state) {
    fn(op, args);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * static_cast<int64_t>(bytes));
  state.SetLabel(plait::reduceKernelIsa());
}

void benchMemcpy(benchmark::State& state, size_t bytes, bool nonTemporal) {
  Buffers buf(bytes);
  // A 1-source copy through the kernel entry is memcpy, or the streaming copy.
  const plait::ReduceCopyFn fn = plait::reduceCopyFn(ncclUint8, plait::RedOpKind::kSum);
  plait::ReduceCopyArgs args;
  args.srcs[0] = buf.ptr[0];
  args.dsts[0] = buf.ptr[2];
  args.count = bytes;
  args.nonTemporal = nonTemporal;
  for (auto _ : state) {
    if (nonTemporal) {
      fn(plait::RedOp{}, args);
    } else {
      std::memcpy(buf.ptr[2], buf.ptr[0], bytes);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}

void registerAll() {
  const ncclDataType_t types[] = {ncclFloat,   ncclHalf,  ncclBfloat16, ncclFloat8e4m3,
                                  ncclFloat8e5m2, ncclDouble, ncclInt32, ncclInt8};
  for (const SizeClass& size : kSizes) {
    const std::string suffix = std::string("/") + size.name;
    benchmark::RegisterBenchmark(("memcpy" + suffix).c_str(), benchMemcpy, size.bytesPerBuffer, false)
        ->UseRealTime();
    if (size.bytesPerBuffer >= (1 << 20))
      benchmark::RegisterBenchmark(("copy_nt" + suffix).c_str(), benchMemcpy, size.bytesPerBuffer, true)
          ->UseRealTime();
    for (ncclDataType_t t : types) {
      const std::string name = std::string(plait::typeName(t)) + suffix;
      benchmark::RegisterBenchmark(("reduce/" + name).c_str(), benchReduce, t, size.bytesPerBuffer, false)
          ->UseRealTime();
      if (size.bytesPerBuffer >= (1 << 20))
        benchmark::RegisterBenchmark(("reduce_nt/" + name).c_str(), benchReduce, t, size.bytesPerBuffer,
                                     true)
            ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
