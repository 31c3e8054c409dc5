// plait/comm.hpp — the C++ face of Plait: an RAII communicator with typed
// operations over spans, returning Status.
//
// It is a thin layer over the C API in nccl.h (the same core serves both),
// so anything done here can be done there and mixed with it. Example:
//
//   auto info = plait::detectLaunch();                  // plait-run, mpirun, torchrun, Slurm
//   auto id = plait::launchUniqueId(*info, plait::Deadline::afterMs(60000));
//   auto comm = plait::Comm::create(*id, info->nranks, info->rank);
//   if (!comm) { fprintf(stderr, "%s\n", comm.status().toString().c_str()); return 1; }
//   std::vector<float> grads(n);
//   plait::Status s = comm->allReduce(std::span<float>(grads), ncclAvg);
//
// Thread safety: one thread at a time per Comm, except abort(), which any
// thread may call. Blocking: with no stream, each operation returns when its
// result is in the output; with a HostStream it returns at once and the
// stream runs it in order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "nccl.h"
#include "plait/rma.h"
#include "plait/status.hpp"
#include "plait/stream.hpp"

namespace plait {

// The ncclDataType_t of a C++ element type (integers and IEEE floats; use the
// C API with raw buffers for fp16, bf16 and fp8).
template <typename T> struct DataTypeFor;
template <> struct DataTypeFor<int8_t> { static constexpr ncclDataType_t value = ncclInt8; };
template <> struct DataTypeFor<uint8_t> { static constexpr ncclDataType_t value = ncclUint8; };
template <> struct DataTypeFor<int32_t> { static constexpr ncclDataType_t value = ncclInt32; };
template <> struct DataTypeFor<uint32_t> { static constexpr ncclDataType_t value = ncclUint32; };
template <> struct DataTypeFor<int64_t> { static constexpr ncclDataType_t value = ncclInt64; };
template <> struct DataTypeFor<uint64_t> { static constexpr ncclDataType_t value = ncclUint64; };
template <> struct DataTypeFor<float> { static constexpr ncclDataType_t value = ncclFloat32; };
template <> struct DataTypeFor<double> { static constexpr ncclDataType_t value = ncclFloat64; };

// A Status from an ncclResult_t and the thread's last error message.
inline Status statusFromNccl(ncclResult_t r, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return Status::ok();
  return Status(static_cast<Code>(r), ncclGetLastError(comm));
}

class Comm {
 public:
  struct Options {
    int maxChannels = -1;      // -1: library default
    std::string name;          // shows in logs
  };

