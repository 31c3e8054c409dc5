// internal.h — state shared by the emulated CUDA runtime's parts (emu/runtime).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "plait_emu/runtime_api.h"

namespace plait_emu {

// ---- errors (device.cc) ----
// Records `err` as the calling thread's last error when it is one; returns it.
cudaError_t fail(cudaError_t err);
// The calling thread's current device.
// The calling thread's device; the runtime call asking binds its context.
int currentDevice();
// The device whose context is current on this thread, or -1 when none is.
int boundDevice();
int deviceCount();
bool validDevice(int device);
// Whether PLAIT_EMU_NO_PEER_ACCESS says devices a and b cannot reach each other.
bool peerAccessDenied(int a, int b);
// Whether devices export dmabufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED):
// yes unless PLAIT_EMU_NO_DMABUF=1.
bool dmabufSupported();

// ---- memory (memory.cc) ----
enum class MemKind { kDevice, kHost, kRegistered, kIpc, kMapped /* cuMemMap (vmm.cc) */ };
struct Allocation {
  char* base = nullptr;
  size_t size = 0;
  int device = 0;
  MemKind kind = MemKind::kDevice;
  int fd = -1;  // memfd of device memory (IPC handles name it); -1 otherwise
};
// The allocation holding p (base <= p < base + size), if any.
bool findAllocation(const void* p, Allocation* out);
// Adds / removes an entry of the table findAllocation searches (forget:
// only an entry of `kind` starting at `base`).
void rememberAllocation(const Allocation& a);
bool forgetAllocation(const void* base, MemKind kind, Allocation* out);

// ---- streams (stream.cc) ----
struct Stream;
// The stream a handle names: null and cudaStreamLegacy are the current
// device's legacy default stream; cudaStreamPerThread is treated as it.
Stream* resolveStream(cudaStream_t handle);
bool isStream(cudaStream_t handle);
// Appends work; it runs after everything enqueued before it on the stream.
void enqueue(Stream* stream, std::function<void()> work);
// Waits until everything enqueued so far has run.
void drain(Stream* stream);
// Waits for every stream of `device` (cudaDeviceSynchronize, cudaFree).
void drainDevice(int device);
// Whether work on the stream is being captured into a graph.
bool isCapturing(Stream* stream);

// ---- kernels (launch.cc, block.cc) ----
KernelBinder findKernel(const void* kernel);
// Runs a grid: every block at once, one OS thread each; returns when all
// blocks have finished.
void runGrid(const std::function<void()>& body, dim3 grid, dim3 block);

}  // namespace plait_emu
