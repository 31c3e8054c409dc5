// training/model.h — a model as a sequence of units (layers) ending in a
// softmax cross-entropy loss, with hooks around each unit's forward and
// backward, activation checkpointing per unit, and flat storage for
// parameters and gradients.
//
// A unit is the granularity of everything distributed: DDP marks gradients
// ready per unit, ZeRO-3 gathers and frees parameters per unit, checkpointing
// recomputes per unit, pipeline stages are runs of units.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/batch_norm.h"
#include "training/layers.h"
#include "training/mixed_precision.h"
#include "training/moe_layer.h"
#include "training/tensor.h"

namespace plait::training {

struct ModelConfig {
  std::string kind = "mlp";  // mlp | transformer | moe
  // mlp and moe: features in, classes out
  int inputs = 16, classes = 8, hidden = 32, depth = 2;
  bool batchnorm = false;  // mlp: Linear → BatchNorm → GELU (SyncBN over the data-parallel group)
  // transformer: tokens
  int vocab = 16, seq = 8, d = 16, heads = 2, blocks = 2;
  MoeConfig moe;
};

// A batch: inputs (features [samples, inputs] or token ids [samples, seq]) and
// one label per output row.
struct Batch {
  Tensor x;
  std::vector<int> labels;
};

// Called around each unit. Defaults do nothing.
class Hooks {
 public:
  virtual ~Hooks() = default;
  virtual void preForward(int unit) {}
  virtual void postForward(int unit) {}
  virtual void preBackward(int unit) {}
  virtual void postBackward(int unit) {}
};

struct LossParts {
  double loss = 0;  // mean cross-entropy over the batch's rows + auxiliary losses
  int rows = 0;
};

class Model {
 public:
  std::vector<std::unique_ptr<Layer>> units;
  std::vector<bool> checkpoint;  // per unit: keep only its input, recompute in backward
  // Mixed precision: each unit's input (but token ids) and each unit's output
  // gradient are rounded to this format before the unit uses them.
  Precision compute = Precision::kFp32;

  int numUnits() const { return int(units.size()); }
  std::vector<Param*> params();              // every parameter, forward order
  std::vector<Param*> unitParams(int unit);  // one unit's
  size_t unitNumel(int unit);
  size_t numel();

  // Runs units [first, last) forward from x; the output of the last.
  Tensor forwardUnits(int first, int last, const Tensor& x, Hooks* hooks);
  // Runs units [first, last) backward from dy; the input gradient.
  Tensor backwardUnits(int first, int last, const Tensor& dy, Hooks* hooks);
  // Whole step on one batch: forward, loss, backward. Gradients accumulate
  // (g += ...) with the loss gradient multiplied by gradScale/rows (mean
  // loss; gradScale = 1/k to accumulate k micro-batches, × loss scale for
  // mixed precision). Returns the unscaled loss.
  LossParts forwardBackward(const Batch& batch, float gradScale, Hooks* hooks = nullptr);
  // Forward and loss only.
  double evaluate(const Batch& batch);

 private:
  std::vector<Tensor> saved_;  // checkpointed inputs per unit
};

// Loss head: mean cross-entropy of logits vs labels plus the units' auxiliary
// losses; writes dlogits scaled by gradScale/rows.
double lossAndGradient(Model& model, const Tensor& logits, const std::vector<int>& labels, float gradScale,
                       Tensor* dlogits);

// The model kinds of ModelConfig. tp/ep: tensor/expert parallel groups (size
// 1 for serial); dp: the group BatchNorm layers synchronise over (none for
// serial). Parameters are unbound (bind storage, then initialise).
std::unique_ptr<Model> buildModel(const ModelConfig& config, TensorParallel tp = {}, ExpertParallel ep = {},
                                  DataParallelGroup dp = {});

// Initialises every bound parameter from (seed, its name): the same name gets
// the same values in every model and on every rank.
void initModel(Model& model, uint64_t seed);
uint64_t nameKey(const std::string& name);

// Owns flat parameter and gradient buffers, one per unit, and binds them.
class FlatStorage {
 public:
  explicit FlatStorage(Model& model);
  std::vector<float>& weights(int unit) { return w_[unit]; }
  std::vector<float>& grads(int unit) { return g_[unit]; }
  void zeroGrads();
  // Copies of all parameters / gradients in forward order.
  std::vector<float> flatWeights() const;
  std::vector<float> flatGrads() const;

 private:
  std::vector<std::vector<float>> w_, g_;
};

// Points the unit's params at consecutive ranges of w and g (either may be null).
void bindUnit(Model& model, int unit, float* w, float* g);

}  // namespace plait::training
