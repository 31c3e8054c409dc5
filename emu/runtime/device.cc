// device.cc — devices, errors, kernel registration and launch.
//
// PLAIT_EMU_DEVICES (default 8) emulated devices, all alike: compute
// capability 9.0, 132 multiprocessors, a 1 GHz clock (clock64() counts
// nanoseconds), 80 GiB, PCI bus id 0000:<device+1>:00.0, peers can access
// each other unless PLAIT_EMU_NO_PEER_ACCESS lists the pair ("0-1,2-3": those
// devices cannot reach each other, either way), so that transports' fallbacks
// for GPUs without peer access can be tested.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "internal.h"

namespace plait_emu {
namespace {

thread_local cudaError_t tLastError = cudaSuccess;
thread_local int tDevice = 0;
// Whether this thread has a current context, as the real runtime has after a
// call that uses the device (cudaSetDevice, an allocation, a stream...), not
// after cudaGetDevice alone; the driver's calls that need a context fail
// (CUDA_ERROR_INVALID_CONTEXT) on a thread that has none.
thread_local bool tContextBound = false;

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kClockKHz = 1000000;

std::mutex gKernelsMu;
std::atomic<uint64_t> gKernelsLaunched{0};
struct KernelRecord {
  KernelBinder bind = nullptr;
  std::string signature;  // the parameter types, as kernelHandle's __PRETTY_FUNCTION__ spells them
  uint64_t launches = 0;
};
std::map<const void*, KernelRecord>& kernels() {
  static auto* table = new std::map<const void*, KernelRecord>();
  return *table;
}

}  // namespace

cudaError_t fail(cudaError_t err) {
  if (err != cudaSuccess && err != cudaErrorNotReady) tLastError = err;
  return err;
}

int deviceCount() {
  static const int count = [] {
    const char* text = std::getenv("PLAIT_EMU_DEVICES");
    int n = text ? std::atoi(text) : 8;
    return n >= 0 && n <= 64 ? n : 8;
  }();
  return count;
}

bool validDevice(int device) { return device >= 0 && device < deviceCount(); }

// PLAIT_EMU_NO_PEER_ACCESS: pairs "a-b" separated by commas; bit b of
// denied[a] (and a of denied[b]) is set for each.
bool peerAccessDenied(int a, int b) {
  static const std::array<uint64_t, 64> denied = [] {
    std::array<uint64_t, 64> bits{};
    const char* text = std::getenv("PLAIT_EMU_NO_PEER_ACCESS");
    for (const char* p = text; p != nullptr && *p != '\0';) {
      char* end = nullptr;
      const long x = std::strtol(p, &end, 10);
      if (end == p || *end != '-') break;
      p = end + 1;
      const long y = std::strtol(p, &end, 10);
      if (end == p) break;
      if (x >= 0 && x < 64 && y >= 0 && y < 64) {
        bits[x] |= uint64_t(1) << y;
        bits[y] |= uint64_t(1) << x;
      }
      p = *end == ',' ? end + 1 : end;
      if (*end != ',' && *end != '\0') break;
    }
    return bits;
  }();
  return ((denied[a] >> b) & 1) != 0;
}

bool dmabufSupported() {
  static const bool supported = [] {
    const char* text = std::getenv("PLAIT_EMU_NO_DMABUF");
    return text == nullptr || std::strcmp(text, "1") != 0;
  }();
  return supported;
}

namespace {

// Peer access enabled from each device, as bits over peers.
std::mutex gPeerMu;
std::array<uint64_t, 64> gPeerEnabled{};

}  // namespace
int currentDevice() {
  tContextBound = true;
  return tDevice;
}

int boundDevice() { return tContextBound ? tDevice : -1; }

const void* registerKernel(const void* kernel, KernelBinder bind, const char* signature) {
  std::lock_guard<std::mutex> lock(gKernelsMu);
  kernels().emplace(kernel, KernelRecord{bind, signature ? signature : "", 0});
  return kernel;
}

KernelBinder findKernel(const void* kernel) {
  std::lock_guard<std::mutex> lock(gKernelsMu);
  auto it = kernels().find(kernel);
  return it == kernels().end() ? nullptr : it->second.bind;
}

void countLaunch(const void* kernel) {
  gKernelsLaunched.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(gKernelsMu);
  if (auto it = kernels().find(kernel); it != kernels().end()) ++it->second.launches;
}

uint64_t kernelsLaunchedTaking(const char* typeName) {
  std::lock_guard<std::mutex> lock(gKernelsMu);
  uint64_t n = 0;
  for (const auto& [kernel, record] : kernels())
    if (record.signature.find(typeName) != std::string::npos) n += record.launches;
  return n;
}

}  // namespace plait_emu

