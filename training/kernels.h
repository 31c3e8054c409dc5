// training/kernels.h — the numerics of every layer as plain functions on
// row-major arrays, templated on the element type so the same code runs in
// float for training and in double for the finite-difference checks.
//
// Conventions: a matrix is [rows, cols] row-major; x is [n, in] (one sample
// or token per row); a Linear weight is [in, out] so y = x·W + b. Backward
// functions ACCUMULATE into parameter gradients (dW += ...) and OVERWRITE
// input gradients (dx = ...), so gradient accumulation over micro-batches is
// free and a fresh dx needs no zeroing. Every loop sums in a fixed order, so a
// result depends only on the inputs (no threads, no blocking).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

namespace plait::training {

// C[m,n] (+)= op(A)·op(B), op(A) [m,k], op(B) [k,n]. transA: A is stored
// [k,m]; transB: B is stored [n,k]. Sums over k in increasing order.
template <typename T>
void gemm(bool transA, bool transB, int m, int n, int k, const T* A, const T* B, T* C, bool accumulate) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      T sum = accumulate ? C[size_t(i) * n + j] : T(0);
      for (int p = 0; p < k; ++p) {
        T a = transA ? A[size_t(p) * m + i] : A[size_t(i) * k + p];
        T b = transB ? B[size_t(j) * k + p] : B[size_t(p) * n + j];
        sum += a * b;
      }
      C[size_t(i) * n + j] = sum;
    }
  }
}

// y[n,out] = x[n,in]·W[in,out] (+ b[out] when b is not null).
template <typename T>
void linearForward(int n, int in, int out, const T* x, const T* W, const T* b, T* y) {
  gemm(false, false, n, out, in, x, W, y, false);
  if (b)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < out; ++j) y[size_t(i) * out + j] += b[j];
}

// dx = dy·Wᵀ (dx may be null), dW += xᵀ·dy, db += Σ rows of dy (db may be null).
template <typename T>
void linearBackward(int n, int in, int out, const T* x, const T* W, const T* dy, T* dx, T* dW, T* db) {
  if (dx) gemm(false, true, n, in, out, dy, W, dx, false);
  gemm(true, false, in, out, n, x, dy, dW, true);
  if (db)
    for (int j = 0; j < out; ++j) {
      T sum = db[j];
      for (int i = 0; i < n; ++i) sum += dy[size_t(i) * out + j];
      db[j] = sum;
    }
}

// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
template <typename T>
void geluForward(size_t count, const T* x, T* y) {
  const T c = T(0.7978845608028654);
  for (size_t i = 0; i < count; ++i) {
    T u = c * (x[i] + T(0.044715) * x[i] * x[i] * x[i]);
    y[i] = T(0.5) * x[i] * (T(1) + std::tanh(u));
  }
}

template <typename T>
void geluBackward(size_t count, const T* x, const T* dy, T* dx) {
  const T c = T(0.7978845608028654);
  for (size_t i = 0; i < count; ++i) {
    T x2 = x[i] * x[i];
    T t = std::tanh(c * (x[i] + T(0.044715) * x2 * x[i]));
    T du = c * (T(1) + T(3) * T(0.044715) * x2);
    dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * x[i] * (T(1) - t * t) * du);
  }
}

// Per row: y = (x − mean)·rstd·gamma + beta, rstd = 1/√(var + eps), biased
// variance. Saves mean and rstd per row for backward.
template <typename T>
void layerNormForward(int n, int d, const T* x, const T* gamma, const T* beta, T eps, T* y, T* mean, T* rstd) {
  for (int i = 0; i < n; ++i) {
    const T* row = x + size_t(i) * d;
    T mu = 0;
    for (int j = 0; j < d; ++j) mu += row[j];
    mu /= T(d);
    T var = 0;
    for (int j = 0; j < d; ++j) var += (row[j] - mu) * (row[j] - mu);
    var /= T(d);
    T r = T(1) / std::sqrt(var + eps);
    mean[i] = mu;
    rstd[i] = r;
    for (int j = 0; j < d; ++j) y[size_t(i) * d + j] = (row[j] - mu) * r * gamma[j] + beta[j];
  }
}

