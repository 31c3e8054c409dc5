// cuda_probe.h — is this pointer CUDA device memory? Asked of the CUDA
// runtime Plait's own CUDA executor was built with, when the library has one
// (it installs its entry points at load: installRuntime below; libnccl links
// the runtime statically, as NCCL does), else of whatever CUDA the process
// already has loaded, never loading one: a shared runtime's
// cudaPointerGetAttributes (libcudart, or the device emulator's
// libplait_cudart_emu), else the driver's cuPointerGetAttribute when
// libcuda.so.1 is. A process without CUDA gets "no" at the cost of one cached
// null check.
//
// The runtime path is tested under the emulator and ran on an H100
// (scripts/gpu_check.sh); the driver path is unverified on hardware.
#pragma once

#include <cstddef>
#include <string>

namespace plait::cuda {

// The runtime functions the probe calls, as C function pointers returning
// cudaError_t as int (0: success). pointerAttributes fills a
// cudaPointerAttributes (CUDA 11+ layout: type, device, devicePointer,
// hostPointer, ...).
struct RuntimeEntryPoints {
  int (*pointerAttributes)(void* attributes, const void* ptr) = nullptr;
  int (*getLastError)() = nullptr;
  int (*getDevice)(int* device) = nullptr;
  int (*setDevice)(int device) = nullptr;
  int (*getDeviceCount)(int* count) = nullptr;
  int (*deviceGetPCIBusId)(char* out, int outBytes, int device) = nullptr;
  int (*malloc)(void** ptr, size_t bytes) = nullptr;  // cudaMalloc on the current device
  int (*free)(void* ptr) = nullptr;                   // cudaFree
  const char* (*errorString)(int error) = nullptr;    // cudaGetErrorString
  // CUDA virtual memory management (src/device/vmm.h): 0 allocated or
  // freed, 1 unavailable on this device (fall back to cudaMalloc), 2 failed;
  // *why says why when not 0.
  int (*vmmAllocate)(void** ptr, size_t bytes, std::string* why) = nullptr;
  int (*vmmFree)(void* ptr, std::string* why) = nullptr;
};

// Makes the probe use these (the CUDA executor's runtime) from now on,
// instead of looking for a runtime in the process. Called once, at load.
void installRuntime(const RuntimeEntryPoints& entryPoints);

// Whether installRuntime was called: this library has a CUDA executor.
bool runtimeInstalled();

// cudaMalloc / cudaFree through the installed runtime: 0 on success, the
// runtime's error code otherwise, -1 when no runtime is installed. The
// runtime's last error is left as it was.
int allocateDevice(void** ptr, size_t bytes);
int freeDevice(void* ptr);
// cuMem allocation and release through the installed runtime (the codes of
// RuntimeEntryPoints::vmmAllocate; 1 with "no CUDA runtime" without one).
int allocateVmm(void** ptr, size_t bytes, std::string* why);
int freeVmm(void* ptr, std::string* why);
// The installed runtime's text for an error code ("no CUDA runtime" for -1).
const char* errorString(int error);

// True when ptr is device (or managed) memory by the loaded CUDA's account.
// Host, pinned-host, registered and unknown pointers are false. Thread-safe;
// leaves the CUDA runtime's last error as it found it.
bool isDeviceMemory(const void* ptr);

// The CUDA device `ptr` lives on when it is device (or managed) memory, else
// -1 (host, pinned-host, registered, unknown, or no CUDA loaded).
int deviceOf(const void* ptr);

// The calling thread's current CUDA device (cudaGetDevice), or -1 when no
// CUDA runtime is loaded or it has no device.
int currentDevice();

// Makes `device` the calling thread's current CUDA device (cudaSetDevice).
// False when no runtime is loaded or the runtime refuses the ordinal (its
// last error is left as it was).
bool setCurrentDevice(int device);

// The PCI bus id of `device` ("0000:41:00.0", cudaDeviceGetPCIBusId) in
// out[0..outBytes), NUL-terminated; false (and "") without a runtime or for
// a device it refuses.
bool busIdOf(int device, char* out, int outBytes);

// Whether a CUDA runtime is loaded in the process.
bool runtimeLoaded();

// The number of CUDA devices the loaded runtime sees (0 without one).
int deviceCount();

}  // namespace plait::cuda
