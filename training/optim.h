// training/optim.h — SGD (with optional momentum), Adam and Adagrad as
// elementwise updates on flat ranges.
//
// Elementwise is the point: updating a shard of a flat parameter vector
// gives bit-for-bit the values of updating the whole (ZeRO relies on it).
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

namespace plait::training {

struct OptimizerConfig {
  std::string kind = "adam";  // adam | sgd | adagrad
  float lr = 0.01f;
  float momentum = 0.0f;      // sgd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam (eps: adagrad too)
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig c) : c_(std::move(c)) {}
  const OptimizerConfig& config() const { return c_; }
  // Floats of state per parameter (adam: m and v; adagrad: the sum of
  // squared gradients; sgd: the momentum buffer or none).
  int stateFloats() const {
    if (c_.kind == "adam") return 2;
    return c_.kind == "adagrad" || c_.momentum != 0 ? 1 : 0;
  }
  // One update of n elements; state holds stateFloats()·n floats (m then v),
  // zero before the first step; step counts from 1.
  void update(float* w, const float* g, float* state, size_t n, int step) const {
    updateParts(w, g, state, state ? state + n : nullptr, n, step);
  }
  // The same for elements [offset, offset+n) of a range whose state has
  // `stride` floats per state array (m at state, v at state + stride).
  void updateStrided(float* w, const float* g, float* state, size_t offset, size_t stride, size_t n,
                     int step) const {
    if (!state) return updateParts(w, g, nullptr, nullptr, n, step);
    updateParts(w, g, state + offset, state + stride + offset, n, step);
  }

  // s0: Adam's m, Adagrad's sum of squares or SGD's momentum buffer; s1: Adam's v.
  // Adagrad as Downpour SGD uses it (Dean et al. 2012, after Duchi et al.):
  // each parameter's rate is lr over the root of its squared gradients so
  // far, this one included.
  void updateParts(float* w, const float* g, float* s0, float* s1, size_t n, int step) const {
    if (c_.kind == "adam") {
      const float c1 = 1.0f - std::pow(c_.beta1, float(step)), c2 = 1.0f - std::pow(c_.beta2, float(step));
      for (size_t i = 0; i < n; ++i) {
        s0[i] = c_.beta1 * s0[i] + (1.0f - c_.beta1) * g[i];
        s1[i] = c_.beta2 * s1[i] + (1.0f - c_.beta2) * g[i] * g[i];
        w[i] -= c_.lr * (s0[i] / c1) / (std::sqrt(s1[i] / c2) + c_.eps);
      }
    } else if (c_.kind == "adagrad") {
      for (size_t i = 0; i < n; ++i) {
        s0[i] += g[i] * g[i];
        w[i] -= c_.lr * g[i] / (std::sqrt(s0[i]) + c_.eps);
      }
    } else if (c_.momentum != 0) {
      for (size_t i = 0; i < n; ++i) {
        s0[i] = c_.momentum * s0[i] + g[i];
        w[i] -= c_.lr * s0[i];
      }
    } else {
      for (size_t i = 0; i < n; ++i) w[i] -= c_.lr * g[i];
    }
  }

 private:
  OptimizerConfig c_;
};

}  // namespace plait::training