  // Collective over nranks ranks: blocks until all joined (PLAIT_TIMEOUT).
  // (An overload rather than a default argument: GCC 12 rejects `= {}` for a
  // nested struct with member initialisers.)
  static Result<Comm> create(const ncclUniqueId& id, int nranks, int rank) {
    return create(id, nranks, rank, Options());
  }
  static Result<Comm> create(const ncclUniqueId& id, int nranks, int rank, const Options& options) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (options.maxChannels > 0) config.maxCTAs = options.maxChannels;
    if (!options.name.empty()) config.commName = options.name.c_str();
    ncclComm_t handle = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&handle, nranks, id, rank, &config);
    if (r != ncclSuccess) return statusFromNccl(r);
    return Comm(handle);
  }

  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() { reset(); }

  int rank() const { int r = -1; ncclCommUserRank(comm_, &r); return r; }
  int size() const { int n = 0; ncclCommCount(comm_, &n); return n; }
  // The C handle, to mix C calls with this object (still owned here).
  ncclComm_t handle() const { return comm_; }

  // out[i] = op over ranks of in[i]; in and out have the same size (or are
  // the same span: in place).
  template <typename T>
  Status allReduce(std::span<const T> in, std::span<T> out, ncclRedOp_t op = ncclSum, HostStream* stream = nullptr) {
    if (in.size() != out.size())
      return invalidArgument("allReduce: input has " + std::to_string(in.size()) + " elements, output " +
                             std::to_string(out.size()));
    return statusFromNccl(
        ncclAllReduce(in.data(), out.data(), in.size(), DataTypeFor<T>::value, op, comm_, streamOf(stream)), comm_);
  }
  template <typename T>
  Status allReduce(std::span<T> inOut, ncclRedOp_t op = ncclSum, HostStream* stream = nullptr) {
    return allReduce(std::span<const T>(inOut), inOut, op, stream);
  }

  // out (size() * in.size() elements) <- every rank's in, in rank order.
  template <typename T>
  Status allGather(std::span<const T> in, std::span<T> out, HostStream* stream = nullptr) {
    if (Status s = checkSizes("allGather", in.size() * static_cast<size_t>(size()), out.size()); !s.isOk()) return s;
    return statusFromNccl(
        ncclAllGather(in.data(), out.data(), in.size(), DataTypeFor<T>::value, comm_, streamOf(stream)), comm_);
  }
  // out <- op over ranks of block rank() of in (size() * out.size() elements).
  template <typename T>
  Status reduceScatter(std::span<const T> in, std::span<T> out, ncclRedOp_t op = ncclSum,
                       HostStream* stream = nullptr) {
    if (Status s = checkSizes("reduceScatter", out.size() * static_cast<size_t>(size()), in.size()); !s.isOk())
      return s;
    return statusFromNccl(ncclReduceScatter(in.data(), out.data(), out.size(), DataTypeFor<T>::value, op, comm_,
                                            streamOf(stream)),
                          comm_);
  }
  // buf <- root's buf, on every rank.
  template <typename T>
  Status broadcast(std::span<T> buf, int root, HostStream* stream = nullptr) {
    return statusFromNccl(
        ncclBroadcast(buf.data(), buf.data(), buf.size(), DataTypeFor<T>::value, root, comm_, streamOf(stream)),
        comm_);
  }
  // root's out <- op over ranks of in (out is ignored on other ranks).
  template <typename T>
  Status reduce(std::span<const T> in, std::span<T> out, int root, ncclRedOp_t op = ncclSum,
                HostStream* stream = nullptr) {
    if (rank() == root)
      if (Status s = checkSizes("reduce", in.size(), out.size()); !s.isOk()) return s;
    return statusFromNccl(
        ncclReduce(in.data(), out.data(), in.size(), DataTypeFor<T>::value, op, root, comm_, streamOf(stream)),
        comm_);
  }
  // Block j of in goes to rank j, which stores it as block rank() of out.
  template <typename T>
  Status allToAll(std::span<const T> in, std::span<T> out, HostStream* stream = nullptr) {
    if (Status s = checkSizes("allToAll", in.size(), out.size()); !s.isOk()) return s;
    const size_t n = static_cast<size_t>(size());
    if (in.size() % n != 0)
      return invalidArgument("allToAll: " + std::to_string(in.size()) + " elements do not split into " +
                             std::to_string(n) + " blocks");
    return statusFromNccl(
        ncclAlltoAll(in.data(), out.data(), in.size() / n, DataTypeFor<T>::value, comm_, streamOf(stream)), comm_);
  }
  template <typename T>
  Status send(std::span<const T> data, int peer, HostStream* stream = nullptr) {
    return statusFromNccl(ncclSend(data.data(), data.size(), DataTypeFor<T>::value, peer, comm_, streamOf(stream)),
                          comm_);
  }
  template <typename T>
  Status recv(std::span<T> data, int peer, HostStream* stream = nullptr) {
    return statusFromNccl(ncclRecv(data.data(), data.size(), DataTypeFor<T>::value, peer, comm_, streamOf(stream)),
                          comm_);
  }
  // One-sided (NCCL 2.32): writes data into peer's part of window `win`
  // (this rank's handle of a window every rank registered) at offsetBytes,
  // then raises a signal there.
  template <typename T>
  Status putSignal(std::span<const T> data, int peer, ncclWindow_t win, size_t offsetBytes,
                   HostStream* stream = nullptr) {
    return statusFromNccl(ncclPutSignal(data.data(), data.size(), DataTypeFor<T>::value, peer, win, offsetBytes, 0, 0,
                                        0, comm_, streamOf(stream)),
                          comm_);
  }
  Status signal(int peer, HostStream* stream = nullptr) {
    return statusFromNccl(ncclSignal(peer, 0, 0, 0, comm_, streamOf(stream)), comm_);
  }
  // Waits until every descriptor's signals came (and consumes them).
  Status waitSignal(std::span<ncclWaitSignalDesc_t> descs, HostStream* stream = nullptr) {
    return statusFromNccl(ncclWaitSignal(static_cast<int>(descs.size()), descs.data(), comm_, streamOf(stream)),
                          comm_);
  }
  // Waits until any one descriptor's signals came; consumes those and
  // returns its index (plaitWaitAnySignal, plait/rma.h). Blocking.
  Result<int> waitAnySignal(std::span<const ncclWaitSignalDesc_t> descs) {
    int which = -1;
    ncclResult_t r = plaitWaitAnySignal(static_cast<int>(descs.size()), descs.data(), &which, comm_);
    if (r != ncclSuccess) return statusFromNccl(r, comm_);
    return which;
  }
  // Polls: true (and consumed) when every descriptor's signals came; false
  // (nothing consumed) when not yet (plaitTestSignal).
  Result<bool> testSignal(std::span<const ncclWaitSignalDesc_t> descs) {
    int done = 0;
    ncclResult_t r = plaitTestSignal(static_cast<int>(descs.size()), descs.data(), &done, comm_);
    if (r != ncclSuccess) return statusFromNccl(r, comm_);
    return done != 0;
  }
  // Reads peer's part of window `win` at offsetBytes into data (plaitGet).
  template <typename T>
  Status get(std::span<T> data, int peer, ncclWindow_t win, size_t offsetBytes, HostStream* stream = nullptr) {
    return statusFromNccl(
        plaitGet(data.data(), data.size(), DataTypeFor<T>::value, peer, win, offsetBytes, comm_, streamOf(stream)),
        comm_);
  }
  // Collective: ranks with the same color (>= 0) form a new communicator,
  // ordered by key; a negative color gives an empty Comm (valid() false).
  Result<Comm> split(int color, int key) {
    ncclComm_t child = nullptr;
    ncclResult_t r = ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr);
    if (r != ncclSuccess) return statusFromNccl(r, comm_);
    return Comm(child);
  }
  bool valid() const { return comm_ != nullptr; }

  // Unblocks every wait of this communicator and frees it (any thread).
  Status abort() {
    ncclResult_t r = ncclCommAbort(comm_);
    comm_ = nullptr;
    return statusFromNccl(r);
  }
  // The error that broke the communicator, if any.
  Status asyncError() const {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) return statusFromNccl(r, comm_);
    return statusFromNccl(async, comm_);
  }

 private:
  explicit Comm(ncclComm_t comm) : comm_(comm) {}
  static cudaStream_t streamOf(HostStream* s) { return s ? s->handle() : nullptr; }
  static Status checkSizes(const char* what, size_t want, size_t got) {
    if (want == got) return Status::ok();
    return invalidArgument(std::string(what) + ": buffer has " + std::to_string(got) + " elements, expected " +
                           std::to_string(want));
  }
  void reset() {
    if (comm_) ncclCommDestroy(comm_);
    comm_ = nullptr;
  }
  ncclComm_t comm_ = nullptr;
};

// ncclGroupStart/End as a scope: operations issued while a Group is open
// run together at end() (or at destruction, whose error is then lost).
class Group {
 public:
  Group() { open_ = ncclGroupStart() == ncclSuccess; }
  ~Group() {
    if (open_) (void)end();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  Status end() {
    if (!open_) return invalidUsage("the group is not open");
    open_ = false;
    return statusFromNccl(ncclGroupEnd());
  }

 private:
  bool open_ = false;
};

}  // namespace plait
