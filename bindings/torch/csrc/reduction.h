// reduction.h — how a torch reduction runs on Plait: NCCL's type and
// operator for a tensor and a c10d::ReduceOp, the scalar of a PREMUL_SUM, and
// the local fold of the bitwise operators NCCL lacks.
#pragma once

#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "nccl.h"

namespace plait_torch {

struct Reduction {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int64_t elementsPerItem = 1;       // complex numbers reduce as pairs of reals
  at::Tensor premulScalar;           // defined for PREMUL_SUM: one element of the type
  ncclRedOp_t bitwise = ncclNumOps;  // BAND/BOR/BXOR: gather every rank's input, then foldBitwise

  // Runs call(op) with the operator, creating (and destroying) a PreMulSum.
  // Inside a group (see DeferredDestroys) the destroy waits for ncclGroupEnd.
  ncclResult_t run(ncclComm_t comm, const std::function<ncclResult_t(ncclRedOp_t)>& call) const;
};

// While alive on a thread, PreMulSum operators created there are destroyed
// only when it goes (after the group's ncclGroupEnd, which runs the calls).
class DeferredDestroys {
 public:
  DeferredDestroys();
  ~DeferredDestroys();
  DeferredDestroys(const DeferredDestroys&) = delete;
  DeferredDestroys& operator=(const DeferredDestroys&) = delete;
  void runNow();

 private:
  std::vector<std::function<void()>> pending_;
  std::vector<std::function<void()>>* previous_;
};

// The reduction of tensor t by reduceOp; errors (TORCH_CHECK) name `what`:
// types NCCL cannot reduce, AVG of bool, complex with MIN/MAX/PRODUCT.
// Bool follows ProcessGroupNCCL: SUM is logical or (MAX), PRODUCT and (MIN).
Reduction reductionFor(const at::Tensor& t, const c10d::ReduceOp& reduceOp, const char* what);

// t, or its real view (complex as pairs of reals).
at::Tensor realView(const at::Tensor& t);

// The bitwise fold of a [ranks, n] gather into out.
void foldBitwise(const at::Tensor& gathered, const at::Tensor& out, c10d::ReduceOp::RedOpType op);

}  // namespace plait_torch
