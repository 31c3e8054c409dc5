// The device emulator's runtime (emu/): a host program written against the
// toolkit's cuda_runtime_api.h, linked against libplait_cudart_emu instead
// of libcudart. Kernels come from emu_kernels.cu (emulated device code).
// Every expectation is computed independently on the host.
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "emu_kernels.h"

using namespace plait_emu_test;

namespace {

#define CUDA_OK(expr) REQUIRE((expr) == cudaSuccess)

template <class T>
T* deviceAlloc(size_t n) {
  T* p = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)));
  return p;
}

// Blocks a stream until release(): a host function that waits for a flag.
struct Gate {
  std::atomic<bool> open{false};
  static void wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    while (!g->open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void release() { open.store(true); }
};

}  // namespace

TEST_CASE("Devices: count, selection, attributes, bus ids", "[emu]") {
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  CHECK(n == 8);  // PLAIT_EMU_DEVICES unset in this test
  CUDA_OK(cudaSetDevice(3));
  int d = -1;
  CUDA_OK(cudaGetDevice(&d));
  CHECK(d == 3);
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading it resets it
  int khz = 0;
  CUDA_OK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 3));
  CHECK(khz == 1000000);
  char bus[32];
  CUDA_OK(cudaDeviceGetPCIBusId(bus, sizeof(bus), 3));
  CHECK(std::string(bus) == "0000:04:00.0");
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 3));
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(std::string(prop.name).find("emulated") != std::string::npos);
  CUDA_OK(cudaSetDevice(0));
}