// dx = rstd·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat)), dxhat = dy·gamma;
// dgamma += Σ dy·xhat, dbeta += Σ dy.
template <typename T>
void layerNormBackward(int n, int d, const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy, T* dx,
                       T* dgamma, T* dbeta) {
  for (int i = 0; i < n; ++i) {
    const T* row = x + size_t(i) * d;
    const T* drow = dy + size_t(i) * d;
    T sumD = 0, sumDX = 0;
    for (int j = 0; j < d; ++j) {
      T xhat = (row[j] - mean[i]) * rstd[i];
      T dxhat = drow[j] * gamma[j];
      sumD += dxhat;
      sumDX += dxhat * xhat;
      dgamma[j] += drow[j] * xhat;
      dbeta[j] += drow[j];
    }
    for (int j = 0; j < d; ++j) {
      T xhat = (row[j] - mean[i]) * rstd[i];
      T dxhat = drow[j] * gamma[j];
      dx[size_t(i) * d + j] = rstd[i] * (dxhat - sumD / T(d) - xhat * sumDX / T(d));
    }
  }
}

// Softmax cross-entropy summed over rows (not averaged): returns Σᵢ −log pᵢ[labelᵢ]
// accumulated in double, and writes dlogits = scale·(p − onehot). The caller
// chooses scale (1/global batch for a mean loss).
template <typename T>
double softmaxCrossEntropy(int n, int classes, const T* logits, const int* labels, T scale, T* dlogits) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const T* row = logits + size_t(i) * classes;
    T mx = *std::max_element(row, row + classes);
    T sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(row[c] - mx);
    T logZ = mx + std::log(sum);
    total += double(logZ - row[labels[i]]);
    if (!dlogits) continue;
    for (int c = 0; c < classes; ++c) {
      T p = std::exp(row[c] - logZ);
      dlogits[size_t(i) * classes + c] = scale * (p - (c == labels[i] ? T(1) : T(0)));
    }
  }
  return total;
}

// Causal multi-head attention core. q, k, v, o are [batch·seq, heads·dh]
// with head h in columns [h·dh, (h+1)·dh). probs [batch, heads, seq, seq]
// keeps the softmax for backward. Scores are scaled by 1/√dh and position t
// attends to positions ≤ t.
template <typename T>
void attentionForward(int batch, int seq, int heads, int dh, const T* q, const T* k, const T* v, T* probs, T* o) {
  const int d = heads * dh;
  const T scale = T(1) / std::sqrt(T(dh));
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < seq; ++t) {
        T* p = probs + ((size_t(b) * heads + h) * seq + t) * seq;
        const T* qt = q + (size_t(b) * seq + t) * d + h * dh;
        T mx = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const T* ks = k + (size_t(b) * seq + s) * d + h * dh;
          T dot = 0;
          for (int j = 0; j < dh; ++j) dot += qt[j] * ks[j];
          p[s] = dot * scale;
          mx = std::max(mx, p[s]);
        }
        T sum = 0;
        for (int s = 0; s <= t; ++s) sum += (p[s] = std::exp(p[s] - mx));
        for (int s = 0; s <= t; ++s) p[s] /= sum;
        for (int s = t + 1; s < seq; ++s) p[s] = 0;
        T* ot = o + (size_t(b) * seq + t) * d + h * dh;
        for (int j = 0; j < dh; ++j) {
          T acc = 0;
          for (int s = 0; s <= t; ++s) acc += p[s] * v[(size_t(b) * seq + s) * d + h * dh + j];
          ot[j] = acc;
        }
      }
}

// Overwrites dq, dk, dv from do_ and the saved probs.
template <typename T>
void attentionBackward(int batch, int seq, int heads, int dh, const T* q, const T* k, const T* v, const T* probs,
                       const T* dout, T* dq, T* dk, T* dv) {
  const int d = heads * dh;
  const T scale = T(1) / std::sqrt(T(dh));
  const size_t total = size_t(batch) * seq * d;
  std::fill(dq, dq + total, T(0));
  std::fill(dk, dk + total, T(0));
  std::fill(dv, dv + total, T(0));
  std::vector<T> dp(seq);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < seq; ++t) {
        const T* p = probs + ((size_t(b) * heads + h) * seq + t) * seq;
        const size_t rt = (size_t(b) * seq + t) * d + h * dh;
        T dot = 0;  // Σ_s p[s]·dp[s], for the softmax backward
        for (int s = 0; s <= t; ++s) {
          const size_t rs = (size_t(b) * seq + s) * d + h * dh;
          T acc = 0;
          for (int j = 0; j < dh; ++j) {
            acc += dout[rt + j] * v[rs + j];
            dv[rs + j] += p[s] * dout[rt + j];
          }
          dp[s] = acc;
          dot += p[s] * acc;
        }
        for (int s = 0; s <= t; ++s) {
          const size_t rs = (size_t(b) * seq + s) * d + h * dh;
          T ds = p[s] * (dp[s] - dot) * scale;
          for (int j = 0; j < dh; ++j) {
            dq[rt + j] += ds * k[rs + j];
            dk[rs + j] += ds * q[rt + j];
          }
        }
      }
}

}  // namespace plait::training
