// cuda_probe.h — is this pointer CUDA device memory? Asked of whatever CUDA
// the process already has loaded, never loading one: the CUDA runtime's
// cudaPointerGetAttributes when a shared runtime (libcudart, or the device
// emulator's libplait_cudart_emu) is in the process, else the driver's
// cuPointerGetAttribute when libcuda.so.1 is (programs that link the runtime
// statically). A process without CUDA gets "no" at the cost of one cached
// null check.
//
// The driver path is unverified on hardware (no GPU here); the runtime path
// is tested under the emulator.
#pragma once

namespace plait::cuda {

// True when ptr is device (or managed) memory by the loaded CUDA's account.
// Host, pinned-host, registered and unknown pointers are false. Thread-safe;
// leaves the CUDA runtime's last error as it found it.
bool isDeviceMemory(const void* ptr);

}  // namespace plait::cuda
