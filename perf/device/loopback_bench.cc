// loopback_bench — the ring AllReduce kernel's throughput on one real GPU.
//
// Every rank of a ring runs on the same GPU (one non-blocking stream each,
// the FIFOs in device memory), so the number is the kernel's own efficiency
// against the GPU's memory, with no link in the way: what a kernel can reach,
// not what a multi-GPU AllReduce over NVLink or PCIe would. Never run it on
// the device emulator and call the result GPU performance.
//
// Counted traffic: a ring AllReduce of S bytes over n ranks moves, per rank,
// S/n × (6n − 4) bytes through device memory (reduce-scatter: read input and
// FIFO, write FIFO; all-gather: read FIFO, write output and FIFO), so
// S × (6n − 4) in all; "HBM GB/s" is that over the time, the column to hold
// against a device-to-device cudaMemcpy's 2S / t measured in the same run.
//
// Usage: loopback_bench [MiB=256] [iterations=10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime_api.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_work.h"
#include "algorithms/reduce.h"
#include "transport/fifo.h"

namespace {

using plait::DeviceFifo;
using plait::DeviceWork;

#define BENCH_CUDA(call)                                                                     \
  do {                                                                                       \
    const cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

// Median seconds of one device-to-device copy of `bytes`.
double memcpySeconds(size_t bytes, int iterations) {
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemset(a, 1, bytes));
  std::vector<double> t;
  for (int i = 0; i < iterations + 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr));
    BENCH_CUDA(cudaStreamSynchronize(nullptr));
    if (i >= 2) t.push_back(seconds(start));
  }
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  return medianOf(t);
}

struct Config {
  int nranks, nChannels;
  size_t sliceBytes;
};

// Whether nranks × nChannels blocks fit on the GPU at once: every block of
// the loopback ring waits on another, so one left unscheduled would wait for
// ever (on real GPUs each rank has its own SMs).
bool coResident(const Config& cfg) {
  int perSm = 0, sms = 0;
  BENCH_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, plait::allReduceKernelFor(ncclFloat32),
                                                           plait::kDeviceThreads, 0));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return cfg.nranks * cfg.nChannels <= perSm * sms;
}

// Median seconds of one float-sum AllReduce of `count` elements, all ranks
// launched and then all streams waited for (the slowest rank's end).
double allReduceSeconds(const Config& cfg, size_t count, int iterations) {
  const int n = cfg.nranks;
  const plait::FifoShape shape{8, cfg.sliceBytes};
  std::vector<float*> send(n), recv(n);
  std::vector<char*> fifos(static_cast<size_t>(n) * cfg.nChannels);
  std::vector<cudaStream_t> streams(n);
  uint32_t* status = nullptr;
  BENCH_CUDA(cudaMalloc(&status, fifos.size() * sizeof(uint32_t)));
  BENCH_CUDA(cudaMemset(status, 0, fifos.size() * sizeof(uint32_t)));
  for (char*& f : fifos) {
    BENCH_CUDA(cudaMalloc(&f, shape.totalBytes()));
    BENCH_CUDA(cudaMemset(f, 0, shape.totalBytes()));
  }
  uint64_t tenSeconds = 0;  // a wedged configuration fails instead of hanging the bench
  BENCH_CUDA(plait::deviceCyclesForMs(0, 10000, &tenSeconds));
  std::vector<DeviceWork> work(n);
  for (int r = 0; r < n; ++r) {
    BENCH_CUDA(cudaMalloc(&send[r], count * sizeof(float)));
    BENCH_CUDA(cudaMalloc(&recv[r], count * sizeof(float)));
    BENCH_CUDA(cudaMemset(send[r], 0, count * sizeof(float)));
    BENCH_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    DeviceWork& w = work[r];
    w.sendbuff = send[r];
    w.recvbuff = recv[r];
    w.count = count;
    w.type = ncclFloat32;
    w.elemSize = sizeof(float);
    if (!plait::makeRedOp(ncclFloat32, ncclSum, n, &w.op)) std::exit(1);
    w.nranks = n;
    w.alignElems = 16;
    w.chunkElems = (size_t{128} << 10) / sizeof(float);
    w.sliceBytes = cfg.sliceBytes;
    w.channelStatus = status + static_cast<size_t>(r) * cfg.nChannels;
    w.timeoutCycles = tenSeconds;
    for (int c = 0; c < cfg.nChannels; ++c) {
      w.channels[c].recv = DeviceFifo{fifos[static_cast<size_t>(r) * cfg.nChannels + c], shape.nSteps, shape.stepBytes};
      w.channels[c].send =
          DeviceFifo{fifos[static_cast<size_t>((r + 1) % n) * cfg.nChannels + c], shape.nSteps, shape.stepBytes};
      w.channels[c].position = (r + c) % n;
    }
  }
  std::vector<double> t;
  for (int i = 0; i < iterations + 2; ++i) {
    BENCH_CUDA(cudaDeviceSynchronize());
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < n; ++r) BENCH_CUDA(plait::launchAllReduce(work[r], cfg.nChannels, streams[r]));
    for (int r = 0; r < n; ++r) BENCH_CUDA(cudaStreamSynchronize(streams[r]));
    if (i >= 2) t.push_back(seconds(start));
  }
  std::vector<uint32_t> st(fifos.size());
  BENCH_CUDA(cudaMemcpy(st.data(), status, st.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  for (uint32_t s : st)
    if (s != 0) {
      std::fprintf(stderr, "a channel failed (status %u)\n", s);
      std::exit(1);
    }
  for (int r = 0; r < n; ++r) {
    BENCH_CUDA(cudaFree(send[r]));
    BENCH_CUDA(cudaFree(recv[r]));
    BENCH_CUDA(cudaStreamDestroy(streams[r]));
  }
  for (char* f : fifos) BENCH_CUDA(cudaFree(f));
  BENCH_CUDA(cudaFree(status));
  return medianOf(t);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  const size_t bytes = mib << 20, count = bytes / sizeof(float);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("loopback_bench: no CUDA device: nothing measured\n");
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs; float sum AllReduce of %zu MiB, median of %d; %d threads per block\n", prop.name,
              prop.multiProcessorCount, mib, iterations, plait::kDeviceThreads);
  const double copy = memcpySeconds(bytes, iterations);
  std::printf("# cudaMemcpy D2D: %.3f ms, %.0f GB/s counting read + write\n", copy * 1e3, 2.0 * bytes / copy / 1e9);
  std::printf("%6s %8s %8s %10s %10s %10s %10s %9s\n", "ranks", "channels", "slice", "time(ms)", "algbw", "busbw",
              "HBM GB/s", "of copy");
  for (int n : {2, 4, 8})
    for (int channels : {2, 8, 16, 32})
      for (size_t slice : {size_t{32} << 10, size_t{128} << 10}) {
        if (!coResident({n, channels, slice})) {
          std::printf("%6d %8d %7zuK  skipped: %d blocks of %d threads cannot all be resident\n", n, channels,
                      slice >> 10, n * channels, plait::kDeviceThreads);
          continue;
        }
        const double s = allReduceSeconds({n, channels, slice}, count, iterations);
        const double algbw = bytes / s / 1e9, hbm = static_cast<double>(bytes) * (6 * n - 4) / s / 1e9;
        std::printf("%6d %8d %7zuK %10.3f %10.1f %10.1f %10.0f %8.0f%%\n", n, channels, slice >> 10, s * 1e3, algbw,
                    algbw * 2.0 * (n - 1) / n, hbm, 100.0 * hbm / (2.0 * bytes / copy / 1e9));
      }
  return 0;
}
