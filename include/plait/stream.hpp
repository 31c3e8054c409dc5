// plait/stream.hpp — an asynchronous, in-order host stream.
//
// The host counterpart of a CUDA stream: operations enqueued on it run one
// after another on the stream's own thread, and the caller continues at once.
// Pass handle() where the NCCL API takes a cudaStream_t; a null stream
// instead means "run now and return when complete".
//
//   plait::HostStream stream;
//   ncclAllReduce(in, out, n, ncclFloat, ncclSum, comm, stream.handle());
//   ... overlap other work ...
//   plait::Status s = stream.synchronize();
//
// Thread-safe: several threads may enqueue; work still runs in one order.
// The destructor waits for queued work (up to PLAIT_TIMEOUT).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "nccl.h"
#include "plait/status.hpp"

namespace plait {

class HostStream {
 public:
  HostStream();
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // The value to pass as `stream` to the C API.
  cudaStream_t handle() { return reinterpret_cast<cudaStream_t>(this); }
  // The stream behind a handle, or nullptr if it is not a live HostStream.
  static HostStream* fromHandle(cudaStream_t handle);

  // Queues work; returns immediately. The work's error (if any) is kept
  // and reported by synchronize().
  void enqueue(std::function<Status()> work);
  // Blocks until everything queued so far has run or timeoutMs passed;
  // returns the first error since the last synchronize().
  Status synchronize(int64_t timeoutMs = -1);
  // True when nothing is queued or running.
  bool idle();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<std::function<Status()>> queue_;
  bool running_ = false;
  bool stop_ = false;
  Status firstError_;
  std::thread thread_;
};

}  // namespace plait
