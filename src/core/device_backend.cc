#include "core/device_backend.h"

#include <atomic>
#include <utility>
#include <vector>

namespace plait {
namespace {
std::atomic<DeviceBackendFactory> gFactory{nullptr};
std::atomic<NetGpuMemoryFactory> gNetGpuMemory{nullptr};
thread_local DeviceGroupScope* tlsScope = nullptr;
}  // namespace

DeviceGroupScope::DeviceGroupScope() : outer_(tlsScope) {
  if (outer_ == nullptr) tlsScope = this;  // nested groups: the outermost scope collects
}

DeviceGroupScope::~DeviceGroupScope() {
  if (outer_ != nullptr || tlsScope != this) return;
  tlsScope = nullptr;
  for (auto& [backend, stream] : joins_) backend->joinBack(stream);
}

DeviceGroupScope* DeviceGroupScope::current() { return tlsScope; }

DeviceGroupScope::Adopt::Adopt(DeviceGroupScope* scope) : saved_(tlsScope) { tlsScope = scope; }
DeviceGroupScope::Adopt::~Adopt() { tlsScope = saved_; }

void DeviceGroupScope::defer(DeviceBackend* backend, void* userStream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& j : joins_)
    if (j.first == backend && j.second == userStream) return;
  joins_.emplace_back(backend, userStream);
}

DeviceBackendFactory deviceBackendFactory() { return gFactory.load(std::memory_order_acquire); }

void registerDeviceBackend(DeviceBackendFactory factory) { gFactory.store(factory, std::memory_order_release); }

NetGpuMemoryFactory netGpuMemoryFactory() { return gNetGpuMemory.load(std::memory_order_acquire); }

void registerNetGpuMemory(NetGpuMemoryFactory factory) { gNetGpuMemory.store(factory, std::memory_order_release); }

}  // namespace plait
