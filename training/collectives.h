// training/collectives.h — the few blocking calls the training layer makes
// through the public C API, with errors turned into exceptions.
//
// Inside the training layer a failed collective aborts the step: layers are
// called deep inside forward/backward where threading a Status through every
// tensor operation would bury the numerics. CommError carries the library's
// Status; trainers catch it at their public boundary and return it.
#pragma once

#include <stdexcept>
#include <string>

#include "nccl.h"
#include "plait/status.hpp"

namespace plait::training {

class CommError : public std::runtime_error {
 public:
  explicit CommError(Status s) : std::runtime_error(s.toString()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Throws CommError naming `what` unless r is ncclSuccess.
inline void check(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r != ncclSuccess)
    throw CommError(Status(static_cast<Code>(r), std::string(what) + ": " + ncclGetLastError(comm)));
}

// Runs fn, turning a CommError into its Status.
template <typename Fn>
Status catchCommError(Fn&& fn) {
  try {
    fn();
  } catch (const CommError& e) {
    return e.status();
  }
  return Status::ok();
}

// Runs a step body that returns the loss, turning a CommError into its Status.
template <typename Fn>
Result<double> catchCommErrorLoss(Fn&& fn) {
  double loss = 0;
  Status s = catchCommError([&] { loss = fn(); });
  if (!s.isOk()) return s;
  return loss;
}

inline void allReduce(ncclComm_t comm, float* data, size_t n, ncclRedOp_t op = ncclSum, cudaStream_t s = nullptr) {
  check(ncclAllReduce(data, data, n, ncclFloat32, op, comm, s), "ncclAllReduce", comm);
}
inline double allReduceScalar(ncclComm_t comm, double v, ncclRedOp_t op) {
  check(ncclAllReduce(&v, &v, 1, ncclFloat64, op, comm, nullptr), "ncclAllReduce", comm);
  return v;
}
inline int commSize(ncclComm_t comm) {
  int n = 1;
  if (comm) check(ncclCommCount(comm, &n), "ncclCommCount", comm);
  return n;
}
inline int commRank(ncclComm_t comm) {
  int r = 0;
  if (comm) check(ncclCommUserRank(comm, &r), "ncclCommUserRank", comm);
  return r;
}

}  // namespace plait::training
