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

// Every tensor an operation touches: on the CPU, dense.
void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "plait: ", what, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "plait: ", what, ": a tensor on ", t.device(),
              "; this build of plait_torch runs CPU tensors only (the device path through torch is not built)");
  TORCH_CHECK(t.layout() == at::kStrided, "plait: ", what, ": sparse tensors are not supported");
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "plait: ", what, " takes one tensor per process, got ", tensors.size());
  checkTensor(tensors[0], what);
}

void checkSameShape(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "plait: ", what, ": tensors of different types (", a.scalar_type(),
              " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), "plait: ", what, ": tensors of ", a.numel(), " and ", b.numel(), " elements");
}

// The flat pair of the *_tensor collectives: `whole` holds `blocks` blocks
// the size of `part`, of the same type.
void checkBlocks(const at::Tensor& whole, const at::Tensor& part, int blocks, const char* what,
                 const char* wholeName) {
  checkTensor(whole, what);
  checkTensor(part, what);
  TORCH_CHECK(whole.scalar_type() == part.scalar_type(), "plait: ", what, ": tensors of different types (",
              whole.scalar_type(), " and ", part.scalar_type(), ")");
  TORCH_CHECK(whole.numel() == part.numel() * blocks, "plait: ", what, ": ", wholeName, " has ", whole.numel(),
              " elements; it needs ", blocks, " x ", part.numel());
}

// One row per tensor of a list, contiguous: the flat input of scatter and
// reduce_scatter.
at::Tensor packRows(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> rows;
  rows.reserve(tensors.size());
  for (const auto& t : tensors) rows.push_back(t.reshape({-1}));
  return at::stack(rows);
}

// After the call: row i of flat into targets[i] (all_gather's and gather's lists).
std::function<void()> unpackRows(const at::Tensor& flat, std::vector<at::Tensor> targets) {
  return [flat, targets = std::move(targets)]() mutable {
    for (size_t i = 0; i < targets.size(); ++i)
      targets[i].copy_(flat[static_cast<int64_t>(i)].view(targets[i].sizes()));
  };
}

size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A contiguous buffer for a tensor the call writes: the tensor itself, or a
// copy whose contents go back into the tensor after the call.
struct Staged {
  at::Tensor buffer;
  std::function<void()> copyBack;
};
Staged stageOutput(const at::Tensor& t, bool keepContents) {
  if (t.is_contiguous()) return {t, nullptr};
  at::Tensor buffer = keepContents ? t.contiguous() : at::empty(t.sizes(), t.options());
  at::Tensor target = t;
  return {buffer, [target, buffer]() mutable { target.copy_(buffer); }};
}

std::function<void()> chain(std::function<void()> a, std::function<void()> b) {
  if (!a) return b;
  if (!b) return a;
  return [a = std::move(a), b = std::move(b)] {
    a();
    b();
  };
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
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (completed_) markFuture(future_);  // no callbacks yet: nothing runs under the lock
  }
  return future_;
}

