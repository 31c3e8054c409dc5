// cuda_probe.h — is this pointer CUDA device memory? Asked of whatever CUDA
// the process already has loaded, never loading one: the CUDA runtime's
// cudaPointerGetAttributes when a shared runtime (libcudart, or the device
// emulator's libplait_cudart_emu) is in the process, else the driver's
// cuPointerGetAttribute when libcuda.so.1 is (programs that link the runtime
// statically). A process without CUDA gets "no" at the cost of one cached
// null check.
//
// The runtime path is tested under the emulator and ran on an H100
// (scripts/gpu_check.sh); the driver path is unverified on hardware.
#pragma once

namespace plait::cuda {

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
