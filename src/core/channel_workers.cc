#include "core/channel_workers.h"

#include "base/no_throw.h"

namespace plait {

ChannelWorkers::ChannelWorkers(int count) : results_(count + 1) {
  for (int i = 0; i < count; ++i) threads_.emplace_back([this, i] { loop(i + 1); });
}

ChannelWorkers::~ChannelWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ChannelWorkers::loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= activeChannels_) continue;
      job = job_;
    }
    Status s = noThrow([&] { return (*job)(index); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_[index] = std::move(s);
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

Status ChannelWorkers::runChannels(int channels, const std::function<Status(int)>& job) {
  if (channels <= 1 || threads_.empty()) return job(0);
  if (channels > count() + 1) channels = count() + 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    activeChannels_ = channels;
    pending_ = channels - 1;
    ++generation_;
  }
  wake_.notify_all();
  Status first = job(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  for (int c = 1; c < channels; ++c)
    if (first.isOk() && !results_[c].isOk()) first = results_[c];
  return first;
}

}  // namespace plait
