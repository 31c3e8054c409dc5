// vmm.cc — the part of CUDA's driver API that virtual memory management
// needs (cuda.h's names and signatures), on the emulator: what the device
// API's windows (nccl_device.h) rest on, where each rank maps its peers'
// memory at fixed offsets of one reserved range.
//
// Model: a physical allocation (cuMemCreate) is a memfd, refcounted by its
// handle and its mappings; cuMemAddressReserve reserves address space
// (PROT_NONE); cuMemMap maps the memfd there with MAP_FIXED, inaccessible
// until cuMemSetAccess (mprotect); cuMemUnmap puts the reservation back.
// Exporting a POSIX fd is dup(); importing one makes a new handle on the
// same pages, so forked ranks that pass fds over a Unix socket (SCM_RIGHTS)
// share memory as processes on one GPU do. Also the few context, device and
// copy calls a driver-API program needs around them (cuInit, the primary
// context, cuMemsetD32, cuMemcpyDtoH/HtoD). Mappings are device memory to
// cudaPointerGetAttributes.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "internal.h"

namespace plait_emu {
namespace {

// CUDA's usual granularity for device memory.
constexpr size_t kGranularity = size_t(2) << 20;

struct Physical {
  int fd = -1;
  size_t size = 0;
  int device = 0;
  int refs = 0;        // handle references plus mappings: the pages go with the last
  int handleRefs = 0;  // cuMemCreate / import / retain, less cuMemRelease
};
struct Mapping {
  size_t size = 0;
  Physical* physical = nullptr;
};

std::mutex gVmmMu;
std::map<CUmemGenericAllocationHandle, Physical*>& handles() {
  static auto* table = new std::map<CUmemGenericAllocationHandle, Physical*>();  // leaked: used until exit
  return *table;
}
std::map<uintptr_t, Mapping>& mappings() {  // by address
  static auto* table = new std::map<uintptr_t, Mapping>();
  return *table;
}

CUmemGenericAllocationHandle handleOf(Physical* p) { return reinterpret_cast<uintptr_t>(p); }

// Drops one reference (gVmmMu held); the pages go with the last.
void unref(Physical* p) {
  if (--p->refs > 0) return;
  ::close(p->fd);
  delete p;
}

Physical* newPhysical(int fd, size_t size, int device) {
  auto* p = new Physical{fd, size, device, 1, 1};
  handles()[handleOf(p)] = p;
  return p;
}

bool aligned(uintptr_t v) { return v % kGranularity == 0; }

}  // namespace
}  // namespace plait_emu

using namespace plait_emu;

extern "C" {

// ---- Driver, devices, the primary context ----------------------------------
CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = deviceCount();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr || !validDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

// What VMM programs ask; other attributes read 0.
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *value = dmabufSupported() ? 1 : 0; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

// The primary context of device d is the handle d + 1 (never null).
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device) + 1);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  return validDevice(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_SUCCESS;
  const int device = static_cast<int>(reinterpret_cast<uintptr_t>(ctx) - 1);
  return cudaSetDevice(device) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int device = boundDevice();
  *ctx = device < 0 ? nullptr : reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device) + 1);
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return cudaDeviceSynchronize() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN; }

CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_ALREADY_MAPPED: *name = "CUDA_ERROR_ALREADY_MAPPED"; break;
    case CUDA_ERROR_NOT_MAPPED: *name = "CUDA_ERROR_NOT_MAPPED"; break;
    default: *name = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) { return cuGetErrorName(error, text); }

