#include "core/device_memory.h"

#include <map>
#include <mutex>
#include <string>

#include "base/config.h"
#include "base/cuda_probe.h"
#include "base/log.h"

namespace plait::device_memory {
namespace {

PLAIT_PARAM_STRING(kMemAlloc, "MEM_ALLOC", "auto",
                   "what ncclMemAlloc returns: auto (device memory of the current CUDA device when there is one, "
                   "else host memory local peers can map), host, or device");

PLAIT_PARAM_INT(kCuMem, "CUMEM_ENABLE", 1,
                "ncclMemAlloc's device memory: 1 = CUDA virtual memory management (cuMem, with a POSIX fd peers "
                "can map), falling back to cudaMalloc where the driver lacks it; 0 = cudaMalloc");

struct Entry {
  size_t bytes = 0;
  int registrations = 0;  // live ncclCommRegister/WindowRegister ranges inside it
  bool vmm = false;       // cuMem (else cudaMalloc)
};

struct Table {
  std::mutex mu;
  std::map<uintptr_t, Entry> live;  // by base address
};

Table& table() {
  static Table* t = new Table;  // never destroyed: frees may come from atexit handlers
  return *t;
}

bool haveDevice() { return cuda::runtimeInstalled() && cuda::deviceCount() > 0 && cuda::currentDevice() >= 0; }

}  // namespace

Result<bool> wanted() {
  const std::string& mode = kMemAlloc.get();
  if (mode == "host") return false;
  if (mode == "auto") return haveDevice();
  if (mode == "device") {
    if (haveDevice()) return true;
    return invalidUsage(std::string("PLAIT_MEM_ALLOC=device, but ") +
                        (cuda::runtimeInstalled() ? "this process sees no CUDA device"
                                                  : "this build of Plait has no CUDA executor"));
  }
  return invalidUsage("PLAIT_MEM_ALLOC is \"" + mode + "\"; expected auto, host or device");
}

Result<void*> allocate(size_t bytes) {
  void* p = nullptr;
  bool vmm = false;
  if (kCuMem.get() != 0) {
    std::string why;
    const int outcome = cuda::allocateVmm(&p, bytes, &why);
    if (outcome == 2) return Status(Code::kCudaError, "ncclMemAlloc of " + std::to_string(bytes) + " bytes: " + why);
    vmm = outcome == 0;
    if (!vmm) {
      static std::once_flag said;
      std::call_once(said, [&] {
        PLAIT_INFO(kAlloc, "ncclMemAlloc: cudaMalloc instead of CUDA virtual memory management: %s", why.c_str());
      });
    }
  }
  if (!vmm) {
    const int err = cuda::allocateDevice(&p, bytes);
    if (err != 0 || p == nullptr)
      return Status(Code::kCudaError, "cudaMalloc of " + std::to_string(bytes) + " bytes on CUDA device " +
                                          std::to_string(cuda::currentDevice()) + " failed: " + cuda::errorString(err));
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.live[reinterpret_cast<uintptr_t>(p)] = Entry{bytes, 0, vmm};
  PLAIT_TRACE(kAlloc, "ncclMemAlloc: %zu bytes of device memory at %p (%s)", bytes, p, vmm ? "cuMem" : "cudaMalloc");
  return p;
}

bool owns(const void* ptr) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.live.count(reinterpret_cast<uintptr_t>(ptr)) != 0;
}

void* baseOf(const void* ptr, size_t bytes) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.live.upper_bound(p);
  if (it == t.live.begin()) return nullptr;
  --it;
  const uintptr_t offset = p - it->first;
  if (offset >= it->second.bytes || it->second.bytes - offset < bytes) return nullptr;
  return reinterpret_cast<void*>(it->first);
}

bool addRegistration(void* base) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.live.find(reinterpret_cast<uintptr_t>(base));
  if (it == t.live.end()) return false;
  ++it->second.registrations;
  return true;
}

void dropRegistration(void* base) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.live.find(reinterpret_cast<uintptr_t>(base));
  if (it != t.live.end() && it->second.registrations > 0) --it->second.registrations;
}

Status release(void* ptr) {
  Table& t = table();
  bool vmm = false;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == t.live.end())
      return invalidArgument("ptr was not allocated by ncclMemAlloc as device memory (or was already freed)");
    if (it->second.registrations > 0)
      return invalidArgument("ptr is still registered with a communicator (" +
                             std::to_string(it->second.registrations) +
                             " registration(s)); call ncclCommDeregister first");
    vmm = it->second.vmm;
    t.live.erase(it);
  }
  if (vmm) {
    std::string why;
    if (cuda::freeVmm(ptr, &why) != 0) return Status(Code::kCudaError, "ncclMemFree: " + why);
    return Status::ok();
  }
  const int err = cuda::freeDevice(ptr);
  if (err != 0) return Status(Code::kCudaError, std::string("cudaFree failed: ") + cuda::errorString(err));
  return Status::ok();
}

}  // namespace plait::device_memory
