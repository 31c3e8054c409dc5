// process_group_plait.cc — see process_group_plait.h.
#include "process_group_plait.h"

#include <dlfcn.h>

#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "reduction.h"
#include "tensor_args.h"

namespace plait_torch {
namespace {

std::exception_ptr makeError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

[[noreturn]] void throwError(const std::string& message) { std::rethrow_exception(makeError(message)); }

std::string callError(const char* what, ncclResult_t r, ncclComm_t comm) {
  std::string message = std::string("plait: ") + what + " failed: " + ncclGetErrorString(r);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += std::string(": ") + detail;
  return message;
}

void checkCall(const char* what, ncclResult_t r, ncclComm_t comm) {
  if (r != ncclSuccess) throwError(callError(what, r, comm));
}

}  // namespace

// ---- CommState ------------------------------------------------------------

void CommState::abort(const std::string& reason) {
  ncclComm_t victim = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return;
    aborted = true;
    abortReason = reason;
    victim = comm;
  }
  if (victim != nullptr) ncclCommAbort(victim);
}

ncclComm_t CommState::use(std::string* why) {
  std::lock_guard<std::mutex> lock(mu);
  if (aborted) {
    *why = "plait: the process group was aborted or shut down (" + abortReason + ")";
    return nullptr;
  }
  return comm;
}

// ---- PlaitWork ------------------------------------------------------------

PlaitWork::PlaitWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                     std::shared_ptr<CommState> state, std::string what)
    : Work(rank, type),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      state_(std::move(state)),
      what_(std::move(what)) {}

bool PlaitWork::wait(std::chrono::milliseconds timeout) {
  if (device_) {  // completed when enqueued (device.h): the caller's stream waits, not the host
    if (exception_) std::rethrow_exception(exception_);
    device_->block();
    return true;
  }
  const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
  // Yield for a short while before sleeping (spin → yield → block): a small
  // call ends within tens of microseconds, and a condition variable's
  // wake-up costs about as much again.
  const auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(kYieldMicros);
  while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spinUntil)
    std::this_thread::yield();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, limit, [this] { return completed_; })) {
    lock.unlock();
    const std::string message = "plait: " + what_ + " did not complete within " + std::to_string(limit.count()) +
                                " ms (the process group's timeout); the communicator is aborted";
    state_->abort(message);
    throwError(message);
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

// The Future is made on first request (most synchronous calls never ask:
// making and completing one is a few microseconds per call); complete()
// marks one made before it, getFuture() one made after.
void PlaitWork::markFuture(const c10::intrusive_ptr<c10::ivalue::Future>& future) {
  if (exception_) future->setError(exception_);
  else future->markCompleted(c10::IValue(outputs_));
}

c10::intrusive_ptr<c10::ivalue::Future> PlaitWork::getFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!future_) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices_);
    if (completed_) markFuture(future_);  // no callbacks yet: nothing runs under the lock
  }
  return future_;
}

void PlaitWork::onDevice(std::shared_ptr<DeviceCompletion> done, c10::Device device) {
  device_ = std::move(done);
  devices_ = {device};
}

bool PlaitWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completed_ || exception_ || !device_) return completed_;
  }
  return device_->query();
}

void PlaitWork::synchronize() {
  if (device_) device_->synchronize();
}

void PlaitWork::complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
    // On CUDA tensors the Future is made now, under the operation's stream:
    // marking it records the event its users' streams wait on.
    if (device_ && !future_)
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices_);
    future = future_;
  }
  done_.store(true, std::memory_order_release);
  cv_.notify_all();
  if (future) markFuture(future);  // outside the lock: its callbacks may call back into this Work
}

// ---- ProcessGroupPlait ----------------------------------------------------

std::string ProcessGroupPlait::libraryPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclCommInitRank), &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

