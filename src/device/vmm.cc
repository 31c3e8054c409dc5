#include "device/vmm.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "device/driver_api.h"

namespace plait::device::vmm {
namespace {

struct Live {
  CUmemGenericAllocationHandle handle = 0;
  size_t size = 0;  // mapped (a multiple of the granularity)
};
std::mutex gMu;
std::map<uintptr_t, Live>& live() {  // by base; never destroyed (frees may come from atexit handlers)
  static auto* table = new std::map<uintptr_t, Live>();
  return *table;
}

CUmemAllocationProp propertiesFor(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

Outcome supported(int device, std::string* why) {
  const DriverApi& d = driverApi();
  if (!d.missing.empty()) {
    *why = d.missing;
    return Outcome::kUnavailable;
  }
  int vmm = 0, fds = 0;
  CUresult r = d.getAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (r == CUDA_SUCCESS)
    r = d.getAttribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device);
  if (r != CUDA_SUCCESS) {
    *why = driverFailure("cuDeviceGetAttribute", r);
    return Outcome::kUnavailable;
  }
  if (vmm == 0 || fds == 0) {
    *why = "CUDA device " + std::to_string(device) + " does not support " +
           (vmm == 0 ? "virtual memory management" : "POSIX file-descriptor memory handles");
    return Outcome::kUnavailable;
  }
  return Outcome::kOk;
}


Outcome allocate(void** ptr, size_t bytes, std::string* why) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "no current CUDA device";
    return Outcome::kUnavailable;
  }
  if (const Outcome o = supported(device, why); o != Outcome::kOk) return o;
  (void)cudaFree(nullptr);  // makes the device's primary context current, which the driver's calls use
  const DriverApi& d = driverApi();
  const CUmemAllocationProp prop = propertiesFor(device);
  size_t granularity = 0;
  CUresult r = d.getGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0) {
    *why = driverFailure("cuMemGetAllocationGranularity", r);
    return Outcome::kFailed;
  }
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  const std::string what = " (" + std::to_string(size) + " bytes on CUDA device " + std::to_string(device) + ")";
  CUmemGenericAllocationHandle handle = 0;
  if ((r = d.create(&handle, size, &prop, 0)) != CUDA_SUCCESS) {
    *why = driverFailure("cuMemCreate", r) + what;
    return Outcome::kFailed;
  }
  CUdeviceptr at = 0;
  if ((r = d.reserve(&at, size, granularity, 0, 0)) != CUDA_SUCCESS) {
    *why = driverFailure("cuMemAddressReserve", r) + what;
    d.release(handle);
    return Outcome::kFailed;
  }
  if ((r = d.map(at, size, 0, handle, 0)) != CUDA_SUCCESS) {
    *why = driverFailure("cuMemMap", r) + what;
    d.addressFree(at, size);
    d.release(handle);
    return Outcome::kFailed;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((r = d.setAccess(at, size, &access, 1)) != CUDA_SUCCESS) {
    *why = driverFailure("cuMemSetAccess", r) + what;
    d.unmap(at, size);
    d.addressFree(at, size);
    d.release(handle);
    return Outcome::kFailed;
  }
  {
    std::lock_guard<std::mutex> lock(gMu);
    live()[static_cast<uintptr_t>(at)] = Live{handle, size};
  }
  *ptr = reinterpret_cast<void*>(at);
  return Outcome::kOk;
}

Outcome release(void* ptr, std::string* why) {
  Live l;
  {
    std::lock_guard<std::mutex> lock(gMu);
    auto it = live().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live().end()) {
      *why = "not a cuMem allocation of ncclMemAlloc";
      return Outcome::kFailed;
    }
    l = it->second;
    live().erase(it);
  }
  const DriverApi& d = driverApi();
  const auto at = reinterpret_cast<CUdeviceptr>(ptr);
  // Every step runs even when one fails, so nothing is left behind that can
  // be freed; the first failure is reported.
  const CUresult u = d.unmap(at, l.size);
  const CUresult f = d.addressFree(at, l.size);
  const CUresult r = d.release(l.handle);
  if (u != CUDA_SUCCESS) *why = driverFailure("cuMemUnmap", u);
  else if (f != CUDA_SUCCESS) *why = driverFailure("cuMemAddressFree", f);
  else if (r != CUDA_SUCCESS) *why = driverFailure("cuMemRelease", r);
  else return Outcome::kOk;
  return Outcome::kFailed;
}

}  // namespace plait::device::vmm