// ---- Copies (synchronous, as the driver's are for pageable host memory) ----
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  return cudaMemcpy(dst, reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToHost) == cudaSuccess
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  return cudaMemcpy(reinterpret_cast<void*>(dst), src, bytes, cudaMemcpyHostToDevice) == cudaSuccess
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t count) {
  if (dst % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (cudaDeviceSynchronize() != cudaSuccess) return CUDA_ERROR_UNKNOWN;  // ordered after the legacy stream's work
  auto* p = reinterpret_cast<uint32_t*>(dst);
  for (size_t i = 0; i < count; ++i) p[i] = value;
  return CUDA_SUCCESS;
}

// ---- Virtual memory management ---------------------------------------------
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || !aligned(size) ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  if (!validDevice(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  const int fd = ::memfd_create("plait-emu-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(gVmmMu);
  *handle = handleOf(newPhysical(fd, size, prop->location.id));
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(gVmmMu);
  auto it = handles().find(handle);
  if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
  Physical* p = it->second;
  if (--p->handleRefs == 0) handles().erase(it);
  unref(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  if (ptr == nullptr || size == 0 || !aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  alignment = alignment == 0 ? kGranularity : alignment;
  if (alignment % kGranularity != 0 || (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  (void)addr;  // a hint
  void* raw = ::mmap(nullptr, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (start + alignment - 1) / alignment * alignment;
  if (base > start) ::munmap(raw, base - start);
  const uintptr_t end = start + size + alignment;
  if (end > base + size) ::munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (ptr == 0 || size == 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard<std::mutex> lock(gVmmMu);
    auto it = mappings().lower_bound(ptr);
    if (it != mappings().end() && it->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  return ::munmap(reinterpret_cast<void*>(ptr), size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  if (ptr == 0 || size == 0 || flags != 0 || !aligned(ptr) || !aligned(size) || !aligned(offset))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(gVmmMu);
  auto h = handles().find(handle);
  if (h == handles().end() || offset + size > h->second->size) return CUDA_ERROR_INVALID_VALUE;
  auto next = mappings().lower_bound(ptr);
  if (next != mappings().end() && next->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (next != mappings().begin() && std::prev(next)->first + std::prev(next)->second.size > ptr)
    return CUDA_ERROR_ALREADY_MAPPED;
  Physical* p = h->second;
  void* at = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
                    static_cast<off_t>(offset));
  if (at == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  ++p->refs;
  mappings()[ptr] = Mapping{size, p};
  rememberAllocation(Allocation{reinterpret_cast<char*>(ptr), size, p->device, MemKind::kMapped, p->fd});
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(gVmmMu);
  auto it = mappings().find(ptr);
  if (it == mappings().end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  Allocation a;
  (void)forgetAllocation(reinterpret_cast<const void*>(ptr), MemKind::kMapped, &a);
  // Back to reserved address space.
  ::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  unref(it->second.physical);
  mappings().erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !validDevice(desc[i].location.id))
      return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
  }
  std::lock_guard<std::mutex> lock(gVmmMu);
  // Every byte must be mapped (by one mapping or several adjacent ones).
  for (CUdeviceptr at = ptr; at < ptr + size;) {
    auto it = mappings().upper_bound(at);
    if (it == mappings().begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    if (it->first + it->second.size <= at) return CUDA_ERROR_INVALID_VALUE;
    at = it->first + it->second.size;
  }
  return ::mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(gVmmMu);
  auto it = handles().find(handle);
  if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
  const int fd = ::fcntl(it->second->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType type) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int given = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  struct stat st;
  if (::fstat(given, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  const int fd = ::fcntl(given, F_DUPFD_CLOEXEC, 0);  // the caller keeps (and closes) its own
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(gVmmMu);
  *handle = handleOf(newPhysical(fd, static_cast<size_t>(st.st_size), currentDevice()));
  return CUDA_SUCCESS;
}

// A new handle reference on the allocation mapped at addr (cudaMalloc'd
// memory has none: CUDA says CUDA_ERROR_INVALID_VALUE too).
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto at = reinterpret_cast<CUdeviceptr>(addr);
  std::lock_guard<std::mutex> lock(gVmmMu);
  auto it = mappings().upper_bound(at);
  if (it == mappings().begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (it->first + it->second.size <= at) return CUDA_ERROR_INVALID_VALUE;
  Physical* p = it->second.physical;
  ++p->refs;
  ++p->handleRefs;  // released again by cuMemRelease
  handles()[handleOf(p)] = p;
  *handle = handleOf(p);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  if (boundDevice() < 0) return CUDA_ERROR_INVALID_CONTEXT;  // as the driver on a thread without one
  Allocation a;
  if (!findAllocation(reinterpret_cast<const void*>(dptr), &a)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = reinterpret_cast<CUdeviceptr>(a.base);
  if (size) *size = a.size;
  return CUDA_SUCCESS;
}

// GPUDirect RDMA's export: a dmabuf of device memory a NIC can register.
// The emulator's device memory is a memfd, so the dmabuf is a dup of it —
// for a range that starts where its cudaMalloc allocation starts (a memfd
// cannot be cut so that a range inside it begins at offset 0: an emulation
// limit; CUDA_ERROR_NOT_SUPPORTED then). As CUDA: the range must be whole
// host pages, and a context must be current.
CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType type,
                                       unsigned long long flags) {
  if (boundDevice() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (handle == nullptr || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD ||
      (flags & ~static_cast<unsigned long long>(CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size == 0 || dptr % page != 0 || size % page != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!dmabufSupported()) return CUDA_ERROR_NOT_SUPPORTED;
  Allocation a;
  if (!findAllocation(reinterpret_cast<const void*>(dptr), &a) || a.kind != MemKind::kDevice || a.fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<char*>(dptr) != a.base || size > a.size) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = ::fcntl(a.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(handle) = fd;
  return CUDA_SUCCESS;
}

// The emulated NIC writes through a mapping of the same pages: a full fence
// is all there is to flush.
CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target, CUflushGPUDirectRDMAWritesScope scope) {
  if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
      (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
    return CUDA_ERROR_INVALID_VALUE;
  if (boundDevice() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return CUDA_SUCCESS;
}

// The driver's functions by name, as a program (or libnccl) fetches them
// through the runtime: the ones this file defines. Any version is served
// (the emulator has one of each).
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  (void)cudaVersion;
  if (symbol == nullptr || funcPtr == nullptr || (flags & ~3ull) != 0) return cudaErrorInvalidValue;
  struct Named {
    const char* name;
    void* fn;
  };
  static const Named kTable[] = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&cuDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&cuCtxSetCurrent)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&cuCtxGetCurrent)},
      {"cuCtxSynchronize", reinterpret_cast<void*>(&cuCtxSynchronize)},
      {"cuGetErrorName", reinterpret_cast<void*>(&cuGetErrorName)},
      {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
      {"cuMemcpyDtoH", reinterpret_cast<void*>(&cuMemcpyDtoH)},
      {"cuMemcpyHtoD", reinterpret_cast<void*>(&cuMemcpyHtoD)},
      {"cuMemsetD32", reinterpret_cast<void*>(&cuMemsetD32)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
      {"cuMemExportToShareableHandle", reinterpret_cast<void*>(&cuMemExportToShareableHandle)},
      {"cuMemImportFromShareableHandle", reinterpret_cast<void*>(&cuMemImportFromShareableHandle)},
      {"cuMemRetainAllocationHandle", reinterpret_cast<void*>(&cuMemRetainAllocationHandle)},
      {"cuMemGetAddressRange", reinterpret_cast<void*>(&cuMemGetAddressRange)},
      {"cuMemGetHandleForAddressRange", reinterpret_cast<void*>(&cuMemGetHandleForAddressRange)},
      {"cuFlushGPUDirectRDMAWrites", reinterpret_cast<void*>(&cuFlushGPUDirectRDMAWrites)},
  };
  for (const Named& n : kTable) {
    if (std::strcmp(n.name, symbol) == 0) {
      *funcPtr = n.fn;
      if (driverStatus) *driverStatus = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  }
  *funcPtr = nullptr;
  if (driverStatus) *driverStatus = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;  // as CUDA: the status says it was not found
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDA_VERSION, flags, driverStatus);
}

}  // extern "C"