ProcessGroupPlait::ProcessGroupPlait(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : Backend(rank, size), state_(std::make_shared<CommState>()), timeout_(timeout) {
  // torch loads NVIDIA's libnccl.so.2 (same symbol names): ours must be the
  // one these calls reach, or every result would be NVIDIA's, on the CPU.
  const std::string library = libraryPath();
  TORCH_CHECK(library.find("libplait") != std::string::npos, "plait: the NCCL API resolved to ", library,
              " instead of Plait's libplait.so; load plait_torch before anything else loads a libnccl globally");
  ncclUniqueId id;
  const std::string key = "plait/uid";
  if (rank == 0) {
    checkCall("ncclGetUniqueId", ncclGetUniqueId(&id), nullptr);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
  } else {
    std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id), "plait: the store's ", key, " has ", bytes.size(), " bytes, not ",
                sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  checkCall("ncclCommInitRank", ncclCommInitRank(&comm, size, id, rank), nullptr);
  state_->comm = comm;
  stream_ = std::make_unique<plait::HostStream>();
  // Plait's own deadline for every wait (seconds), through the public
  // parameter API; 0 (unknown) keeps every call on the stream.
  const char* text = nullptr;
  int length = 0;
  if (ncclParamGetParameter("PLAIT_TIMEOUT", &text, &length) == ncclSuccess && text != nullptr) {
    try {
      libraryTimeoutMs_ = std::stoll(std::string(text, static_cast<size_t>(length))) * 1000;
    } catch (...) {
      libraryTimeoutMs_ = 0;
    }
  }
}

ProcessGroupPlait::~ProcessGroupPlait() { shutdown(); }

void ProcessGroupPlait::shutdown() {
  stream_.reset();  // runs what is queued (each call bounded by PLAIT_TIMEOUT)
  ncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->aborted) return;
    state_->aborted = true;
    state_->abortReason = "shut down";
    comm = state_->comm;
  }
  if (comm != nullptr && ncclCommFinalize(comm) == ncclSuccess) ncclCommDestroy(comm);
  else if (comm != nullptr) ncclCommAbort(comm);
}

void ProcessGroupPlait::abort() { state_->abort("ProcessGroup.abort()"); }

std::chrono::milliseconds ProcessGroupPlait::timeoutOf(std::chrono::milliseconds requested) const {
  return requested.count() > 0 ? requested : timeout_;
}

int ProcessGroupPlait::checkRoot(int64_t root, const char* what) const {
  TORCH_CHECK(root >= 0 && root < size_, "plait: ", what, ": root ", root, " is not a rank of this group of ", size_);
  return static_cast<int>(root);
}

void ProcessGroupPlait::checkList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                  const char* what, const char* which) const {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size_, "plait: ", what, ": the ", which,
              " list must hold ", size_, " tensors");
  for (const auto& t : lists[0]) {
    checkTensor(t, what);
    checkSameShape(t, like, what);
  }
}

