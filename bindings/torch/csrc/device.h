// device.h — CUDA tensors through plait_torch: torch's current stream and an
// event after an operation, behind an interface free of CUDA's headers.
//
// An operation on CUDA tensors runs as NCCL's backend runs it, but on the
// caller's current stream rather than a stream of its own: Plait's calls are
// enqueued there on the caller's thread (device memory on a stream is the
// library's device path), so they follow the kernels that wrote the inputs
// and precede whatever the caller enqueues next, and the caching allocator
// needs no recordStream. The Work holds an event recorded after them:
// isCompleted() queries it, wait() makes the then-current stream wait on it,
// synchronize() waits on the host.
//
// Built with CUDA when torch has it (setup.py defines PLAIT_TORCH_CUDA); else
// every entry point refuses. Unverified on hardware: no GPU where this was
// written; the CPU path is what CI runs.
#pragma once

#include <memory>

#include <ATen/ATen.h>

#include "nccl.h"

namespace plait_torch {

// Whether this build runs CUDA tensors (torch had CUDA when it was built).
bool deviceBuilt();

// What happened on the device after an operation was enqueued.
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  virtual bool query() = 0;        // the operation's kernels have finished
  virtual void block() = 0;        // the caller's current stream waits for them
  virtual void synchronize() = 0;  // the host waits for them
};

// The caller's current stream on `device` (made current for the call).
class DeviceScope {
 public:
  explicit DeviceScope(const at::Device& device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaStream_t stream() const { return stream_; }
  // An event recorded now on stream().
  std::shared_ptr<DeviceCompletion> record() const;

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace plait_torch
