#include "base/cuda_probe.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>

namespace plait::cuda {
namespace {

// The start of the runtime's cudaPointerAttributes (CUDA 11 and later: type,
// device, devicePointer, hostPointer), with room for what later versions add.
struct RuntimePointerAttributes {
  int type;  // cudaMemoryType: 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* devicePointer;
  void* hostPointer;
  long reserved[32];
};
using RuntimeQuery = int (*)(void* attributes, const void* ptr);  // fills a RuntimePointerAttributes
using RuntimeClearError = int (*)();
using RuntimeGetDevice = int (*)(int*);
using RuntimeSetDevice = int (*)(int);
using RuntimeDeviceCount = int (*)(int*);
using RuntimeBusId = int (*)(char*, int, int);
using DriverQuery = int (*)(void* data, int attribute, uintptr_t ptr);
constexpr int kRuntimeDevice = 2, kRuntimeManaged = 3;
constexpr int kDriverMemoryTypeAttribute = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kDriverOrdinalAttribute = 9;     // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kDriverDevice = 2, kDriverUnified = 4;

struct Probe {
  RuntimeQuery runtime = nullptr;
  RuntimeClearError clearError = nullptr;
  RuntimeGetDevice getDevice = nullptr;
  RuntimeSetDevice setDevice = nullptr;
  RuntimeDeviceCount deviceCount = nullptr;
  RuntimeBusId busId = nullptr;
  DriverQuery driver = nullptr;
  // Only an installed runtime allocates (a runtime merely found in the
  // process is not the executor's).
  int (*malloc)(void**, size_t) = nullptr;
  int (*free)(void*) = nullptr;
  const char* (*errorString)(int) = nullptr;
  int (*vmmAllocate)(void**, size_t, std::string*) = nullptr;
  int (*vmmFree)(void*, std::string*) = nullptr;
};

// Set once by installRuntime (at load, before any query).
std::atomic<const Probe*> gInstalled{nullptr};

const Probe& probe() {
  if (const Probe* installed = gInstalled.load(std::memory_order_acquire)) return *installed;
  static const Probe p = [] {
    Probe q;
    q.runtime = reinterpret_cast<RuntimeQuery>(::dlsym(RTLD_DEFAULT, "cudaPointerGetAttributes"));
    q.clearError = reinterpret_cast<RuntimeClearError>(::dlsym(RTLD_DEFAULT, "cudaGetLastError"));
    q.getDevice = reinterpret_cast<RuntimeGetDevice>(::dlsym(RTLD_DEFAULT, "cudaGetDevice"));
    q.setDevice = reinterpret_cast<RuntimeSetDevice>(::dlsym(RTLD_DEFAULT, "cudaSetDevice"));
    q.deviceCount = reinterpret_cast<RuntimeDeviceCount>(::dlsym(RTLD_DEFAULT, "cudaGetDeviceCount"));
    q.busId = reinterpret_cast<RuntimeBusId>(::dlsym(RTLD_DEFAULT, "cudaDeviceGetPCIBusId"));
    if (q.runtime == nullptr) {
      if (void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD))  // only if already loaded
        q.driver = reinterpret_cast<DriverQuery>(::dlsym(driver, "cuPointerGetAttribute"));
    }
    return q;
  }();
  return p;
}

}  // namespace

void installRuntime(const RuntimeEntryPoints& e) {
  static Probe installed;
  installed.runtime = e.pointerAttributes;
  installed.clearError = e.getLastError;
  installed.getDevice = e.getDevice;
  installed.setDevice = e.setDevice;
  installed.deviceCount = e.getDeviceCount;
  installed.busId = e.deviceGetPCIBusId;
  installed.malloc = e.malloc;
  installed.free = e.free;
  installed.errorString = e.errorString;
  installed.vmmAllocate = e.vmmAllocate;
  installed.vmmFree = e.vmmFree;
  gInstalled.store(&installed, std::memory_order_release);
}

bool runtimeInstalled() { return gInstalled.load(std::memory_order_acquire) != nullptr; }

int allocateDevice(void** ptr, size_t bytes) {
  const Probe& p = probe();
  if (p.malloc == nullptr) return -1;
  const int err = p.malloc(ptr, bytes);
  if (err != 0 && p.clearError != nullptr) p.clearError();
  return err;
}

