// training/moe_kernels.h — the routing half of a mixture-of-experts layer:
// softmax gate, top-k choice with expert capacity and token dropping, and the
// auxiliary load-balancing loss (Switch/GShard). The experts themselves are
// ordinary Linear–GELU–Linear stacks run by the layer (serial) or by the
// expert-parallel dispatcher (expert_parallel.h); both route with this code.
//
// Tokens are split into `groups` contiguous groups with capacity counted per
// group (GShard's groups): expert parallelism routes each rank's tokens as one
// group, so a serial run with groups = ranks makes exactly the same choices.
#pragma once

#include <cmath>
#include <vector>

#include "training/kernels.h"

namespace plait::training {

// One token's place in an expert's buffer.
struct MoeSlot {
  int token = -1;   // row of x
  int expert = -1;  // 0 <= expert < experts
  int slot = -1;    // 0 <= slot < capacity, position in the expert's buffer for this group
  int group = 0;
};

struct MoeRouting {
  int experts = 0, topK = 0, capacity = 0, groups = 1;
  std::vector<double> probs;    // [n, experts] softmax of the gate logits
  std::vector<MoeSlot> slots;   // the kept (token, expert) pairs
  std::vector<int> top1Count;   // [groups, experts] tokens of the group whose first choice is e
  int dropped = 0;              // (token, expert) choices dropped for capacity
  // Mean over groups of experts · Σ_e f_e·P_e, with f_e the group's fraction of
  // first choices for e and P_e its mean gate probability for e: 1 when
  // balanced. Per group, so that each expert-parallel rank's own loss,
  // averaged over ranks, is the serial loss.
  double auxLoss = 0;
};

// Capacity per expert per group: ⌈topK · tokensPerGroup · factor / experts⌉.
inline int moeCapacity(int tokensPerGroup, int experts, int topK, double factor) {
  return int(std::ceil(topK * tokensPerGroup * factor / experts));
}

// Routes n tokens from gate logits [n, experts] (any T; probabilities kept in
// double). Choices are filled by priority: every token's first choice, in
// token order, then every second choice, and so on; a choice whose expert is
// full in its group is dropped. Ties pick the lower expert index.
template <typename T>
MoeRouting moeRoute(int n, int experts, int topK, int groups, double capacityFactor, const T* logits) {
  MoeRouting r;
  r.experts = experts;
  r.topK = topK;
  r.groups = groups;
  const int perGroup = n / groups;
  r.capacity = moeCapacity(perGroup, experts, topK, capacityFactor);
  r.probs.resize(size_t(n) * experts);
  std::vector<int> choice(size_t(n) * topK);
  for (int i = 0; i < n; ++i) {
    const T* row = logits + size_t(i) * experts;
    double mx = row[0];
    for (int e = 1; e < experts; ++e) mx = std::max(mx, double(row[e]));
    double sum = 0;
    for (int e = 0; e < experts; ++e) sum += std::exp(double(row[e]) - mx);
    double* p = &r.probs[size_t(i) * experts];
    for (int e = 0; e < experts; ++e) p[e] = std::exp(double(row[e]) - mx) / sum;
    std::vector<bool> taken(experts, false);
    for (int j = 0; j < topK; ++j) {
      int best = -1;
      for (int e = 0; e < experts; ++e)
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      taken[best] = true;
      choice[size_t(i) * topK + j] = best;
    }
  }
  r.top1Count.assign(size_t(groups) * experts, 0);
  for (int i = 0; i < n; ++i) r.top1Count[size_t(i / perGroup) * experts + choice[size_t(i) * topK]]++;
  std::vector<int> fill(size_t(groups) * experts, 0);
  for (int j = 0; j < topK; ++j)
    for (int i = 0; i < n; ++i) {
      int e = choice[size_t(i) * topK + j], g = i / perGroup;
      int& used = fill[size_t(g) * experts + e];
      if (used < r.capacity) r.slots.push_back({i, e, used++, g});
      else ++r.dropped;
    }
  for (int g = 0; g < groups; ++g)
    for (int e = 0; e < experts; ++e) {
      double meanP = 0;
      for (int i = g * perGroup; i < (g + 1) * perGroup; ++i) meanP += r.probs[size_t(i) * experts + e];
      r.auxLoss += double(r.top1Count[size_t(g) * experts + e]) / perGroup * (meanP / perGroup);
    }
  r.auxLoss *= double(experts) / groups;
  return r;
}

// Gate logits gradient [n, experts] (overwritten) from the gradient of the
// combine weights dprob[n, experts] (zero where not routed) plus auxScale × the
// auxiliary loss's gradient (f fixed: d aux/d p[i,e] = experts·f_{g,e}/(groups·perGroup)).
template <typename T>
void moeGateBackward(int n, const MoeRouting& r, const double* dprob, double auxScale, T* dlogits) {
  const int E = r.experts, perGroup = n / r.groups;
  for (int i = 0; i < n; ++i) {
    const double* p = &r.probs[size_t(i) * E];
    const int* count = &r.top1Count[size_t(i / perGroup) * E];
    std::vector<double> g(E);
    for (int e = 0; e < E; ++e)
      g[e] = dprob[size_t(i) * E + e] +
             auxScale * E * (double(count[e]) / perGroup) / (double(r.groups) * perGroup);
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * g[e];
    for (int e = 0; e < E; ++e) dlogits[size_t(i) * E + e] = T(p[e] * (g[e] - dot));
  }
}

}  // namespace plait::training
