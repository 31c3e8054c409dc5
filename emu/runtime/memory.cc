// memory.cc — device and host memory, copies, pointer attributes, IPC.
//
// Device memory is a memfd mapped shared, so an IPC handle (the owner's pid
// and fd) lets another process map the same pages through /proc/<pid>/fd,
// as forked ranks exchanging buffers need. Addresses are unified: device,
// host and registered memory are all plain host addresses, and a device
// pointer works on the host (there is no separate device address space to
// catch a host dereference of device memory — a limit of emulation).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "internal.h"

namespace plait_emu {
namespace {

std::mutex gMemMu;
std::map<const char*, Allocation>& allocations() {  // by base address
  static auto* table = new std::map<const char*, Allocation>();  // leaked: used until exit
  return *table;
}

void remember(const Allocation& a) {
  std::lock_guard<std::mutex> lock(gMemMu);
  allocations()[a.base] = a;
}

bool forget(const void* base, MemKind kind, Allocation* out) {
  std::lock_guard<std::mutex> lock(gMemMu);
  auto it = allocations().find(static_cast<const char*>(base));
  if (it == allocations().end() || it->second.kind != kind) return false;
  *out = it->second;
  allocations().erase(it);
  return true;
}

// What cudaMemcpy's `kind` allows: every kind is accepted (addresses are
// unified); out-of-range values are an error, as in CUDA.
bool validKind(cudaMemcpyKind kind) { return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault; }

// IPC handle layout inside cudaIpcMemHandle_t::reserved.
struct IpcHandle {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t size;
  int32_t device;
};
constexpr uint64_t kIpcMagic = 0x504c4149544950ULL;  // "PLAITIP"
static_assert(sizeof(IpcHandle) <= CUDA_IPC_HANDLE_SIZE);

}  // namespace

void rememberAllocation(const Allocation& a) { remember(a); }
bool forgetAllocation(const void* base, MemKind kind, Allocation* out) { return forget(base, kind, out); }

bool findAllocation(const void* p, Allocation* out) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(gMemMu);
  auto it = allocations().upper_bound(c);
  if (it == allocations().begin()) return false;
  --it;
  if (c >= it->second.base + it->second.size) return false;
  *out = it->second;
  return true;
}

}  // namespace plait_emu

using namespace plait_emu;

// A copy engine writes an aligned 4- or 8-byte word whole: a kernel polling
// that word (a FIFO's abort flag, set by cudaMemcpyAsync while the kernel
// runs) sees the old or the new value, never a torn one. Modelled with a
// relaxed atomic store, which ThreadSanitizer also takes as not racing with
// the kernel's atomic loads. Everything else is a plain memmove.
static void copyBytes(void* dst, const void* src, size_t count) {
  const auto aligned = [&](size_t n) { return count == n && reinterpret_cast<uintptr_t>(dst) % n == 0; };
  if (aligned(4)) {
    uint32_t v;
    std::memcpy(&v, src, 4);
    __atomic_store_n(static_cast<uint32_t*>(dst), v, __ATOMIC_RELAXED);
  } else if (aligned(8)) {
    uint64_t v;
    std::memcpy(&v, src, 8);
    __atomic_store_n(static_cast<uint64_t*>(dst), v, __ATOMIC_RELAXED);
  } else {
    std::memmove(dst, src, count);
  }
}

