#include "device/vmm.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace plait::device::vmm {
namespace {

// The driver calls used here, fetched once from the runtime. A missing one
// leaves `missing` naming it and VMM unavailable.
struct Driver {
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
  CUresult (*errorString)(CUresult, const char**) = nullptr;
  std::string missing;  // "" when every call was found
};

template <class F>
void fetch(const char* name, F* fn, std::string* missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (missing->empty())
      *missing = std::string("the CUDA driver has no ") + name + " (" +
                 (err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found") + ")";
    return;
  }
  *fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    fetch("cuDeviceGetAttribute", &x.getAttribute, &x.missing);
    fetch("cuMemGetAllocationGranularity", &x.getGranularity, &x.missing);
    fetch("cuMemCreate", &x.create, &x.missing);
    fetch("cuMemRelease", &x.release, &x.missing);
    fetch("cuMemAddressReserve", &x.reserve, &x.missing);
    fetch("cuMemAddressFree", &x.addressFree, &x.missing);
    fetch("cuMemMap", &x.map, &x.missing);
    fetch("cuMemUnmap", &x.unmap, &x.missing);
    fetch("cuMemSetAccess", &x.setAccess, &x.missing);
    fetch("cuMemExportToShareableHandle", &x.exportHandle, &x.missing);
    fetch("cuGetErrorString", &x.errorString, &x.missing);
    return x;
  }();
  return d;
}

std::string failure(const char* call, CUresult r) {
  const char* text = nullptr;
  if (driver().errorString == nullptr || driver().errorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    text = "unknown error";
  return std::string(call) + " failed: " + text + " (CUresult " + std::to_string(static_cast<int>(r)) + ")";
}

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

// kOk when VMM with POSIX fds serves `device`.
Outcome usable(int device, std::string* why) {
  const Driver& d = driver();
  if (!d.missing.empty()) {
    *why = d.missing;
    return Outcome::kUnavailable;
  }
  int vmm = 0, fds = 0;
  CUresult r = d.getAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device);
  if (r == CUDA_SUCCESS)
    r = d.getAttribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device);
  if (r != CUDA_SUCCESS) {
    *why = failure("cuDeviceGetAttribute", r);
    return Outcome::kUnavailable;
  }
  if (vmm == 0 || fds == 0) {
    *why = "CUDA device " + std::to_string(device) + " does not support " +
           (vmm == 0 ? "virtual memory management" : "POSIX file-descriptor memory handles");
    return Outcome::kUnavailable;
  }
  return Outcome::kOk;
}

}  // namespace

Outcome allocate(void** ptr, size_t bytes, std::string* why) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "no current CUDA device";
    return Outcome::kUnavailable;
  }
  if (const Outcome o = usable(device, why); o != Outcome::kOk) return o;
  const Driver& d = driver();
  const CUmemAllocationProp prop = propertiesFor(device);
  size_t granularity = 0;
  CUresult r = d.getGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0) {
    *why = failure("cuMemGetAllocationGranularity", r);
    return Outcome::kFailed;
  }
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  const std::string what = " (" + std::to_string(size) + " bytes on CUDA device " + std::to_string(device) + ")";
  CUmemGenericAllocationHandle handle = 0;
  if ((r = d.create(&handle, size, &prop, 0)) != CUDA_SUCCESS) {
    *why = failure("cuMemCreate", r) + what;
    return Outcome::kFailed;
  }
  CUdeviceptr at = 0;
  if ((r = d.reserve(&at, size, granularity, 0, 0)) != CUDA_SUCCESS) {
    *why = failure("cuMemAddressReserve", r) + what;
    d.release(handle);
    return Outcome::kFailed;
  }
  if ((r = d.map(at, size, 0, handle, 0)) != CUDA_SUCCESS) {
    *why = failure("cuMemMap", r) + what;
    d.addressFree(at, size);
    d.release(handle);
    return Outcome::kFailed;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((r = d.setAccess(at, size, &access, 1)) != CUDA_SUCCESS) {
    *why = failure("cuMemSetAccess", r) + what;
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
  const Driver& d = driver();
  const auto at = reinterpret_cast<CUdeviceptr>(ptr);
  // Every step runs even when one fails, so nothing is left behind that can
  // be freed; the first failure is reported.
  const CUresult u = d.unmap(at, l.size);
  const CUresult f = d.addressFree(at, l.size);
  const CUresult r = d.release(l.handle);
  if (u != CUDA_SUCCESS) *why = failure("cuMemUnmap", u);
  else if (f != CUDA_SUCCESS) *why = failure("cuMemAddressFree", f);
  else if (r != CUDA_SUCCESS) *why = failure("cuMemRelease", r);
  else return Outcome::kOk;
  return Outcome::kFailed;
}

}  // namespace plait::device::vmm