using namespace plait_emu;

extern "C" {

cudaError_t cudaGetLastError(void) {
  cudaError_t e = tLastError;
  tLastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return tLastError; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define PLAIT_EMU_NAME(e) \
  case e: return #e;
    PLAIT_EMU_NAME(cudaSuccess)
    PLAIT_EMU_NAME(cudaErrorInvalidValue)
    PLAIT_EMU_NAME(cudaErrorMemoryAllocation)
    PLAIT_EMU_NAME(cudaErrorInitializationError)
    PLAIT_EMU_NAME(cudaErrorInvalidConfiguration)
    PLAIT_EMU_NAME(cudaErrorInvalidDevice)
    PLAIT_EMU_NAME(cudaErrorInvalidDeviceFunction)
    PLAIT_EMU_NAME(cudaErrorInvalidResourceHandle)
    PLAIT_EMU_NAME(cudaErrorNotReady)
    PLAIT_EMU_NAME(cudaErrorNoDevice)
    PLAIT_EMU_NAME(cudaErrorHostMemoryAlreadyRegistered)
    PLAIT_EMU_NAME(cudaErrorHostMemoryNotRegistered)
    PLAIT_EMU_NAME(cudaErrorMapBufferObjectFailed)
    PLAIT_EMU_NAME(cudaErrorDeviceUninitialized)
    PLAIT_EMU_NAME(cudaErrorNotSupported)
    PLAIT_EMU_NAME(cudaErrorPeerAccessUnsupported)
    PLAIT_EMU_NAME(cudaErrorPeerAccessAlreadyEnabled)
#undef PLAIT_EMU_NAME
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    default: return cudaGetErrorName(error);
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = deviceCount();
  return deviceCount() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  tDevice = device;
  tContextBound = true;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = tDevice;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrClockRate: *value = kClockKHz; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrPciBusId: *value = device + 1; break;
    case cudaDevAttrPciDeviceId: *value = 0; break;
    case cudaDevAttrPciDomainId: *value = 0; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "Plait emulated device %d", device);
  prop->totalGlobalMem = size_t(80) << 30;
  prop->sharedMemPerBlock = 48 << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = kMaxThreadsPerBlock;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 1 << 30;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  prop->pciBusID = device + 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return fail(cudaErrorInvalidValue);
  if (!validDevice(device)) return fail(cudaErrorInvalidDevice);
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", device + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return fail(cudaErrorInvalidValue);
  if (!validDevice(device) || !validDevice(peerDevice)) return fail(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice && !peerAccessDenied(device, peerDevice);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (device == nullptr || pciBusId == nullptr) return fail(cudaErrorInvalidValue);
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return fail(cudaErrorInvalidValue);
  const int d = static_cast<int>(bus) - 1;
  if (domain != 0 || dev != 0 || fn != 0 || !validDevice(d)) return fail(cudaErrorInvalidDevice);
  *device = d;
  return cudaSuccess;
}

// As CUDA: access from the current device to `peerDevice`; an error when the
// pair cannot peer, and cudaErrorPeerAccessAlreadyEnabled the second time.
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (!validDevice(peerDevice)) return fail(cudaErrorInvalidDevice);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  const int self = currentDevice();
  if (self == peerDevice || peerAccessDenied(self, peerDevice)) return fail(cudaErrorPeerAccessUnsupported);
  std::lock_guard<std::mutex> lock(gPeerMu);
  const uint64_t bit = uint64_t(1) << peerDevice;
  if ((gPeerEnabled[self] & bit) != 0) return fail(cudaErrorPeerAccessAlreadyEnabled);
  gPeerEnabled[self] |= bit;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return fail(cudaErrorInvalidValue);
  if (findKernel(func) == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  std::memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  attr->numRegs = 32;
  attr->ptxVersion = attr->binaryVersion = 90;
  return cudaSuccess;
}

}  // extern "C"

namespace plait_emu {
uint64_t kernelsLaunched() { return gKernelsLaunched.load(std::memory_order_relaxed); }
}  // namespace plait_emu

extern "C" {

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                             cudaStream_t stream) {
  KernelBinder bind = findKernel(func);
  if (bind == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  const unsigned long long threads = 1ULL * blockDim.x * blockDim.y * blockDim.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || gridDim.x == 0 || gridDim.y == 0 || gridDim.z == 0 ||
      sharedMem > (48u << 10))
    return fail(cudaErrorInvalidConfiguration);
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  std::function<void()> body = bind(func, args);  // copies the arguments now
  countLaunch(func);
  enqueue(resolveStream(stream), [body = std::move(body), gridDim, blockDim] { runGrid(body, gridDim, blockDim); });
  return cudaSuccess;
}

}  // extern "C"
