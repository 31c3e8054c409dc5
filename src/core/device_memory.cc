#include "core/device_memory.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "base/config.h"
#include "base/cuda_probe.h"
#include "base/log.h"

namespace plait::device_memory {
namespace {

PLAIT_PARAM_STRING(kMemAlloc, "MEM_ALLOC", "auto",
                   "what ncclMemAlloc returns: auto (device memory of the current CUDA device when there is one, "
                   "else host memory local peers can map), host, or device");

struct Table {
  std::mutex mu;
  std::unordered_map<const void*, size_t> live;  // base -> bytes
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
  const int err = cuda::allocateDevice(&p, bytes);
  if (err != 0 || p == nullptr)
    return Status(Code::kCudaError, "cudaMalloc of " + std::to_string(bytes) + " bytes on CUDA device " +
                                        std::to_string(cuda::currentDevice()) + " failed: " + cuda::errorString(err));
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.live[p] = bytes;
  PLAIT_TRACE(kAlloc, "ncclMemAlloc: %zu bytes of device memory at %p", bytes, p);
  return p;
}

bool owns(const void* ptr) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.live.count(ptr) != 0;
}

Status release(void* ptr) {
  Table& t = table();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (t.live.erase(ptr) == 0)
      return invalidArgument("ptr was not allocated by ncclMemAlloc as device memory (or was already freed)");
  }
  const int err = cuda::freeDevice(ptr);
  if (err != 0) return Status(Code::kCudaError, std::string("cudaFree failed: ") + cuda::errorString(err));
  return Status::ok();
}

}  // namespace plait::device_memory
