// channel_workers.h — threads that run channels 1..n-1 of an operation.
//
// Channel 0 always runs on the calling thread, so a single-channel operation
// never pays a thread hand-off. For more channels the caller posts one job
// for all workers and waits for them; a job is a function called with the
// channel index. Workers sleep on a condition variable between operations.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "plait/status.hpp"

namespace plait {

class ChannelWorkers {
 public:
  // Starts `count` threads (channels 1..count).
  explicit ChannelWorkers(int count);
  ~ChannelWorkers();  // joins; a running job must already have ended
  int count() const { return static_cast<int>(threads_.size()); }

  // Runs job(c) for c in 1..channels-1 on the workers and job(0) here, and
  // returns the first non-OK status. The job itself must honour deadlines
  // and the abort flag; this call only waits for it.
  Status runChannels(int channels, const std::function<Status(int)>& job);

 private:
  void loop(int index);

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<Status(int)>* job_ = nullptr;
  int activeChannels_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  std::vector<Status> results_;
  bool stop_ = false;
};

}  // namespace plait
