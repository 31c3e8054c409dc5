#include "device/driver_api.h"

#include <cuda_runtime_api.h>

namespace plait::device {
namespace {

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

}  // namespace

const DriverApi& driverApi() {
  static const DriverApi d = [] {
    DriverApi x;
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
    fetch("cuMemImportFromShareableHandle", &x.importHandle, &x.missing);
    fetch("cuMemRetainAllocationHandle", &x.retainHandle, &x.missing);
    fetch("cuMemGetAddressRange", &x.addressRange, &x.missing);
    fetch("cuGetErrorString", &x.errorString, &x.missing);
    fetch("cuMemGetHandleForAddressRange", &x.getHandleForAddressRange, &x.dmabufMissing);
    std::string noFlush;  // optional: drivers that order remote writes need no flush
    fetch("cuFlushGPUDirectRDMAWrites", &x.flushRdmaWrites, &noFlush);
    return x;
  }();
  return d;
}

std::string driverFailure(const char* call, CUresult r) {
  const char* text = nullptr;
  if (driverApi().errorString == nullptr || driverApi().errorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    text = "unknown error";
  return std::string(call) + " failed: " + text + " (CUresult " + std::to_string(static_cast<int>(r)) + ")";
}

}  // namespace plait::device