TEST_CASE("Shared memory and barriers: a tree reduction per block", "[emu]") {
  for (unsigned threads : {1u, 2u, 64u, 256u, 1024u}) {
    CAPTURE(threads);
    const unsigned blocks = 5;
    std::vector<int> in(blocks * threads);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i * 7 % 101) - 50;
    int* dIn = deviceAlloc<int>(in.size());
    int* dOut = deviceAlloc<int>(blocks);
    CUDA_OK(cudaMemcpy(dIn, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
    void* args[] = {&dIn, &dOut};
    CUDA_OK(cudaLaunchKernel(blockSumKernel(), dim3(blocks), dim3(threads), args, 0, nullptr));
    std::vector<int> out(blocks, -1);
    CUDA_OK(cudaMemcpy(out.data(), dOut, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (unsigned b = 0; b < blocks; ++b)
      CHECK(out[b] == std::accumulate(in.begin() + b * threads, in.begin() + (b + 1) * threads, 0));
    CUDA_OK(cudaFree(dIn));
    CUDA_OK(cudaFree(dOut));
  }
}

TEST_CASE("A grid larger than the resident-block limit runs in waves", "[emu]") {
  const unsigned blocks = 700, threads = 2;
  std::vector<int> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  int* dIn = deviceAlloc<int>(in.size());
  int* dOut = deviceAlloc<int>(blocks);
  CUDA_OK(cudaMemcpy(dIn, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
  void* args[] = {&dIn, &dOut};
  CUDA_OK(cudaLaunchKernel(blockSumKernel(), dim3(blocks), dim3(threads), args, 0, nullptr));
  std::vector<int> out(blocks);
  CUDA_OK(cudaMemcpy(out.data(), dOut, blocks * sizeof(int), cudaMemcpyDeviceToHost));
  for (unsigned b = 0; b < blocks; ++b) REQUIRE(out[b] == static_cast<int>(4 * b + 1));
  CUDA_OK(cudaFree(dIn));
  CUDA_OK(cudaFree(dOut));
}

TEST_CASE("threadIdx and blockIdx cover 3-D blocks exactly once", "[emu]") {
  const dim3 block(4, 3, 2);
  const unsigned blocks = 3, per = 4 * 3 * 2;
  unsigned* d = deviceAlloc<unsigned>(blocks * per);
  CUDA_OK(cudaMemset(d, 0xff, blocks * per * sizeof(unsigned)));
  void* args[] = {&d};
  CUDA_OK(cudaLaunchKernel(coordinatesKernel(), dim3(blocks), block, args, 0, nullptr));
  std::vector<unsigned> out(blocks * per);
  CUDA_OK(cudaMemcpy(out.data(), d, out.size() * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned z = 0; z < 2; ++z)
      for (unsigned y = 0; y < 3; ++y)
        for (unsigned x = 0; x < 4; ++x)
          CHECK(out[b * per + (z * 3 + y) * 4 + x] == b * 1000000 + z * 10000 + y * 100 + x);
  CUDA_OK(cudaFree(d));
}

TEST_CASE("Streams run in order; arguments are copied at launch", "[emu]") {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 1000;
  std::vector<int> host(n);
  std::iota(host.begin(), host.end(), 0);
  int* dIn = deviceAlloc<int>(n);
  int* dOut = deviceAlloc<int>(n);
  Gate gate;
  CUDA_OK(cudaLaunchHostFunc(s, &Gate::wait, &gate));
  CUDA_OK(cudaMemcpyAsync(dIn, host.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
  Scale scale{3, 7};
  int count = n;
  void* args[] = {&dIn, &dOut, &scale, &count};
  CUDA_OK(cudaLaunchKernel(scaledKernel(), dim3((n + 127) / 128), dim3(128), args, 0, s));
  scale = Scale{100, 100};  // after the launch: the kernel must not see this
  std::vector<int> out(n, -1);
  CUDA_OK(cudaMemcpyAsync(out.data(), dOut, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamQuery(s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);  // "not ready" is not an error
  CHECK(out[5] == -1);  // nothing ran past the gate
  gate.release();
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  for (int i = 0; i < n; ++i) REQUIRE(out[i] == i * 3 + 7);
  CUDA_OK(cudaFree(dIn));
  CUDA_OK(cudaFree(dOut));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("Stream capture records work into a graph that replays it", "[emu]") {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 300;
  std::vector<int> in(n, 1), out(n, -1);
  int* dIn = deviceAlloc<int>(n);
  int* dOut = deviceAlloc<int>(n);
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_OK(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  CUDA_OK(cudaMemcpyAsync(dIn, in.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
  Scale scale{2, 1};
  int count = n;
  void* args[] = {&dIn, &dOut, &scale, &count};
  CUDA_OK(cudaLaunchKernel(scaledKernel(), dim3(3), dim3(128), args, 0, s));
  CUDA_OK(cudaMemcpyAsync(out.data(), dOut, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  cudaGraph_t graph;
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  CUDA_OK(cudaStreamIsCapturing(s, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(out[0] == -1);  // captured, not run
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 1; replay <= 3; ++replay) {
    std::fill(in.begin(), in.end(), replay * 10);  // the copies read the buffers when they run
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) REQUIRE(out[i] == replay * 10 * 2 + 1);
  }
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFree(dIn));
  CUDA_OK(cudaFree(dOut));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("Events: query, synchronize, elapsed time, cross-stream waits", "[emu]") {
  cudaStream_t a, b;
  CUDA_OK(cudaStreamCreate(&a));
  CUDA_OK(cudaStreamCreate(&b));
  cudaEvent_t start, done;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&done));
  CHECK(cudaEventQuery(done) == cudaSuccess);  // never recorded
  Gate gate;
  std::mutex mu;
  std::vector<char> order;
  struct Note {
    std::mutex* mu;
    std::vector<char>* order;
    char what;
    static void run(void* self) {
      auto* n = static_cast<Note*>(self);
      std::lock_guard<std::mutex> lock(*n->mu);
      n->order->push_back(n->what);
    }
  };
  Note noteA{&mu, &order, 'a'}, noteB{&mu, &order, 'b'};
  CUDA_OK(cudaEventRecord(start, a));
  CUDA_OK(cudaLaunchHostFunc(a, &Gate::wait, &gate));
  CUDA_OK(cudaLaunchHostFunc(a, &Note::run, &noteA));
  CUDA_OK(cudaEventRecord(done, a));
  CUDA_OK(cudaStreamWaitEvent(b, done, 0));
  CUDA_OK(cudaLaunchHostFunc(b, &Note::run, &noteB));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cudaEventQuery(done) == cudaErrorNotReady);
  CHECK(cudaStreamQuery(b) == cudaErrorNotReady);  // b waits for a's event
  gate.release();
  CUDA_OK(cudaEventSynchronize(done));
  CUDA_OK(cudaStreamSynchronize(b));
  REQUIRE(order.size() == 2);
  CHECK(order[0] == 'a');
  CHECK(order[1] == 'b');
  float ms = -1;
  CUDA_OK(cudaEventElapsedTime(&ms, start, done));
  CHECK(ms >= 15.0f);  // the gate held a for at least 20 ms
  CUDA_OK(cudaEventDestroy(start));
  CUDA_OK(cudaEventDestroy(done));
  CUDA_OK(cudaStreamDestroy(a));
  CUDA_OK(cudaStreamDestroy(b));
}

TEST_CASE("Pointer attributes tell device, host, registered and plain memory apart", "[emu]") {
  CUDA_OK(cudaSetDevice(2));
  int* dev = deviceAlloc<int>(16);
  void* pinned = nullptr;
  CUDA_OK(cudaHostAlloc(&pinned, 4096, cudaHostAllocMapped));
  std::vector<char> plain(4096), registered(4096);
  CUDA_OK(cudaHostRegister(registered.data(), registered.size(), cudaHostRegisterMapped));
  cudaPointerAttributes at;
  CUDA_OK(cudaPointerGetAttributes(&at, dev + 3));
  CHECK(at.type == cudaMemoryTypeDevice);
  CHECK(at.device == 2);
  CUDA_OK(cudaPointerGetAttributes(&at, pinned));
  CHECK(at.type == cudaMemoryTypeHost);
  CUDA_OK(cudaPointerGetAttributes(&at, registered.data() + 100));
  CHECK(at.type == cudaMemoryTypeHost);
  CUDA_OK(cudaPointerGetAttributes(&at, plain.data()));
  CHECK(at.type == cudaMemoryTypeUnregistered);
  void* mapped = nullptr;
  CUDA_OK(cudaHostGetDevicePointer(&mapped, pinned, 0));
  CHECK(mapped == pinned);
  CHECK(cudaHostGetDevicePointer(&mapped, plain.data(), 0) == cudaErrorInvalidValue);
  CUDA_OK(cudaHostUnregister(registered.data()));
  CHECK(cudaHostUnregister(registered.data()) == cudaErrorHostMemoryNotRegistered);
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(dev));
  CHECK(cudaFree(dev) == cudaErrorInvalidValue);  // twice
  CUDA_OK(cudaSetDevice(0));
  (void)cudaGetLastError();
}

TEST_CASE("Bad launches are errors, not crashes", "[emu]") {
  int* d = deviceAlloc<int>(4);
  void* args[] = {&d};
  CHECK(cudaLaunchKernel(coordinatesKernel(), dim3(1), dim3(2048), args, 0, nullptr) == cudaErrorInvalidConfiguration);
  CHECK(cudaLaunchKernel(coordinatesKernel(), dim3(0), dim3(32), args, 0, nullptr) == cudaErrorInvalidConfiguration);
  int notAKernel = 0;
  CHECK(cudaLaunchKernel(&notAKernel, dim3(1), dim3(1), args, 0, nullptr) == cudaErrorInvalidDeviceFunction);
  cudaFuncAttributes fa;
  CHECK(cudaFuncGetAttributes(&fa, &notAKernel) == cudaErrorInvalidDeviceFunction);
  CUDA_OK(cudaFuncGetAttributes(&fa, coordinatesKernel()));
  CHECK(fa.maxThreadsPerBlock == 1024);
  CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(&notAKernel)) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CUDA_OK(cudaFree(d));
}

TEST_CASE("IPC handles map the same device memory in another process", "[emu][process]") {
  const int n = 4096;
  int* d = deviceAlloc<int>(n);
  std::vector<int> pattern(n);
  std::iota(pattern.begin(), pattern.end(), 1);
  CUDA_OK(cudaMemcpy(d, pattern.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t handle;
  CUDA_OK(cudaIpcGetMemHandle(&handle, d));
  void* self = nullptr;
  CHECK(cudaIpcOpenMemHandle(&self, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess);  // own handle
  pid_t pid = fork();
  if (pid == 0) {
    // The child uses the runtime afresh (streams made in the parent are not
    // carried over a fork) and doubles every element in place.
    void* mapped = nullptr;
    if (cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) _exit(2);
    std::vector<int> v(n);
    if (cudaMemcpy(v.data(), mapped, n * sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) _exit(3);
    for (int& x : v) x *= 2;
    if (cudaMemcpy(mapped, v.data(), n * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess) _exit(4);
    if (cudaIpcCloseMemHandle(mapped) != cudaSuccess) _exit(5);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::vector<int> back(n);
  CUDA_OK(cudaMemcpy(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) REQUIRE(back[i] == 2 * (i + 1));
  CUDA_OK(cudaFree(d));
}