// What each emulated device reports as its memory (an H100's 80 GiB); one
// allocation cannot exceed it. Pages are only used when touched.
constexpr size_t kDeviceMemoryBytes = size_t(80) << 30;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (devPtr == nullptr) return fail(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  if (size > kDeviceMemoryBytes) return fail(cudaErrorMemoryAllocation);  // more than a device has
  int fd = ::memfd_create("plait-emu-device-memory", MFD_CLOEXEC);
  if (fd < 0) return fail(cudaErrorMemoryAllocation);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return fail(cudaErrorMemoryAllocation);
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return fail(cudaErrorMemoryAllocation);
  }
  remember(Allocation{static_cast<char*>(p), size, currentDevice(), MemKind::kDevice, fd});
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  Allocation a;
  if (!forget(devPtr, MemKind::kDevice, &a)) return fail(cudaErrorInvalidValue);
  drainDevice(a.device);  // cudaFree waits for the device, as CUDA's does
  ::munmap(a.base, a.size);
  ::close(a.fd);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  if (pHost == nullptr) return fail(cudaErrorInvalidValue);
  *pHost = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  remember(Allocation{static_cast<char*>(p), size, currentDevice(), MemKind::kHost, -1});
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Allocation a;
  if (!forget(ptr, MemKind::kHost, &a)) return fail(cudaErrorInvalidValue);
  ::munmap(a.base, a.size);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int) {
  if (ptr == nullptr || size == 0) return fail(cudaErrorInvalidValue);
  Allocation existing;
  if (findAllocation(ptr, &existing)) return fail(cudaErrorHostMemoryAlreadyRegistered);
  remember(Allocation{static_cast<char*>(ptr), size, currentDevice(), MemKind::kRegistered, -1});
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  Allocation a;
  if (!forget(ptr, MemKind::kRegistered, &a)) return fail(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  Allocation a;
  if (pDevice == nullptr || flags != 0 || !findAllocation(pHost, &a) ||
      (a.kind != MemKind::kHost && a.kind != MemKind::kRegistered))
    return fail(cudaErrorInvalidValue);
  *pDevice = pHost;  // unified addresses
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return fail(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  Allocation a;
  if (!findAllocation(ptr, &a)) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  const bool device = a.kind == MemKind::kDevice || a.kind == MemKind::kIpc || a.kind == MemKind::kMapped;
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
  attributes->device = a.device;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!validKind(kind) || (count > 0 && (dst == nullptr || src == nullptr))) return fail(cudaErrorInvalidValue);
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count > 0) enqueue(resolveStream(stream), [dst, src, count] { copyBytes(dst, src, count); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const cudaError_t err = cudaMemcpyAsync(dst, src, count, kind, nullptr);
  if (err == cudaSuccess) drain(resolveStream(nullptr));
  return err;
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (count > 0 && devPtr == nullptr) return fail(cudaErrorInvalidValue);
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (count > 0) enqueue(resolveStream(stream), [devPtr, value, count] { std::memset(devPtr, value, count); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  const cudaError_t err = cudaMemsetAsync(devPtr, value, count, nullptr);
  if (err == cudaSuccess) drain(resolveStream(nullptr));
  return err;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  *total = kDeviceMemoryBytes;
  size_t used = 0;
  {
    std::lock_guard<std::mutex> lock(gMemMu);
    for (const auto& [base, a] : allocations())
      if (a.kind == MemKind::kDevice && a.device == currentDevice()) used += a.size;
  }
  *free = used < *total ? *total - used : 0;
  return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  Allocation a;
  if (handle == nullptr || !findAllocation(devPtr, &a) || a.kind != MemKind::kDevice || a.base != devPtr)
    return fail(cudaErrorInvalidValue);
  IpcHandle h{kIpcMagic, static_cast<int32_t>(::getpid()), a.fd, a.size, a.device};
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int) {
  IpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof(h));
  if (devPtr == nullptr || h.magic != kIpcMagic || h.size == 0) return fail(cudaErrorInvalidValue);
  if (h.pid == ::getpid()) return fail(cudaErrorDeviceUninitialized);  // CUDA refuses one's own handle too
  if (h.device != currentDevice() && (!validDevice(h.device) || peerAccessDenied(currentDevice(), h.device)))
    return fail(cudaErrorPeerAccessUnsupported);  // memory of a device this one cannot reach
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail(cudaErrorMapBufferObjectFailed);
  void* p = ::mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return fail(cudaErrorMapBufferObjectFailed);
  remember(Allocation{static_cast<char*>(p), h.size, h.device, MemKind::kIpc, -1});
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  Allocation a;
  if (!forget(devPtr, MemKind::kIpc, &a)) return fail(cudaErrorInvalidValue);
  ::munmap(a.base, a.size);
  return cudaSuccess;
}

}  // extern "C"
