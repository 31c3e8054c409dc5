// training/batch_norm.h — batch normalisation over the rows of [n, C], and
// its synchronised form (SyncBN) whose statistics cover the whole data-parallel
// batch (Ioffe & Szegedy 2015; PyTorch's SyncBatchNorm).
//
// Training-mode statistics only (biased variance of the current batch; no
// running averages, so evaluate() also normalises by its own batch).
//
// With a group of N ranks each holding n_r rows, M = Σ n_r:
//   forward:  mean = Σ_all x / M (one all-reduce of [Σx per channel, n_r]),
//             var  = Σ_all (x − mean)² / M (a second all-reduce; two passes
//             keep the variance accurate), xhat = (x − mean)·rstd,
//             y = gamma·xhat + beta.
//   backward: with the all-reduced sums Sdy = Σ_all dy and Sdx = Σ_all dy·xhat,
//             dx = gamma·rstd·(dy − Sdy/M − xhat·Sdx/M).
//             dgamma += Σ_local dy·xhat, dbeta += Σ_local dy: the local parts,
//             which the data-parallel gradient reduction sums or averages
//             like every other parameter.
// Under DDP every rank's dy is N·∂L/∂y of the global mean loss L (its loss is
// the mean over its own rows); dx is then N·∂L/∂x and the N-fold factor
// cancels in DDP's average, exactly as for the local layers.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "nccl.h"
#include "training/layers.h"

namespace plait::training {

// The ranks a SyncBN layer normalises over. comm null (or one rank): plain
// BatchNorm. stream: where to queue its all-reduces (a HostStream handle the
// trainer also uses, so the communicator sees one issue order), or null to
// run them at once; the layer waits for them either way.
struct DataParallelGroup {
  ncclComm_t comm = nullptr;  // not owned
  cudaStream_t stream = nullptr;
};

class BatchNorm : public Layer {
 public:
  BatchNorm(int channels, DataParallelGroup group, const std::string& name);
  std::string kind() const override { return "batchnorm"; }
  std::vector<Param*> params() override { return {&gamma, &beta}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { x_ = Tensor(); }
  Param gamma, beta;

 private:
  void sumOverGroup(std::vector<float>& v) const;
  int c_;
  DataParallelGroup group_;
  Tensor x_;
  std::vector<float> mean_, rstd_;
  float count_ = 0;  // rows over the whole group
};

// ---- kernels (templated so the tests run them in double) ----

// sums[c] = Σ_i x[i,c] (overwrites).
template <typename T>
void columnSums(int n, int C, const T* x, T* sums) {
  for (int c = 0; c < C; ++c) sums[c] = 0;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) sums[c] += x[size_t(i) * C + c];
}

// out[c] = Σ_i (x[i,c] − mean[c])² (overwrites).
template <typename T>
void columnSquaredDeviations(int n, int C, const T* x, const T* mean, T* out) {
  for (int c = 0; c < C; ++c) out[c] = 0;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) {
      T d = x[size_t(i) * C + c] - mean[c];
      out[c] += d * d;
    }
}

// y = gamma·(x − mean)·rstd + beta.
template <typename T>
void batchNormApply(int n, int C, const T* x, const T* mean, const T* rstd, const T* gamma, const T* beta, T* y) {
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c)
      y[size_t(i) * C + c] = gamma[c] * (x[size_t(i) * C + c] - mean[c]) * rstd[c] + beta[c];
}

// The local sums backward needs: sumDy[c] = Σ dy, sumDyXhat[c] = Σ dy·xhat (overwrite).
template <typename T>
void batchNormBackwardSums(int n, int C, const T* x, const T* mean, const T* rstd, const T* dy, T* sumDy,
                           T* sumDyXhat) {
  for (int c = 0; c < C; ++c) sumDy[c] = sumDyXhat[c] = 0;
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) {
      const size_t k = size_t(i) * C + c;
      sumDy[c] += dy[k];
      sumDyXhat[c] += dy[k] * (x[k] - mean[c]) * rstd[c];
    }
}

// dx from the group-wide sums over `count` rows (overwrites dx).
template <typename T>
void batchNormBackwardApply(int n, int C, const T* x, const T* mean, const T* rstd, const T* gamma, const T* dy,
                            const T* sumDy, const T* sumDyXhat, T count, T* dx) {
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < C; ++c) {
      const size_t k = size_t(i) * C + c;
      T xhat = (x[k] - mean[c]) * rstd[c];
      dx[k] = gamma[c] * rstd[c] * (dy[k] - sumDy[c] / count - xhat * sumDyXhat[c] / count);
    }
}

}  // namespace plait::training
