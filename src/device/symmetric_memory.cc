#include "device/symmetric_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "device/driver_api.h"
#include "device/peer_memory.h"
#include "device/scoped_device.h"
#include "device/vmm.h"

namespace plait::device {
namespace {

constexpr size_t k4G = size_t(1) << 32;

Status cudaFailed(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  return Status(Code::kCudaError, std::string(call) + " failed: " + cudaGetErrorString(err));
}

class CudaSymmetricMemory final : public SymmetricMemory {
 public:
  explicit CudaSymmetricMemory(int cudaDev) : dev_(cudaDev) {}

  Status probe() override {
    std::string why;
    if (vmm::supported(dev_, &why) != vmm::Outcome::kOk)
      return invalidUsage("CUDA virtual memory management is unavailable: " + why);
    return Status::ok();
  }

  size_t granularity() override {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev_;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    const DriverApi& d = driverApi();
    if (d.getGranularity == nullptr || d.getGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        g == 0)
      g = size_t(2) << 20;
    return g;
  }

  size_t deviceMemoryBytes() override {
    ScopedDevice scope(dev_);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      total = k4G;
    }
    return (total + k4G - 1) / k4G * k4G;
  }

  Result<void*> reserve(size_t bytes) override {
    ScopedDevice scope(dev_);
    CUdeviceptr at = 0;
    if (CUresult r = driverApi().reserve(&at, bytes, granularity(), 0, 0); r != CUDA_SUCCESS)
      return Status(Code::kCudaError, driverFailure("cuMemAddressReserve", r) + " (" + std::to_string(bytes) +
                                          " bytes of address space)");
    return reinterpret_cast<void*>(at);
  }

  void unreserve(void* at, size_t bytes) override {
    ScopedDevice scope(dev_);
    (void)driverApi().addressFree(reinterpret_cast<CUdeviceptr>(at), bytes);
  }

  Result<DeviceRangeExport> exportRange(const void* ptr, size_t bytes, int* fd) override {
    ScopedDevice scope(dev_);
    return peer_memory::exportRange(ptr, bytes, fd);
  }

  Result<DeviceMapping> map(const DeviceRangeExport& range, int fd, void* at) override {
    ScopedDevice scope(dev_);
    return peer_memory::importRange(range, fd, at);
  }

  Status unmap(const DeviceMapping& mapping) override {
    ScopedDevice scope(dev_);
    return peer_memory::closeImported(mapping);
  }

  Result<void*> upload(const void* host, size_t bytes) override {
    ScopedDevice scope(dev_);
    void* p = nullptr;
    if (cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) return cudaFailed("cudaMalloc", err);
    if (cudaError_t err = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice); err != cudaSuccess) {
      (void)cudaFree(p);
      return cudaFailed("cudaMemcpy", err);
    }
    hold(p, bytes);
    return p;
  }

  void freeUpload(void* device) override {
    ScopedDevice scope(dev_);
    drop(device);
    if (cudaFree(device) != cudaSuccess) (void)cudaGetLastError();
  }

  Result<void*> allocateZeroed(size_t bytes) override {
    ScopedDevice scope(dev_);
    void* p = nullptr;
    std::string why;
    if (vmm::allocate(&p, bytes, &why) != vmm::Outcome::kOk) return Status(Code::kCudaError, why);
    if (cudaError_t err = cudaMemset(p, 0, bytes); err != cudaSuccess) {
      (void)vmm::release(p, &why);
      return cudaFailed("cudaMemset", err);
    }
    const size_t g = granularity();  // what vmm::allocate rounds to
    hold(p, (bytes + g - 1) / g * g);
    return p;
  }

  Status release(void* ptr) override {
    ScopedDevice scope(dev_);
    drop(ptr);
    std::string why;
    if (vmm::release(ptr, &why) != vmm::Outcome::kOk) return Status(Code::kCudaError, why);
    return Status::ok();
  }

  uint64_t bytesHeld() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

 private:
  void hold(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = bytes;
    held_ += bytes;
  }
  void drop(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sizes_.find(p); it != sizes_.end()) {
      held_ -= it->second;
      sizes_.erase(it);
    }
  }

  const int dev_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;  // what upload / allocateZeroed handed out
  uint64_t held_ = 0;
};

}  // namespace

std::shared_ptr<SymmetricMemory> makeSymmetricMemory(int cudaDev) {
  return std::make_shared<CudaSymmetricMemory>(cudaDev);
}

}  // namespace plait::device
