// emu_kernels.cu — kernels for the device emulator's own tests. Written as
// CUDA; compiled as emulated device code (tests/emu/CMakeLists.txt).
#include <cuda_runtime.h>

#include "algorithms/device/device_launch.h"
#include "emu_kernels.h"

namespace plait_emu_test {
namespace {

__global__ void blockSum(const int* in, int* out) {
  __shared__ int partial[1024];
  const unsigned t = threadIdx.x;
  partial[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

__global__ void coordinates(unsigned* out) {
  const unsigned perBlock = blockDim.x * blockDim.y * blockDim.z;
  const unsigned local = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  out[blockIdx.x * perBlock + local] = blockIdx.x * 1000000 + threadIdx.z * 10000 + threadIdx.y * 100 + threadIdx.x;
}

__global__ void scaled(const int* in, int* out, Scale s, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] * s.factor + s.offset;
}

__global__ void divergent(int* x) {
  if (threadIdx.x == 0) {
    __syncthreads();
    x[0] = 1;
  } else {
    __syncthreads();
  }
}

// Thread 1 reads what thread 0 wrote with no barrier between: a race on a
// GPU. The emulator runs thread 0 first, so only ThreadSanitizer sees it.
__global__ void racy(int* out) {
  __shared__ int value;
  if (threadIdx.x == 0) value = 42;
  if (threadIdx.x == 1) out[0] = value;
}

}  // namespace

const void* racyKernel() { return PLAIT_KERNEL_HANDLE(racy); }
const void* blockSumKernel() { return PLAIT_KERNEL_HANDLE(blockSum); }
const void* coordinatesKernel() { return PLAIT_KERNEL_HANDLE(coordinates); }
const void* scaledKernel() { return PLAIT_KERNEL_HANDLE(scaled); }
const void* divergentKernel() { return PLAIT_KERNEL_HANDLE(divergent); }

}  // namespace plait_emu_test
