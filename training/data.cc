#include "training/data.h"

#include <numeric>

namespace plait::training {
namespace {
constexpr uint64_t kTeacherKey = 0x7eac4e5;
constexpr uint64_t kSampleKey = 0x5a3b1e;
constexpr uint64_t kShuffleKey = 0x5f1e;
}  // namespace

SyntheticDataset::SyntheticDataset(const ModelConfig& config, uint64_t seed, int size)
    : config_(config), seed_(seed), size_(size) {
  teacher_.resize(size_t(config.inputs) * config.classes);
  for (size_t i = 0; i < teacher_.size(); ++i) teacher_[i] = normalAt(seed, kTeacherKey, i);
}

Batch SyntheticDataset::batch(const std::vector<int>& indices) const {
  Batch b;
  const int n = int(indices.size());
  if (config_.kind == "transformer") {
    const int T = config_.seq, V = config_.vocab;
    b.x = Tensor({n, T});
    for (int s = 0; s < n; ++s) {
      const uint64_t i = uint64_t(indices[s]);
      int tok = int(uniformAt(seed_, kSampleKey, i * 1000) * V);
      for (int t = 0; t <= T; ++t) {
        if (t < T) b.x.data[size_t(s) * T + t] = float(tok);
        int next = uniformAt(seed_, kSampleKey, i * 1000 + 2 * t + 1) < 0.75
                       ? (5 * tok + 3) % V
                       : int(uniformAt(seed_, kSampleKey, i * 1000 + 2 * t + 2) * V);
        if (t < T) b.labels.push_back(next);
        tok = next;
      }
    }
    return b;
  }
  const int D = config_.inputs, C = config_.classes;
  b.x = Tensor({n, D});
  for (int s = 0; s < n; ++s) {
    const uint64_t i = uint64_t(indices[s]);
    float* x = b.x.ptr() + size_t(s) * D;
    for (int j = 0; j < D; ++j) x[j] = float(normalAt(seed_, kSampleKey, i * D + j));
    int best = 0;
    double bestScore = -1e300;
    for (int c = 0; c < C; ++c) {
      double score = 0;
      for (int j = 0; j < D; ++j) score += x[j] * teacher_[size_t(j) * C + c];
      if (score > bestScore) bestScore = score, best = c;
    }
    b.labels.push_back(best);
  }
  return b;
}

DistributedSampler::DistributedSampler(int datasetSize, int nranks, int rank, uint64_t seed, bool shuffle)
    : size_(datasetSize), nranks_(nranks), rank_(rank), seed_(seed), shuffle_(shuffle) {}

int DistributedSampler::indexAt(int64_t position) const {
  int epoch = int(position / size_), offset = int(position % size_);
  if (!shuffle_) return offset;
  if (epoch != cachedEpoch_) {  // Fisher–Yates with counter-based draws
    perm_.resize(size_);
    std::iota(perm_.begin(), perm_.end(), 0);
    for (int i = size_ - 1; i > 0; --i) {
      int j = int(uniformAt(seed_, kShuffleKey + uint64_t(epoch), uint64_t(i)) * (i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    cachedEpoch_ = epoch;
  }
  return perm_[offset];
}

std::vector<int> DistributedSampler::indices(int step, int localBatch) const {
  std::vector<int> out;
  const int64_t base = int64_t(step) * localBatch * nranks_;
  for (int j = 0; j < localBatch; ++j) out.push_back(indexAt(base + int64_t(j) * nranks_ + rank_));
  return out;
}

Batch globalBatch(const SyntheticDataset& data, int step, int localBatch, int nranks, uint64_t seed) {
  std::vector<int> all;
  for (int r = 0; r < nranks; ++r) {
    std::vector<int> mine = DistributedSampler(data.size(), nranks, r, seed).indices(step, localBatch);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  return data.batch(all);
}

}  // namespace plait::training
