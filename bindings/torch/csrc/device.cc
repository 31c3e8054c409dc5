// device.cc — see device.h.
#include "device.h"

#include <c10/util/Exception.h>

#if defined(PLAIT_TORCH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace plait_torch {

#if defined(PLAIT_TORCH_CUDA)

bool deviceBuilt() { return true; }

namespace {

class EventCompletion final : public DeviceCompletion {
 public:
  EventCompletion(const at::cuda::CUDAStream& stream) : device_(stream.device_index()) {
    // Timing off: cudaEventDisableTiming, the cheap kind NCCL's backend uses too.
    event_.record(stream);
  }
  bool query() override { return event_.query(); }
  void block() override { event_.block(at::cuda::getCurrentCUDAStream(device_)); }
  void synchronize() override { event_.synchronize(); }

 private:
  c10::DeviceIndex device_;
  at::cuda::CUDAEvent event_;
};

}  // namespace

struct DeviceScope::Guard {
  explicit Guard(const at::Device& device) : guard(device), stream(at::cuda::getCurrentCUDAStream(device.index())) {}
  c10::cuda::CUDAGuard guard;
  at::cuda::CUDAStream stream;
};

DeviceScope::DeviceScope(const at::Device& device) {
  TORCH_CHECK(device.is_cuda(), "plait: a device scope on ", device);
  guard_ = std::make_unique<Guard>(device);
  stream_ = guard_->stream.stream();
}

std::shared_ptr<DeviceCompletion> DeviceScope::record() const {
  return std::make_shared<EventCompletion>(guard_->stream);
}

#else

bool deviceBuilt() { return false; }

struct DeviceScope::Guard {};

DeviceScope::DeviceScope(const at::Device& device) {
  TORCH_CHECK(false, "plait: a tensor on ", device, "; this plait_torch was built against a torch without CUDA");
}

std::shared_ptr<DeviceCompletion> DeviceScope::record() const { return nullptr; }

#endif

DeviceScope::~DeviceScope() = default;

}  // namespace plait_torch
