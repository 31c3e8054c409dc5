// training/data.h — a seeded synthetic dataset and a sampler that shards it
// by rank like PyTorch's DistributedSampler.
//
// Sample i is a pure function of (seed, i), so any rank can make any sample
// and a run is reproducible anywhere.
//   features (mlp, moe): x ~ N(0, 1)^inputs, label = argmax of x·T for a fixed
//     random teacher T [inputs, classes] (learnable, so loss falls).
//   tokens (transformer): seq+1 tokens where the next is (5·prev + 3) mod vocab
//     with probability 0.75, else random; inputs are the first seq tokens,
//     labels the next token at each position.
#pragma once

#include <cstdint>
#include <vector>

#include "training/model.h"

namespace plait::training {

class SyntheticDataset {
 public:
  SyntheticDataset(const ModelConfig& config, uint64_t seed, int size = 4096);
  int size() const { return size_; }
  // The samples at these indices, in this order, as one batch.
  Batch batch(const std::vector<int>& indices) const;

 private:
  ModelConfig config_;
  uint64_t seed_;
  int size_;
  std::vector<double> teacher_;
};

// Shards the (shuffled per epoch) index sequence over ranks: at step s with
// local batch b, rank r of N takes the positions s·b·N + j·N + r, j < b, of
// the endless sequence epoch 0, epoch 1, ... (each epoch a seeded permutation).
// The ranks' shards of a step together are exactly the global batch that
// a single rank with local batch b·N takes at that step.
class DistributedSampler {
 public:
  DistributedSampler(int datasetSize, int nranks, int rank, uint64_t seed, bool shuffle = true);
  std::vector<int> indices(int step, int localBatch) const;

 private:
  int indexAt(int64_t position) const;
  int size_, nranks_, rank_;
  uint64_t seed_;
  bool shuffle_;
  mutable int cachedEpoch_ = -1;
  mutable std::vector<int> perm_;
};

// The global batch of a step assembled rank by rank (rank 0's shard, then
// rank 1's, ...): what a serial reference trains on so that its rows line
// up with the ranks (MoE groups, per-rank sums).
Batch globalBatch(const SyntheticDataset& data, int step, int localBatch, int nranks, uint64_t seed);

}  // namespace plait::training
