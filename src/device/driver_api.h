// driver_api.h — the CUDA driver calls the executor makes (virtual memory
// management: src/device/vmm.cc, peer_memory.cc), fetched once through the
// runtime (cudaGetDriverEntryPointByVersion) so libnccl needs no libcuda at
// load time, and a runtime without a driver simply has none of them.
#pragma once

#include <cuda.h>

#include <string>

namespace plait::device {

struct DriverApi {
  CUresult (*getAttribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*getGranularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*addressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*exportHandle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                           unsigned long long) = nullptr;
  CUresult (*importHandle)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  CUresult (*retainHandle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*addressRange)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*errorString)(CUresult, const char**) = nullptr;
  std::string missing;  // names the first call the driver lacks; "" when it has them all
  // GPUDirect RDMA (net_gpu_memory.cc), apart: a driver without them still
  // has VMM. Null when missing; dmabufMissing says why.
  CUresult (*getHandleForAddressRange)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long) = nullptr;
  CUresult (*flushRdmaWrites)(CUflushGPUDirectRDMAWritesTarget, CUflushGPUDirectRDMAWritesScope) = nullptr;
  std::string dmabufMissing;
};

// The calls, fetched on first use. Thread-safe.
const DriverApi& driverApi();

// "cuMemMap failed: <the driver's text> (CUresult 1)".
std::string driverFailure(const char* call, CUresult result);

}  // namespace plait::device
