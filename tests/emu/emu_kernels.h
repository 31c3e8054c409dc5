// emu_kernels.h — kernels that exercise the device emulator itself
// (emu_kernels.cu, compiled as emulated device code), as handles for
// cudaLaunchKernel.
#pragma once

namespace plait_emu_test {

struct Scale {
  int factor;
  int offset;
};

// blockSum(const int* in, int* out): out[blockIdx.x] = sum of the block's
// blockDim.x inputs, by a tree reduction in __shared__ memory (a
// __syncthreads per level). blockDim.x must be a power of two <= 1024.
const void* blockSumKernel();
// coordinates(unsigned* out): out[global thread id] = blockIdx.x * 1000000 +
// threadIdx.z * 10000 + threadIdx.y * 100 + threadIdx.x, for 3-D blocks.
const void* coordinatesKernel();
// scaled(const int* in, int* out, Scale s, int n): out[i] = in[i] * s.factor + s.offset.
const void* scaledKernel();
// racy(int* out): thread 1 copies a __shared__ value thread 0 writes,
// without a barrier between them.
const void* racyKernel();
// divergent(int* x): thread 0 waits at one __syncthreads, the others at another.
const void* divergentKernel();

}  // namespace plait_emu_test
