// training/moe_layer.h — a mixture-of-experts feed-forward layer with a
// residual: y = x + Σ_{kept choices} p[token, e] · expert_e(x[token]).
//
// Routing (moe_kernels.h): softmax gate, top-k, capacity per group, dropped
// choices contribute nothing (the residual carries the token). Each expert is
// Linear → GELU → Linear.
//
// Expert parallelism: with an ExpertParallel group of N ranks, each rank holds
// experts/N experts, routes its own tokens as one group, and the token buffers
// [experts, capacity, d] travel by ncclAlltoAll to the experts' ranks
// (dispatch) and back (combine), forward and backward. An expert then sees the
// rows of every rank in rank order, exactly as the serial layer with
// groups = N sees its groups, so the arithmetic is the same. Gate gradients
// are partial per rank (average them like data-parallel gradients); expert
// gradients already hold every rank's tokens.
#pragma once

#include <string>
#include <vector>

#include "training/layers.h"
#include "training/moe_kernels.h"

namespace plait::training {

struct ExpertParallel {
  ncclComm_t comm = nullptr;  // not owned; null when size == 1
  int rank = 0;
  int size = 1;
};

struct MoeConfig {
  int d = 16, hidden = 32, experts = 4, topK = 2;
  double capacityFactor = 1.0;
  int groups = 1;          // serial: routing groups; expert parallel: must be 1 (one per rank)
  float auxWeight = 0.01f;  // weight of the balance loss in the total loss
};

class MoeLayer : public Layer {
 public:
  MoeLayer(const MoeConfig& config, ExpertParallel ep, const std::string& name);
  std::string kind() const override { return "moe"; }
  std::vector<Param*> params() override;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override;
  double auxLoss() const override { return config_.auxWeight * routing_.auxLoss; }
  void setGradScale(float s) override { gradScale_ = s; }
  // Params of the experts this rank holds (their gradients are not averaged
  // over the expert-parallel group).
  std::vector<Param*> expertParams();
  const MoeRouting& routing() const { return routing_; }

  Param gate;  // [d, experts]

 private:
  struct Expert {
    Param W1, b1, W2, b2;
    Tensor x, h, a, y;  // cached rows [sources·capacity, ...]
  };
  // Moves a buffer [sources][expertsHere][capacity][d] between token owners
  // and expert owners (identity when serial).
  std::vector<float> exchange(const std::vector<float>& buffer);
  // Runs the local experts on buffer rows (layout above) and returns outputs
  // in the same layout; caches per expert for backward.
  std::vector<float> runExperts(const std::vector<float>& in);
  std::vector<float> backExperts(const std::vector<float>& dOut);
  size_t slotRow(const MoeSlot& s) const;
  int sources() const;

  MoeConfig config_;
  ExpertParallel ep_;
  std::vector<Expert> experts_;  // the local ones: global index = ep.rank·local + i
  Tensor x_, logits_;
  MoeRouting routing_;
  std::vector<float> combined_;  // expert outputs back at the token owner [groups·experts·capacity, d]
  float gradScale_ = 1.0f;
};

}  // namespace plait::training
