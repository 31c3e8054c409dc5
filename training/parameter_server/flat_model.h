// training/parameter_server/flat_model.h — a model whose parameters and
// gradients are each one flat vector (forward order), what the parameter
// servers shard and the replicas fetch and push whole.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nccl.h"
#include "plait/status.hpp"
#include "training/model.h"

namespace plait::training::ps {

class FlatModel {
 public:
  FlatModel(const ModelConfig& config, uint64_t seed) : model_(buildModel(config)) {
    weights_.assign(model_->numel(), 0.0f);
    grads_.assign(weights_.size(), 0.0f);
    size_t off = 0;
    for (int u = 0; u < model_->numUnits(); ++u) {
      bindUnit(*model_, u, weights_.data() + off, grads_.data() + off);
      off += model_->unitNumel(u);
    }
    initModel(*model_, seed);
  }
  size_t numel() const { return weights_.size(); }
  std::vector<float>& weights() { return weights_; }
  std::vector<float>& grads() { return grads_; }
  void zeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }
  // Adds the gradient of the batch's mean loss × gradScale to grads();
  // returns the batch's mean loss.
  double accumulate(const Batch& batch, float gradScale) { return model_->forwardBackward(batch, gradScale).loss; }
  double evaluate(const Batch& batch) { return model_->evaluate(batch); }

 private:
  std::unique_ptr<Model> model_;
  std::vector<float> weights_, grads_;
};

// Elements [begin, end) of n split into `parts` contiguous shards.
inline std::pair<size_t, size_t> shardRange(size_t n, int parts, int index) {
  return {n * size_t(index) / size_t(parts), n * size_t(index + 1) / size_t(parts)};
}

// Rows [begin, end) of a batch's samples.
Batch sliceBatch(const Batch& batch, int begin, int end);

// What a run needs to know of its job: this rank, the ranks, the flat
// parameter count. `check` judges the configuration against the rank count
// first; then every server must get at least one parameter.
struct JobShape {
  int rank = 0, nranks = 0;
  size_t params = 0;
};
Result<JobShape> jobShape(const ModelConfig& model, uint64_t seed, int servers, ncclComm_t comm,
                          const std::string& algorithm, const std::function<Status(int nranks)>& check);

}  // namespace plait::training::ps