int freeDevice(void* ptr) {
  const Probe& p = probe();
  if (p.free == nullptr) return -1;
  const int err = p.free(ptr);
  if (err != 0 && p.clearError != nullptr) p.clearError();
  return err;
}

int allocateVmm(void** ptr, size_t bytes, std::string* why) {
  const Probe& p = probe();
  if (p.vmmAllocate == nullptr) {
    *why = "no CUDA runtime";
    return 1;
  }
  return p.vmmAllocate(ptr, bytes, why);
}

int freeVmm(void* ptr, std::string* why) {
  const Probe& p = probe();
  if (p.vmmFree == nullptr) {
    *why = "no CUDA runtime";
    return 2;
  }
  return p.vmmFree(ptr, why);
}

const char* errorString(int error) {
  const Probe& p = probe();
  if (error == -1 || p.errorString == nullptr) return "no CUDA runtime";
  return p.errorString(error);
}

namespace {

// True when the runtime sees no device (none installed, no driver, or
// CUDA_VISIBLE_DEVICES hides them all): then no pointer is device memory,
// and deviceOf need not ask the runtime about every buffer of every call
// (a call into it and cudaGetLastError after it fails: a tenth of a small
// host collective's time). Asked once; a process's devices do not change.
bool noDevices(const Probe& p) {
  static const bool none = [&p] {
    if (p.deviceCount == nullptr) return false;  // the driver's query alone: ask it per pointer
    int n = 0;
    if (p.deviceCount(&n) != 0) {
      if (p.clearError != nullptr) p.clearError();
      return true;
    }
    return n == 0;
  }();
  return none;
}

}  // namespace

int deviceOf(const void* ptr) {
  const Probe& p = probe();
  if (ptr == nullptr) return -1;
  if (p.runtime != nullptr) {
    if (noDevices(p)) return -1;
    RuntimePointerAttributes a{};
    if (p.runtime(&a, ptr) != 0) {
      if (p.clearError != nullptr) p.clearError();  // old runtimes fail for plain host memory
      return -1;
    }
    if (a.type != kRuntimeDevice && a.type != kRuntimeManaged) return -1;
    return a.device >= 0 ? a.device : 0;
  }
  if (p.driver != nullptr) {
    unsigned type = 0;
    if (p.driver(&type, kDriverMemoryTypeAttribute, reinterpret_cast<uintptr_t>(ptr)) != 0) return -1;
    if (type != kDriverDevice && type != kDriverUnified) return -1;
    int ordinal = 0;
    if (p.driver(&ordinal, kDriverOrdinalAttribute, reinterpret_cast<uintptr_t>(ptr)) != 0) return 0;
    return ordinal;
  }
  return -1;
}

bool isDeviceMemory(const void* ptr) { return deviceOf(ptr) >= 0; }

bool runtimeLoaded() { return probe().getDevice != nullptr; }

int deviceCount() {
  const Probe& p = probe();
  int n = 0;
  if (p.deviceCount == nullptr) return 0;
  if (p.deviceCount(&n) != 0) {
    if (p.clearError != nullptr) p.clearError();
    return 0;
  }
  return n;
}

int currentDevice() {
  const Probe& p = probe();
  int device = -1;
  if (p.getDevice == nullptr) return -1;
  if (p.getDevice(&device) != 0) {
    if (p.clearError != nullptr) p.clearError();
    return -1;
  }
  return device;
}

bool setCurrentDevice(int device) {
  const Probe& p = probe();
  if (p.setDevice == nullptr) return false;
  if (p.setDevice(device) != 0) {
    if (p.clearError != nullptr) p.clearError();
    return false;
  }
  return true;
}

bool busIdOf(int device, char* out, int outBytes) {
  const Probe& p = probe();
  if (out == nullptr || outBytes < 1) return false;
  out[0] = '\0';
  if (p.busId == nullptr) return false;
  if (p.busId(out, outBytes, device) != 0) {
    if (p.clearError != nullptr) p.clearError();
    out[0] = '\0';
    return false;
  }
  out[outBytes - 1] = '\0';
  return true;
}

}  // namespace plait::cuda
