#include "training/batch_norm.h"

#include "plait/stream.hpp"
#include "training/collectives.h"

namespace plait::training {

namespace {
constexpr float kEps = 1e-5f;
}

BatchNorm::BatchNorm(int channels, DataParallelGroup group, const std::string& name)
    : gamma(name + ".gamma", {channels}, 0, 1.0f), beta(name + ".beta", {channels}, 0, 0.0f), c_(channels),
      group_(group) {}

// Sums v over the group in place and waits for the result.
void BatchNorm::sumOverGroup(std::vector<float>& v) const {
  if (!group_.comm || commSize(group_.comm) == 1) return;
  allReduce(group_.comm, v.data(), v.size(), ncclSum, group_.stream);
  if (!group_.stream) return;
  HostStream* s = HostStream::fromHandle(group_.stream);
  Status st = s ? s->synchronize() : invalidArgument("BatchNorm: stream is not a HostStream");
  if (!st.isOk()) throw CommError(st);
}

Tensor BatchNorm::forward(const Tensor& x) {
  const int n = x.rows();
  x_ = x;
  std::vector<float> sums(c_ + 1);  // per-channel sums, then the row count
  columnSums(n, c_, x.ptr(), sums.data());
  sums[c_] = float(n);
  sumOverGroup(sums);
  count_ = sums[c_];
  mean_.resize(c_);
  for (int c = 0; c < c_; ++c) mean_[c] = sums[c] / count_;
  std::vector<float> dev(c_);
  columnSquaredDeviations(n, c_, x.ptr(), mean_.data(), dev.data());
  sumOverGroup(dev);
  rstd_.resize(c_);
  for (int c = 0; c < c_; ++c) rstd_[c] = 1.0f / std::sqrt(dev[c] / count_ + kEps);
  Tensor y(x.shape);
  batchNormApply(n, c_, x.ptr(), mean_.data(), rstd_.data(), gamma.w, beta.w, y.ptr());
  return y;
}

Tensor BatchNorm::backward(const Tensor& dy) {
  const int n = x_.rows();
  std::vector<float> sums(2 * size_t(c_));  // Σ dy, then Σ dy·xhat
  batchNormBackwardSums(n, c_, x_.ptr(), mean_.data(), rstd_.data(), dy.ptr(), sums.data(), sums.data() + c_);
  for (int c = 0; c < c_; ++c) {
    beta.g[c] += sums[c];
    gamma.g[c] += sums[c_ + c];
  }
  sumOverGroup(sums);
  Tensor dx(x_.shape);
  batchNormBackwardApply(n, c_, x_.ptr(), mean_.data(), rstd_.data(), gamma.w, dy.ptr(), sums.data(),
                         sums.data() + c_, count_, dx.ptr());
  return dx;
}

}  // namespace plait::training