void PlaitWork::complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
    exception_ = error;
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
                                 std::span<const c10::intrusive_ptr<PlaitWork>> works) {
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
        if (r == ncclSuccess) r = step.body(comm);
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
  for (const auto& work : works) work->complete(error);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::submit(c10d::OpType type, const char* what,
                                                         std::vector<at::Tensor> outputs,
                                                         std::vector<at::Tensor> keepAlive,
                                                         std::chrono::milliseconds timeout, bool async, Step step) {
  TORCH_CHECK(stream_ != nullptr, "plait: ", what, " on a process group that was shut down");
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
  const bool deadlineFits =
      libraryTimeoutMs_ > 0 && work->timeout() >= std::chrono::milliseconds(libraryTimeoutMs_);
  if (!async && deadlineFits && stream_->idle()) {
    runSteps({&held, 1}, /*grouped=*/false, {&work, 1});
    return work;
  }
  stream_->enqueue([this, held = std::move(held), work]() {
    runSteps({&held, 1}, /*grouped=*/false, {&work, 1});
    return plait::Status::ok();
  });
  return work;
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
  held_.clear();
  heldWorks_.clear();
  stream_->enqueue([this, steps = std::move(steps), works = std::move(works)]() {
    runSteps(steps, /*grouped=*/true, works);
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
    }
    throw;
  }
  return outer ? c10::intrusive_ptr<c10d::Work>(heldWorks_.back()) : endCoalescing();
}

// ---- Collectives ----------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  const int root = checkRoot(opts.rootRank, "broadcast");
  Staged s = stageOutput(tensors[0], /*keepContents=*/true);
  at::Tensor buf = s.buffer;
  return submit(c10d::OpType::BROADCAST, "broadcast", tensors, {}, opts.timeout, opts.asyncOp,
                {[buf, root](ncclComm_t c) {
                   return ncclBroadcast(buf.data_ptr(), buf.data_ptr(), bytesOf(buf), ncclUint8, root, c, nullptr);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "all_reduce");
  const at::Tensor& t = tensors[0];
  Reduction red = reductionFor(t, opts.reduceOp, "all_reduce");
  Staged s = stageOutput(t, /*keepContents=*/true);
  at::Tensor buf = s.buffer;
  if (red.bitwise != ncclNumOps) {
    at::Tensor gathered = at::empty({size_, t.numel()}, t.options());
    const auto op = opts.reduceOp.op_;
    return submit(c10d::OpType::ALLREDUCE, "all_reduce", tensors, {}, opts.timeout, opts.asyncOp,
                  {[buf, gathered](ncclComm_t c) {
                     return ncclAllGather(buf.data_ptr(), gathered.data_ptr(), bytesOf(buf), ncclUint8, c, nullptr);
                   },
                   chain([buf, gathered, op] { foldBitwise(gathered, buf, op); }, s.copyBack)});
  }
  at::Tensor real = realView(buf);
  return submit(c10d::OpType::ALLREDUCE, "all_reduce", tensors, {}, opts.timeout, opts.asyncOp,
                {[real, red](ncclComm_t c) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclAllReduce(real.data_ptr(), real.data_ptr(), real.numel(), red.type, op, c, nullptr);
                   });
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  return coalesced("allreduce_coalesced", tensors.size(), [&](size_t i) {
    std::vector<at::Tensor> one{tensors[i]};
    allreduce(one, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  const int root = checkRoot(opts.rootRank, "reduce");
  const at::Tensor& t = tensors[0];
  Reduction red = reductionFor(t, opts.reduceOp, "reduce");
  TORCH_CHECK(red.bitwise == ncclNumOps, "plait: reduce: bitwise reductions are available in all_reduce only");
  Staged s = stageOutput(t, /*keepContents=*/true);
  at::Tensor real = realView(s.buffer);
  return submit(c10d::OpType::REDUCE, "reduce", tensors, {}, opts.timeout, opts.asyncOp,
                {[real, red, root](ncclComm_t c) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclReduce(real.data_ptr(), real.data_ptr(), real.numel(), red.type, op, root, c,
                                       nullptr);
                   });
                 },
                 rank_ == root ? s.copyBack : nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  checkBlocks(output, input, size_, "all_gather_into_tensor", "output");
  at::Tensor in = input.contiguous();
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out](ncclComm_t c) {
                   return ncclAllGather(in.data_ptr(), out.data_ptr(), bytesOf(in), ncclUint8, c, nullptr);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "all_gather");
  checkList(outputs, inputs[0], "all_gather", "output");
  at::Tensor in = inputs[0].contiguous();
  at::Tensor flat = at::empty({size_, in.numel()}, in.options());
  std::vector<at::Tensor> targets = outputs[0];
  return submit(c10d::OpType::ALLGATHER, "all_gather", targets, {in}, opts.timeout, opts.asyncOp,
                {[in, flat](ncclComm_t c) {
                   return ncclAllGather(in.data_ptr(), flat.data_ptr(), bytesOf(in), ncclUint8, c, nullptr);
                 },
                 unpackRows(flat, targets)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputLists.size() == inputs.size(), "plait: allgather_coalesced: ", inputs.size(), " inputs and ",
              outputLists.size(), " output lists");
  return coalesced("allgather_coalesced", inputs.size(), [&](size_t i) {
    std::vector<std::vector<at::Tensor>> out{outputLists[i]};
    std::vector<at::Tensor> in{inputs[i]};
    allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "plait: all_gather_into_tensor_coalesced: ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  return coalesced("all_gather_into_tensor_coalesced", inputs.size(),
                   [&](size_t i) { _allgather_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const int root = checkRoot(opts.rootRank, "gather");
  at::Tensor in = inputs[0].contiguous();
  std::vector<at::Tensor> targets;
  at::Tensor flat;
  if (rank_ == root) {
    checkList(outputs, in, "gather", "root's output");
    targets = outputs[0];
    flat = at::empty({size_, in.numel()}, in.options());
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "plait: gather: only the root passes output tensors");
  }
  return submit(c10d::OpType::GATHER, "gather", targets, {in}, opts.timeout, opts.asyncOp,
                {[in, flat, root](ncclComm_t c) {
                   return ncclGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, bytesOf(in),
                                     ncclUint8, root, c, nullptr);
                 },
                 unpackRows(flat, targets)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  const int root = checkRoot(opts.rootRank, "scatter");
  at::Tensor flat;
  if (rank_ == root) {
    checkList(inputs, outputs[0], "scatter", "root's input");
    flat = packRows(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "plait: scatter: only the root passes input tensors");
  }
  Staged s = stageOutput(outputs[0], /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::SCATTER, "scatter", outputs, {}, opts.timeout, opts.asyncOp,
                {[flat, out, root](ncclComm_t c) {
                   return ncclScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), bytesOf(out),
                                      ncclUint8, root, c, nullptr);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  checkBlocks(input, output, size_, "reduce_scatter_tensor", "input");
  Reduction red = reductionFor(output, opts.reduceOp, "reduce_scatter_tensor");
  TORCH_CHECK(red.bitwise == ncclNumOps, "plait: reduce_scatter: bitwise reductions are available in all_reduce only");
  at::Tensor in = realView(input.contiguous());
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = realView(s.buffer);
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out, red](ncclComm_t c) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), red.type, op, c, nullptr);
                   });
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  checkList(inputs, outputs[0], "reduce_scatter", "input");
  at::Tensor flat = packRows(inputs[0]).view({-1});
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "plait: reduce_scatter_tensor_coalesced: ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  return coalesced("reduce_scatter_tensor_coalesced", inputs.size(),
                   [&](size_t i) { _reduce_scatter_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplits,
                                                                std::vector<int64_t>& inputSplits,
                                                                const c10d::AllToAllOptions& opts) {
  checkTensor(output, "all_to_all_single");
  checkTensor(input, "all_to_all_single");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "plait: all_to_all_single: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  at::Tensor in = input.contiguous();
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = s.buffer;
  const int n = size_;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "plait: all_to_all_single: input and output need ",
                "the same number of elements, a multiple of ", n, " (", in.numel(), ", ", out.numel(), ")");
    return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, {in}, opts.timeout, opts.asyncOp,
                  {[in, out, n](ncclComm_t c) {
                     return ncclAlltoAll(in.data_ptr(), out.data_ptr(), bytesOf(in) / n, ncclUint8, c, nullptr);
                   },
                   s.copyBack});
  }
  // Uneven: splits count rows of dimension 0; each pair is a send and a receive.
  auto offsets = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowBytes = rows == 0 ? 0 : bytesOf(t) / static_cast<size_t>(rows);
    std::vector<int64_t> split = splits;
    if (split.empty()) {
      TORCH_CHECK(rows % n == 0, "plait: all_to_all_single: ", side, " has ", rows, " rows, not a multiple of ", n);
      split.assign(n, rows / n);
    }
    TORCH_CHECK(static_cast<int>(split.size()) == n, "plait: all_to_all_single: ", side, " splits have ",
                split.size(), " entries for ", n, " ranks");
    std::vector<std::pair<size_t, size_t>> spans;  // byte offset, byte count
    int64_t at = 0;
    for (int64_t k : split) {
      TORCH_CHECK(k >= 0, "plait: all_to_all_single: a negative split (", k, ")");
      spans.emplace_back(static_cast<size_t>(at) * rowBytes, static_cast<size_t>(k) * rowBytes);
      at += k;
    }
    TORCH_CHECK(at == rows, "plait: all_to_all_single: ", side, " splits add up to ", at, " rows; the tensor has ",
                rows);
    return spans;
  };
  auto sendSpans = offsets(in, inputSplits, "input");
  auto recvSpans = offsets(out, outputSplits, "output");
  return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out, sendSpans, recvSpans, n](ncclComm_t c) {
                   auto* src = static_cast<const char*>(in.data_ptr());
                   auto* dst = static_cast<char*>(out.data_ptr());
                   ncclResult_t r = ncclGroupStart();
                   for (int p = 0; p < n && r == ncclSuccess; ++p) {
                     r = ncclSend(src + sendSpans[p].first, sendSpans[p].second, ncclUint8, p, c, nullptr);
                     if (r == ncclSuccess)
                       r = ncclRecv(dst + recvSpans[p].first, recvSpans[p].second, ncclUint8, p, c, nullptr);
                   }
                   const ncclResult_t end = ncclGroupEnd();
                   return r != ncclSuccess ? r : end;
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "plait: all_to_all: the input and output lists must hold ", size_, " tensors each");
  std::vector<at::Tensor> ins, outs;
  std::function<void()> copyBack;
  for (int p = 0; p < size_; ++p) {
    checkTensor(inputs[p], "all_to_all");
    checkTensor(outputs[p], "all_to_all");
    TORCH_CHECK(inputs[p].scalar_type() == outputs[p].scalar_type(), "plait: all_to_all: tensors of different types");
    ins.push_back(inputs[p].contiguous());
    Staged s = stageOutput(outputs[p], /*keepContents=*/false);
    outs.push_back(s.buffer);
    copyBack = chain(std::move(copyBack), std::move(s.copyBack));
  }
  return submit(c10d::OpType::ALLTOALL, "all_to_all", outputs, ins, opts.timeout, opts.asyncOp,
                {[ins, outs](ncclComm_t c) {
                   ncclResult_t r = ncclGroupStart();
                   for (size_t p = 0; p < ins.size() && r == ncclSuccess; ++p) {
                     r = ncclSend(ins[p].data_ptr(), bytesOf(ins[p]), ncclUint8, static_cast<int>(p), c, nullptr);
                     if (r == ncclSuccess)
                       r = ncclRecv(outs[p].data_ptr(), bytesOf(outs[p]), ncclUint8, static_cast<int>(p), c, nullptr);
                   }
                   const ncclResult_t end = ncclGroupEnd();
                   return r != ncclSuccess ? r : end;
                 },
                 copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::send(std::vector<at::Tensor>& tensors, int dstRank, int /*tag*/) {
  checkSingle(tensors, "send");
  TORCH_CHECK(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "plait: send: destination ", dstRank,
              " is not another rank of this group of ", size_);
  at::Tensor in = tensors[0].contiguous();
  return submit(c10d::OpType::SEND, "send", tensors, {in}, c10d::kUnsetTimeout, /*async=*/true,
                {[in, dstRank](ncclComm_t c) {
                   return ncclSend(in.data_ptr(), bytesOf(in), ncclUint8, dstRank, c, nullptr);
                 },
                 nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::recv(std::vector<at::Tensor>& tensors, int srcRank, int /*tag*/) {
  checkSingle(tensors, "recv");
  TORCH_CHECK(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "plait: recv: source ", srcRank,
              " is not another rank of this group of ", size_);
  Staged s = stageOutput(tensors[0], /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::RECV, "recv", tensors, {}, c10d::kUnsetTimeout, /*async=*/true,
                {[out, srcRank](ncclComm_t c) {
                   return ncclRecv(out.data_ptr(), bytesOf(out), ncclUint8, srcRank, c, nullptr);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  return submit(c10d::OpType::BARRIER, "barrier", {}, {}, opts.timeout, opts.asyncOp,
                {[token](ncclComm_t c) {
                   return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclUint8, ncclSum, c, nullptr);
                 },
                 nullptr});
}

c10::intrusive_ptr<c10d::Backend> createProcessGroupPlait(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupPlait>(store, rank, size, timeout);
}

}  // namespace plait_torch
