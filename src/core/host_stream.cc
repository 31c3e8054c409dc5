#include "core/host_stream.h"

#include <chrono>
#include <unordered_set>

#include "base/no_throw.h"
#include "core/comm.h"

namespace plait {
namespace {

std::mutex& registryMu() {
  static std::mutex mu;
  return mu;
}
std::unordered_set<const HostStream*>& registry() {
  static auto* set = new std::unordered_set<const HostStream*>();  // never destroyed: streams may outlive statics
  return *set;
}

}  // namespace

HostStream::HostStream() {
  thread_ = std::thread([this] { loop(); });
  std::lock_guard<std::mutex> lock(registryMu());
  registry().insert(this);
}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(registryMu());
    registry().erase(this);
  }
  (void)synchronize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

HostStream* HostStream::fromHandle(cudaStream_t handle) {
  auto* s = reinterpret_cast<HostStream*>(handle);
  std::lock_guard<std::mutex> lock(registryMu());
  return registry().count(s) ? s : nullptr;
}

void HostStream::enqueue(std::function<Status()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  work_.notify_one();
}

void HostStream::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left
    auto work = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    Status s = noThrow(work);
    lock.lock();
    running_ = false;
    if (!s.isOk() && firstError_.isOk()) firstError_ = std::move(s);
    if (queue_.empty()) idle_.notify_all();
  }
}

bool HostStream::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !running_;
}

Status HostStream::synchronize(int64_t timeoutMs) {
  if (timeoutMs < 0) timeoutMs = operationTimeoutMs();
  std::unique_lock<std::mutex> lock(mu_);
  if (!idle_.wait_for(lock, std::chrono::milliseconds(timeoutMs), [&] { return queue_.empty() && !running_; }))
    return remoteError("host stream work did not complete within " + std::to_string(timeoutMs) + " ms");
  Status s = std::move(firstError_);
  firstError_ = Status();
  return s;
}

}  // namespace plait
