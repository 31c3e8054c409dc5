// training/layers.h — layers with hand-written forward and backward.
//
// A Layer declares its Params (storage bound by the caller before use),
// caches what backward needs during forward, and in backward accumulates
// parameter gradients (g += ...) and returns the input gradient. dropCache()
// forgets the activations (activation checkpointing re-runs forward later).
// Numerics live in kernels.h; this file holds shapes and bookkeeping.
//
// Tensor parallelism (Megatron): Attention and Mlp take a TensorParallel
// group and then hold only their shard (heads, or hidden units). Their input
// passes through f (identity forward, all-reduce of the gradient backward)
// and their output through g (all-reduce forward, identity backward); the
// output bias is added once after g and is replicated. With size 1 and no
// communicator they are the serial layers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "training/tensor.h"

namespace plait::training {

struct TensorParallel {
  ncclComm_t comm = nullptr;  // not owned; null when size == 1
  int rank = 0;
  int size = 1;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;
  virtual std::vector<Param*> params() = 0;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
  virtual void dropCache() = 0;
  // An extra loss term this layer added in its last forward (MoE balance loss).
  virtual double auxLoss() const { return 0; }
  // The factor the loss gradient carries (1/k for k accumulated micro-batches,
  // × the loss scale under mixed precision), for gradients of auxLoss().
  virtual void setGradScale(float) {}
};

class Linear : public Layer {
 public:
  Linear(int in, int out, bool bias, const std::string& name);
  std::string kind() const override { return "linear"; }
  std::vector<Param*> params() override;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { x_ = Tensor(); }
  Param W, b;

 private:
  int in_, out_;
  bool bias_;
  Tensor x_;
};

class Gelu : public Layer {
 public:
  std::string kind() const override { return "gelu"; }
  std::vector<Param*> params() override { return {}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { x_ = Tensor(); }

 private:
  Tensor x_;
};

class LayerNorm : public Layer {
 public:
  LayerNorm(int d, const std::string& name);
  std::string kind() const override { return "layernorm"; }
  std::vector<Param*> params() override { return {&gamma, &beta}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { x_ = Tensor(); mean_.clear(); rstd_.clear(); }
  Param gamma, beta;

 private:
  int d_;
  Tensor x_;
  std::vector<float> mean_, rstd_;
};

// Token ids (stored as floats, exact below 2²⁴) [batch, seq] → [batch, seq, d]
// with learned token and position embeddings.
class Embedding : public Layer {
 public:
  Embedding(int vocab, int seq, int d);
  std::string kind() const override { return "embedding"; }
  std::vector<Param*> params() override { return {&tok, &pos}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { ids_ = Tensor(); }
  Param tok, pos;

 private:
  int vocab_, seq_, d_;
  Tensor ids_;
};

// Causal self-attention, [batch, seq, d] → [batch, seq, d], split by heads
// under tensor parallelism: Q, K, V column-parallel, output row-parallel.
class Attention : public Layer {
 public:
  Attention(int d, int heads, TensorParallel tp, const std::string& name);
  std::string kind() const override { return "attention"; }
  std::vector<Param*> params() override { return {&Wq, &Wk, &Wv, &Wo, &bo}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override;
  Param Wq, Wk, Wv, Wo, bo;  // Wq/Wk/Wv [d, localHeads·dh], Wo [localHeads·dh, d], bo [d]

 private:
  int d_, heads_, dh_;
  TensorParallel tp_;
  Tensor x_, q_, k_, v_, o_;
  std::vector<float> probs_;
};

// Linear → GELU → Linear, [.., d] → [.., d]; hidden units split under tensor
// parallelism (first layer column-parallel, second row-parallel).
class Mlp : public Layer {
 public:
  Mlp(int d, int hidden, TensorParallel tp, const std::string& name);
  std::string kind() const override { return "mlp"; }
  std::vector<Param*> params() override { return {&W1, &b1, &W2, &b2}; }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override { x_ = h_ = a_ = Tensor(); }
  Param W1, b1, W2, b2;  // W1 [d, localHidden], b1 [localHidden], W2 [localHidden, d], b2 [d]

 private:
  int d_, hidden_;
  TensorParallel tp_;
  Tensor x_, h_, a_;
};

// Pre-norm transformer block: x + Attention(LN(x)), then h + Mlp(LN(h)).
class TransformerBlock : public Layer {
 public:
  TransformerBlock(int d, int heads, int hidden, TensorParallel tp, const std::string& name);
  std::string kind() const override { return "block"; }
  std::vector<Param*> params() override;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  void dropCache() override;

 private:
  LayerNorm ln1_, ln2_;
  Attention attn_;
  Mlp mlp_;
};

// Adds a to y elementwise (sizes must match).
void addInPlace(Tensor& y, const Tensor& a);

}  // namespace plait::training
