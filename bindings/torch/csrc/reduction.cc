// reduction.cc — see reduction.h.
#include "reduction.h"

#include <c10/util/Exception.h>

namespace plait_torch {

namespace {

// The NCCL type of an element type that is reduced (data movement uses bytes).
ncclDataType_t reductionType(at::ScalarType type, const char* what) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kUInt32: return ncclUint32;
    case at::kUInt64: return ncclUint64;
    case at::kFloat8_e4m3fn: return ncclFloat8e4m3;
    case at::kFloat8_e5m2: return ncclFloat8e5m2;
    default: break;
  }
  TORCH_CHECK(false, "plait: ", what, ": cannot reduce ", type,
              " tensors (NCCL's types: float16/32/64, bfloat16, float8 e4m3fn/e5m2, int8/32/64, uint8/32/64, bool)");
}

bool isComplex(at::ScalarType t) {
  return t == at::kComplexFloat || t == at::kComplexDouble || t == at::kComplexHalf;
}

// The pending destroys of this thread's innermost DeferredDestroys.
thread_local std::vector<std::function<void()>>* deferred = nullptr;

}  // namespace

DeferredDestroys::DeferredDestroys() : previous_(deferred) { deferred = &pending_; }

DeferredDestroys::~DeferredDestroys() {
  deferred = previous_;
  runNow();
}

void DeferredDestroys::runNow() {
  for (auto& destroy : pending_) destroy();
  pending_.clear();
}

ncclResult_t Reduction::run(ncclComm_t comm, const std::function<ncclResult_t(ncclRedOp_t)>& call) const {
  if (!premulScalar.defined()) return call(op);
  ncclRedOp_t custom;
  ncclResult_t r = ncclRedOpCreatePreMulSum(&custom, premulScalar.data_ptr(), type, ncclScalarHostImmediate, comm);
  if (r != ncclSuccess) return r;
  r = call(custom);
  if (deferred != nullptr) {
    deferred->push_back([custom, comm] { ncclRedOpDestroy(custom, comm); });
    return r;
  }
  const ncclResult_t d = ncclRedOpDestroy(custom, comm);
  return r != ncclSuccess ? r : d;
}

Reduction reductionFor(const at::Tensor& t, const c10d::ReduceOp& reduceOp, const char* what) {
  Reduction r;
  at::ScalarType type = t.scalar_type();
  const auto op = reduceOp.op_;
  if (isComplex(type)) {
    TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PREMUL_SUM, "plait: ",
                what, ": complex tensors reduce with SUM, AVG or PREMUL_SUM only");
    type = c10::toRealValueType(type);
    r.elementsPerItem = 2;
  }
  r.type = reductionType(type, what);
  switch (op) {
    case c10d::ReduceOp::SUM: r.op = ncclSum; break;
    case c10d::ReduceOp::PRODUCT: r.op = ncclProd; break;
    case c10d::ReduceOp::MIN: r.op = ncclMin; break;
    case c10d::ReduceOp::MAX: r.op = ncclMax; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(type != at::kBool, "plait: ", what, ": AVG of bool tensors is undefined");
      r.op = ncclAvg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(reduceOp.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "plait: ", what, ": PREMUL_SUM without its factor");
      at::Tensor factor = supplement->tensor_factor.defined()
                              ? supplement->tensor_factor.to(at::kCPU)
                              : at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(at::kDouble));
      r.premulScalar = factor.to(type).contiguous();
      r.op = ncclSum;
      break;
    }
    case c10d::ReduceOp::BAND: case c10d::ReduceOp::BOR: case c10d::ReduceOp::BXOR:
      TORCH_CHECK(at::isIntegralType(type, /*includeBool=*/true), "plait: ", what,
                  ": bitwise reductions need integer or bool tensors, got ", type);
      r.bitwise = op == c10d::ReduceOp::BAND ? ncclProd : op == c10d::ReduceOp::BOR ? ncclSum : ncclMax;
      break;
    default: TORCH_CHECK(false, "plait: ", what, ": unsupported reduce op ", static_cast<int>(op));
  }
  // Bool follows ProcessGroupNCCL: SUM is logical or (MAX), PRODUCT logical and (MIN).
  if (type == at::kBool) {
    if (op == c10d::ReduceOp::SUM) r.op = ncclMax;
    if (op == c10d::ReduceOp::PRODUCT) r.op = ncclMin;
  }
  return r;
}

at::Tensor realView(const at::Tensor& t) { return isComplex(t.scalar_type()) ? at::view_as_real(t) : t; }

void foldBitwise(const at::Tensor& gathered, const at::Tensor& out, c10d::ReduceOp::RedOpType op) {
  at::Tensor acc = gathered[0].clone();
  for (int64_t i = 1; i < gathered.size(0); ++i) {
    if (op == c10d::ReduceOp::BAND) acc.bitwise_and_(gathered[i]);
    else if (op == c10d::ReduceOp::BOR) acc.bitwise_or_(gathered[i]);
    else acc.bitwise_xor_(gathered[i]);
  }
  out.copy_(acc.view(out.sizes()));
}

}  // namespace plait_torch
