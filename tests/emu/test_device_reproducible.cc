// The reproducible mode on CUDA device buffers (PLAIT_REPRODUCIBLE, issue 15
// item 8): AllReduce, Reduce and ReduceScatter of floating types give, on
// device buffers on a stream, exactly the bits the same call gives on host
// buffers (which tests/api/test_reproducible.cc holds against an independent
// fold), in place too, with a PreMulSum scalar in device memory, for both
// modes; a stream being captured into a graph is refused by name.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/direct_test_env.h"
#include "device_ranks.h"
#include "nccl.h"

namespace {

enum Coll { kAllReduce, kReduce, kReduceScatter };

std::vector<float> inputOf(int rank, size_t count) {
  std::mt19937 rng(500 + rank);
  std::uniform_real_distribution<float> unit(-1, 1);
  std::uniform_int_distribution<int> exp(-10, 10);
  std::vector<float> v(count);
  for (float& x : v) x = std::ldexp(unit(rng), exp(rng));
  return v;
}

ncclResult_t call(Coll coll, const void* in, void* out, size_t count, ncclRedOp_t op, ncclComm_t comm,
                  cudaStream_t stream) {
  switch (coll) {
    case kAllReduce: return ncclAllReduce(in, out, count, ncclFloat32, op, comm, stream);
    case kReduce: return ncclReduce(in, out, count, ncclFloat32, op, 0, comm, stream);
    default: return ncclReduceScatter(in, out, count, ncclFloat32, op, comm, stream);
  }
}

// One call on host buffers and the same on device buffers; "" if the bits agree.
std::string compare(int rank, int nranks, ncclComm_t comm, cudaStream_t stream, Coll coll, size_t count,
                    bool inPlace, bool deviceScalar) {
  const size_t total = coll == kReduceScatter ? count * nranks : count;
  const std::vector<float> input = inputOf(rank, total);
  const size_t outAt = inPlace && coll == kReduceScatter ? rank * count : 0;
  // Host: the reference bits.
  std::vector<float> hostIn = input, hostOut(total, -1.0f);
  float* hostDst = inPlace ? hostIn.data() + outAt : hostOut.data();
  float scalar = rank % 2 == 0 ? 0.75f : 1.5f;
  ncclRedOp_t hostOp = ncclSum;
  if (deviceScalar && ncclRedOpCreatePreMulSum(&hostOp, &scalar, ncclFloat32, ncclScalarHostImmediate, comm) != ncclSuccess)
    return std::string("PreMulSum: ") + ncclGetLastError(comm);
  if (call(coll, hostIn.data(), hostDst, count, hostOp, comm, nullptr) != ncclSuccess)
    return std::string("host call: ") + ncclGetLastError(comm);
  // Device, with the scalar in device memory.
  float *devIn = nullptr, *devOut = nullptr, *devScalar = nullptr;
  if (cudaMalloc(&devIn, total * 4) != cudaSuccess || cudaMalloc(&devOut, total * 4) != cudaSuccess ||
      cudaMalloc(&devScalar, 4) != cudaSuccess)
    return "cudaMalloc failed";
  cudaMemcpy(devIn, input.data(), total * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(devScalar, &scalar, 4, cudaMemcpyHostToDevice);
  cudaMemset(devOut, 0, total * 4);
  ncclRedOp_t devOp = ncclSum;
  if (deviceScalar && ncclRedOpCreatePreMulSum(&devOp, devScalar, ncclFloat32, ncclScalarDevice, comm) != ncclSuccess)
    return std::string("PreMulSum (device scalar): ") + ncclGetLastError(comm);
  float* devDst = inPlace ? devIn + outAt : devOut;
  std::string failure;
  if (call(coll, devIn, devDst, count, devOp, comm, stream) != ncclSuccess)
    failure = std::string("device call: ") + ncclGetLastError(comm);
  std::vector<float> got(count);
  if (failure.empty() && (cudaStreamSynchronize(stream) != cudaSuccess ||
                          cudaMemcpy(got.data(), devDst, count * 4, cudaMemcpyDeviceToHost) != cudaSuccess))
    failure = "copying the result back failed";
  const bool hasResult = coll != kReduce || rank == 0;
  if (failure.empty() && hasResult && std::memcmp(got.data(), hostDst, count * 4) != 0) {
    size_t bad = 0;
    while (std::memcmp(&got[bad], &hostDst[bad], 4) == 0) ++bad;
    failure = plait_test::mismatch("device", bad, got[bad], hostDst[bad]) + " (the host call's bits)";
  }
  if (deviceScalar) {
    ncclRedOpDestroy(hostOp, comm);
    ncclRedOpDestroy(devOp, comm);
  }
  cudaFree(devIn);
  cudaFree(devOut);
  cudaFree(devScalar);
  if (failure.empty()) return "";
  static const char* names[] = {"AllReduce", "Reduce", "ReduceScatter"};
  return std::string(names[coll]) + " count " + std::to_string(count) + (inPlace ? " in place" : "") +
         (deviceScalar ? " PreMulSum" : "") + ": " + failure;
}

void checkMode(const char* mode) {
  setenv("PLAIT_REPRODUCIBLE", mode, 1);
  plait_test::resetLibrarySettings();
  const auto failed = plait_test::runDeviceRanks(3, [](int rank, ncclComm_t comm, cudaStream_t stream) {
    for (Coll coll : {kAllReduce, kReduce, kReduceScatter})
      for (size_t count : {size_t(37), size_t(6007)})
        for (bool inPlace : {false, true})
          for (bool deviceScalar : {false, true}) {
            std::string e = compare(rank, 3, comm, stream, coll, count, inPlace, deviceScalar);
            if (!e.empty()) return e;
          }
    return std::string();
  });
  unsetenv("PLAIT_REPRODUCIBLE");
  plait_test::resetLibrarySettings();
  for (const std::string& f : failed) FAIL_CHECK(f);
}

}  // namespace

TEST_CASE("device buffers give the host's bits in the rank-order mode", "[reproducible]") { checkMode("1"); }

TEST_CASE("device buffers give the host's bits in the exact mode", "[reproducible]") { checkMode("2"); }

TEST_CASE("a reproducible reduction on a stream being captured is refused by name", "[reproducible]") {
  setenv("PLAIT_REPRODUCIBLE", "1", 1);
  plait_test::resetLibrarySettings();
  const auto failed = plait_test::runDeviceRanks(1, [](int, ncclComm_t comm, cudaStream_t stream) {
    float* buf = plait_test::deviceAlloc<float>(16);
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    const ncclResult_t r = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaFree(buf);
    const std::string why = ncclGetLastError(comm);
    if (r != ncclInvalidUsage || why.find("cannot be captured") == std::string::npos)
      return "got " + std::to_string(r) + ": " + why;
    return std::string();
  });
  unsetenv("PLAIT_REPRODUCIBLE");
  plait_test::resetLibrarySettings();
  for (const std::string& f : failed) FAIL_CHECK(f);
}
