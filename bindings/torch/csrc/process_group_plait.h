// process_group_plait.h — Plait as a torch.distributed (c10d) backend.
//
// ProcessGroupPlait is a c10d::Backend over Plait's public C API (nccl.h,
// linked from libplait.so, never NVIDIA's libnccl.so.2 that torch itself
// loads) and its host streams (plait/stream.hpp). Every operation is queued
// on the group's HostStream and returns at once with a PlaitWork; the
// stream's thread runs the blocking Plait call, copies results into outputs
// that were not contiguous, and completes the Work and its Future.
//
// Rendezvous goes through the c10d store torch hands the backend: rank 0
// publishes the unique id under "plait/uid", the others read it.
//
// CUDA tensors (where torch has CUDA, device.h): the same calls with device
// pointers, enqueued on the caller's thread on torch's current stream, never
// on the host stream; the Work waits on an event. Every tensor of one
// operation, and of one coalesced group, is on one device.
//
// Thread safety: torch calls a backend from one thread at a time per group;
// abort() may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "device.h"
#include "nccl.h"
#include "plait/stream.hpp"

namespace plait_torch {

// The communicator and whether it was aborted, shared by the group and its
// Works (a Work may outlive its group).
struct CommState {
  ncclComm_t comm = nullptr;
  std::mutex mu;
  bool aborted = false;
  std::string abortReason;
  // Aborts once: every call in flight ends (ncclCommAbort) and later ones fail.
  void abort(const std::string& reason);
  // The handle, or nullptr with *why set when the group was aborted.
  ncclComm_t use(std::string* why);
};

class PlaitWork : public c10d::Work {
 public:
  PlaitWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
            std::shared_ptr<CommState> state, std::string what);
  // Blocks until the operation ended; past the timeout (the call's, else the
  // group's) the communicator is aborted and DistBackendError raised.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // On CUDA tensors: whether the kernels finished; the host waits for them.
  bool isCompleted() override;
  void synchronize() override;
  const std::string& what() const { return what_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Called once by the stream's thread (or, on CUDA tensors, the caller's,
  // after onDevice): nullptr means success.
  void complete(std::exception_ptr error);
  // An operation on CUDA tensors: `done` was recorded after its kernels on
  // the current stream of `device`, which complete() is called under.
  void onDevice(std::shared_ptr<DeviceCompletion> done, c10::Device device);

 private:
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<CommState> state_;
  std::string what_;
  std::shared_ptr<DeviceCompletion> device_;  // set before complete(), on CUDA tensors only
  std::vector<c10::Device> devices_;          // the Future's: its events sync the caller's streams
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made on request, guarded by mutex_
  std::atomic<bool> done_{false};  // completed_, readable without the lock (wait's yield loop)
  static constexpr int kYieldMicros = 50;

  void markFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future);
};

class ProcessGroupPlait : public c10d::Backend {
 public:
  ProcessGroupPlait(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupPlait() override;

  const std::string getBackendName() const override { return "plait"; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void abort() override;
  void shutdown() override;
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;

  // The library this backend runs on (the file libplait.so was loaded from).
  static std::string libraryPath();

 private:
  // One queued Plait call: runs on the stream's thread with the handle and a
  // null stream (host tensors), or on the caller's with torch's current CUDA
  // stream (CUDA tensors); a non-success result becomes the Work's error
  // (with ncclGetLastError).
  using Body = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;
  struct Step {
    Body body;
    std::function<void()> after;  // copies out of staging buffers; may be empty
  };
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const char* what, std::vector<at::Tensor> outputs,
                                        std::vector<at::Tensor> keepAlive, std::chrono::milliseconds timeout,
                                        bool async, Step step);
  // Calls each(0..n-1) inside one coalescing region: this call's, or the
  // caller's already open one (then the caller's endCoalescing runs them).
  c10::intrusive_ptr<c10d::Work> coalesced(const char* what, size_t n, const std::function<void(size_t)>& each);
  // Runs the steps (one group when grouped) and completes the works: on the
  // host when `device` is the CPU, else enqueued on its current stream.
  void runSteps(std::span<const Step> steps, bool grouped, std::span<const c10::intrusive_ptr<PlaitWork>> works,
                const c10::Device& device);
  // Before an operation on CUDA tensors runs on the caller's thread: the host
  // stream's queued calls end first (a communicator takes one call at a time),
  // within the group's timeout, else the communicator is aborted and it raises.
  void drainHostStream();
  // The root of a rooted collective, checked against the group's size.
  int checkRoot(int64_t root, const char* what) const;
  // A list argument (one list of size() tensors, each like `like`).
  void checkList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, const char* what,
                 const char* which) const;
  std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;

  std::shared_ptr<CommState> state_;
  std::unique_ptr<plait::HostStream> stream_;
  std::chrono::milliseconds timeout_;
  int64_t libraryTimeoutMs_ = 0;  // PLAIT_TIMEOUT
  uint64_t seq_ = 0;
  // Coalescing (startCoalescing .. endCoalescing): the calls are held and run
  // as one ncclGroupStart/End group.
  bool coalescing_ = false;
  std::vector<Step> held_;
  std::optional<c10::Device> heldDevice_;  // the device of what held_ holds
  std::vector<c10::intrusive_ptr<PlaitWork>> heldWorks_;
  std::vector<at::Tensor> heldOutputs_;
};

// For the Python registration: torch.distributed's creator signature.
c10::intrusive_ptr<c10d::Backend> createProcessGroupPlait(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout);

}  // namespace plait_torch
