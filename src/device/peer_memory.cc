#include "device/peer_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "device/driver_api.h"

namespace plait::device::peer_memory {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(Exported::ipc));

Status cudaFailed(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  return Status(Code::kCudaError, std::string(call) + " failed: " + cudaGetErrorString(err));
}

Status driverFailed(const char* call, CUresult r) { return Status(Code::kCudaError, driverFailure(call, r)); }

}  // namespace

Result<Exported> exportRange(const void* ptr, size_t size, int* fd) {
  *fd = -1;
  const DriverApi& d = driverApi();
  if (!d.missing.empty()) return Status(Code::kCudaError, "exporting device memory: " + d.missing);
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess || attr.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return invalidArgument("the buffer is not device memory");
  }
  CUdeviceptr base = 0;
  size_t mapped = 0;
  const auto at = reinterpret_cast<CUdeviceptr>(ptr);
  if (CUresult r = d.addressRange(&base, &mapped, at); r != CUDA_SUCCESS)
    return driverFailed("cuMemGetAddressRange", r);
  if (at + size < at || at + size > base + mapped)
    return invalidArgument("the buffer (" + std::to_string(size) + " bytes) runs past the end of its allocation (" +
                           std::to_string(base + mapped - at) + " bytes left)");
  Exported e;
  e.device = attr.device;
  e.ownerBase = base;
  e.allocationSize = mapped;
  e.offset = at - base;
  e.size = size;
  CUmemGenericAllocationHandle handle = 0;
  if (d.retainHandle(&handle, reinterpret_cast<void*>(base)) == CUDA_SUCCESS) {
    e.kind = kVmm;
    const CUresult r = d.exportHandle(fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    (void)d.release(handle);  // the retain's reference; the mapping keeps the memory
    if (r != CUDA_SUCCESS) {
      *fd = -1;
      return driverFailed("cuMemExportToShareableHandle", r);
    }
    return e;
  }
  e.kind = kIpc;  // cudaMalloc'd (no VMM handle)
  cudaIpcMemHandle_t h;
  if (cudaError_t err = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)); err != cudaSuccess)
    return cudaFailed("cudaIpcGetMemHandle", err);
  std::memcpy(e.ipc, &h, sizeof h);
  return e;
}

Result<Imported> importRange(const Exported& e, int fd, void* at) {
  if (e.offset > e.allocationSize || e.size > e.allocationSize - e.offset)
    return invalidArgument("the peer's range (offset " + std::to_string(e.offset) + ", " + std::to_string(e.size) +
                           " bytes) is not inside its allocation (" + std::to_string(e.allocationSize) + " bytes)");
  Imported out;
  out.kind = e.kind;
  out.mappingSize = e.allocationSize;
  if (e.kind == kIpc) {
    if (at != nullptr) return invalidArgument("CUDA IPC memory cannot be mapped at a chosen address");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, e.ipc, sizeof h);
    void* base = nullptr;
    if (cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess); err != cudaSuccess)
      return cudaFailed("cudaIpcOpenMemHandle", err);
    out.mapping = base;
    out.range = static_cast<char*>(base) + e.offset;
    return out;
  }
  if (e.kind != kVmm) return invalidArgument("unknown kind of peer memory: " + std::to_string(e.kind));
  if (fd < 0) return invalidArgument("the peer's VMM memory came without its fd");
  const DriverApi& d = driverApi();
  if (!d.missing.empty()) return Status(Code::kCudaError, "mapping a peer's device memory: " + d.missing);
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return cudaFailed("cudaGetDevice", err);
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = d.importHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return driverFailed("cuMemImportFromShareableHandle", r);
  CUdeviceptr where = reinterpret_cast<CUdeviceptr>(at);
  if (where == 0) {
    if ((r = d.reserve(&where, e.allocationSize, 0, 0, 0)) != CUDA_SUCCESS) {
      (void)d.release(handle);
      return driverFailed("cuMemAddressReserve", r);
    }
    out.reserved = true;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d.map(where, e.allocationSize, 0, handle, 0);
  const char* failed = r != CUDA_SUCCESS ? "cuMemMap" : nullptr;
  if (failed == nullptr && (r = d.setAccess(where, e.allocationSize, &access, 1)) != CUDA_SUCCESS) {
    failed = "cuMemSetAccess";
    (void)d.unmap(where, e.allocationSize);
  }
  (void)d.release(handle);  // the mapping holds the memory from here on
  if (failed != nullptr) {
    if (out.reserved) (void)d.addressFree(where, e.allocationSize);
    return driverFailed(failed, r);
  }
  out.mapping = reinterpret_cast<void*>(where);
  out.range = reinterpret_cast<char*>(where) + e.offset;
  return out;
}

Status closeImported(const Imported& i) {
  if (i.kind == kIpc) {
    if (cudaError_t err = cudaIpcCloseMemHandle(i.mapping); err != cudaSuccess)
      return cudaFailed("cudaIpcCloseMemHandle", err);
    return Status::ok();
  }
  const DriverApi& d = driverApi();
  const auto where = reinterpret_cast<CUdeviceptr>(i.mapping);
  CUresult r = d.unmap(where, i.mappingSize);
  if (r != CUDA_SUCCESS) return driverFailed("cuMemUnmap", r);
  if (i.reserved && (r = d.addressFree(where, i.mappingSize)) != CUDA_SUCCESS)
    return driverFailed("cuMemAddressFree", r);
  return Status::ok();
}

}  // namespace plait::device::peer_memory