void ProcessGroupPlait::runSteps(std::span<const Step> steps, bool grouped,
                                 std::span<const c10::intrusive_ptr<PlaitWork>> works, const c10::Device& device) {
  std::optional<DeviceScope> scope;  // CUDA tensors: the caller's current stream on their device
  if (device.is_cuda()) scope.emplace(device);
  const cudaStream_t stream = scope ? scope->stream() : nullptr;
  std::exception_ptr error;
  std::string why;
  ncclComm_t comm = state_->use(&why);
  if (comm == nullptr) {
    error = makeError(why);
  } else {
    ncclResult_t r = grouped ? ncclGroupStart() : ncclSuccess;
    {
      std::optional<DeferredDestroys> destroys;  // a group's PreMulSums outlive its ncclGroupEnd
      if (grouped) destroys.emplace();
      for (const Step& step : steps)
        if (r == ncclSuccess) r = step.body(comm, stream);
      if (grouped) {
        const ncclResult_t end = ncclGroupEnd();
        if (r == ncclSuccess) r = end;
      }
    }
    if (r != ncclSuccess) {
      const std::string what =
          grouped ? "a coalesced group (" + works.front()->what() + ", ...)" : works.front()->what();
      error = makeError(callError(what.c_str(), r, comm));
    } else {
      try {
        for (const Step& step : steps)
          if (step.after) step.after();
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
  if (scope) {
    std::shared_ptr<DeviceCompletion> done = scope->record();
    for (const auto& work : works) work->onDevice(done, device);
  }
  for (const auto& work : works) work->complete(error);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::submit(c10d::OpType type, const char* what,
                                                         std::vector<at::Tensor> outputs,
                                                         std::vector<at::Tensor> keepAlive,
                                                         std::chrono::milliseconds timeout, bool async, Step step) {
  TORCH_CHECK(stream_ != nullptr, "plait: ", what, " on a process group that was shut down");
  const c10::Device device = deviceOf({&outputs, &keepAlive}, what);
  if (coalescing_) {
    TORCH_CHECK(!heldDevice_ || *heldDevice_ == device, "plait: a coalesced group mixes tensors on ", *heldDevice_,
                " and ", device, "; one group runs on one device");
    heldDevice_ = device;
  }
  ++seq_;
  auto work = c10::make_intrusive<PlaitWork>(rank_, type, std::move(outputs), timeoutOf(timeout), state_,
                                             std::string(what) + " #" + std::to_string(seq_));
  // The step's lambdas hold the staged buffers; keepAlive holds the caller's
  // inputs until the call ran.
  Step held{std::move(step.body), [after = std::move(step.after), keepAlive = std::move(keepAlive)] {
              if (after) after();
            }};
  if (coalescing_) {
    held_.push_back(std::move(held));
    heldWorks_.push_back(work);
    return work;
  }
  // A synchronous call (async_op=False: torch waits on the Work at once)
  // runs on the caller's thread when nothing is queued before it: two thread
  // hand-offs fewer (the stream's wake-up and the caller's). Only where
  // Plait's own deadline is no longer than the call's timeout, since no
  // Work::wait() can end an inline call early.
  // On CUDA tensors the call only enqueues: always on the caller's thread,
  // whose current stream orders it.
  const bool deadlineFits =
      libraryTimeoutMs_ > 0 && work->timeout() >= std::chrono::milliseconds(libraryTimeoutMs_);
  if (device.is_cuda()) {
    drainHostStream();
    runSteps({&held, 1}, /*grouped=*/false, {&work, 1}, device);
    return work;
  }
  if (!async && deadlineFits && stream_->idle()) {
    runSteps({&held, 1}, /*grouped=*/false, {&work, 1}, device);
    return work;
  }
  stream_->enqueue([this, held = std::move(held), work]() {
    runSteps({&held, 1}, /*grouped=*/false, {&work, 1}, c10::Device(c10::kCPU));
    return plait::Status::ok();
  });
  return work;
}

void ProcessGroupPlait::drainHostStream() {
  // The queued calls' errors reach their own Works (their steps return ok),
  // so a non-ok status here is the group's timeout running out: as in
  // Work::wait(), the communicator is aborted (ending the call in flight).
  if (stream_->idle()) return;
  if (!stream_->synchronize(timeout_.count()).isOk()) {
    const std::string message = "plait: the calls queued before an operation on CUDA tensors did not end within " +
                                std::to_string(timeout_.count()) + " ms (the process group's timeout); the " +
                                "communicator is aborted";
    state_->abort(message);
    throwError(message);
  }
}

void ProcessGroupPlait::startCoalescing() {
  TORCH_CHECK(!coalescing_, "plait: startCoalescing inside a coalescing region");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::endCoalescing() {
  TORCH_CHECK(coalescing_, "plait: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<at::Tensor> outputs;
  for (const auto& w : heldWorks_)
    for (const auto& t : w->result()) outputs.push_back(t);
  auto all = c10::make_intrusive<PlaitWork>(rank_, c10d::OpType::COALESCED, outputs, timeout_, state_,
                                            "coalesced group of " + std::to_string(held_.size()));
  std::vector<c10::intrusive_ptr<PlaitWork>> works = std::move(heldWorks_);
  works.push_back(all);
  std::vector<Step> steps = std::move(held_);
  const c10::Device device = heldDevice_.value_or(c10::Device(c10::kCPU));
  held_.clear();
  heldWorks_.clear();
  heldDevice_.reset();
  if (device.is_cuda()) {
    drainHostStream();
    runSteps(steps, /*grouped=*/true, works, device);
    return all;
  }
  stream_->enqueue([this, steps = std::move(steps), works = std::move(works)]() {
    runSteps(steps, /*grouped=*/true, works, c10::Device(c10::kCPU));
    return plait::Status::ok();
  });
  return all;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::coalesced(const char* what, size_t n,
                                                            const std::function<void(size_t)>& each) {
  TORCH_CHECK(n > 0, "plait: ", what, " of no tensors");
  const bool outer = coalescing_;  // inside the caller's region: its endCoalescing runs them
  if (!outer) startCoalescing();
  try {
    for (size_t i = 0; i < n; ++i) each(i);
  } catch (...) {
    if (!outer) {  // a bad argument: nothing of this call runs, and the group stays usable
      coalescing_ = false;
      held_.clear();
      heldWorks_.clear();
      heldDevice_.reset();
    }
    throw;
  }
  return outer ? c10::intrusive_ptr<c10d::Work>(heldWorks_.back()) : endCoalescing();
}

c10::intrusive_ptr<c10d::Backend> createProcessGroupPlait(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupPlait>(store, rank, size, timeout);
}

}  // namespace plait_torch
