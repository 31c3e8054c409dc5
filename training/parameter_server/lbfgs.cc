#include "training/parameter_server/lbfgs.h"

#include <cmath>
#include <deque>
#include <utility>

namespace plait::training::ps {

namespace {

struct Pair {
  int s, y;  // vector ids
  double rho, yy;
};

// d = −H·g by the two-loop recursion over the pairs (oldest first).
Status direction(VectorSpace& v, const std::deque<Pair>& pairs, int g, int d) {
  PLAIT_RETURN_IF_ERROR(v.copy(d, g));
  std::vector<double> alpha(pairs.size());
  for (size_t i = pairs.size(); i-- > 0;) {
    PLAIT_ASSIGN_OR_RETURN(double sd, v.dot(pairs[i].s, d));
    alpha[i] = pairs[i].rho * sd;
    PLAIT_RETURN_IF_ERROR(v.axpy(d, -alpha[i], pairs[i].y));
  }
  if (pairs.empty()) {
    PLAIT_ASSIGN_OR_RETURN(double gg, v.dot(g, g));
    PLAIT_RETURN_IF_ERROR(v.scale(d, gg > 0 ? 1.0 / std::sqrt(gg) : 1.0));
  } else {
    const Pair& last = pairs.back();
    PLAIT_RETURN_IF_ERROR(v.scale(d, 1.0 / (last.rho * last.yy)));  // γ = sᵀy / yᵀy
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    PLAIT_ASSIGN_OR_RETURN(double yd, v.dot(pairs[i].y, d));
    PLAIT_RETURN_IF_ERROR(v.axpy(d, alpha[i] - pairs[i].rho * yd, pairs[i].s));
  }
  return v.scale(d, -1.0);
}

}  // namespace

Result<double> runLbfgs(VectorSpace& v, int history, int iterations, int maxLineSearch,
                        const std::function<void(const LbfgsIteration&)>& onIteration) {
  int w = kParams, g = kGrad, wt = kTrial, gt = kTrialGrad;
  const int d = kDirection;
  std::deque<Pair> pairs;
  std::vector<int> freeSlots;
  for (int i = 0; i < history; ++i) freeSlots.push_back(kFirstPair + 2 * i);
  int evaluations = 1;
  PLAIT_ASSIGN_OR_RETURN(double f, v.evaluate(w, g));
  for (int it = 1; it <= iterations; ++it) {
    PLAIT_RETURN_IF_ERROR(direction(v, pairs, g, d));
    PLAIT_ASSIGN_OR_RETURN(double gd, v.dot(g, d));
    if (!(gd < 0)) {  // not a descent direction: start over from the gradient
      for (const Pair& p : pairs) freeSlots.push_back(p.s);
      pairs.clear();
      PLAIT_RETURN_IF_ERROR(direction(v, pairs, g, d));
      PLAIT_ASSIGN_OR_RETURN(gd, v.dot(g, d));
      if (!(gd < 0)) break;  // a zero gradient: a stationary point
    }
    double t = 1, ft = 0;
    for (int tries = 0;; ++tries) {
      PLAIT_RETURN_IF_ERROR(v.copy(wt, w));
      PLAIT_RETURN_IF_ERROR(v.axpy(wt, t, d));
      PLAIT_ASSIGN_OR_RETURN(ft, v.evaluate(wt, gt));
      ++evaluations;
      if (ft <= f + 1e-4 * t * gd || tries + 1 >= maxLineSearch) break;
      t *= 0.5;
    }
    // The new pair: s = w_new − w, y = g_new − g.
    if (history > 0) {
      if (freeSlots.empty()) {
        freeSlots.push_back(pairs.front().s);
        pairs.pop_front();
      }
      const int s = freeSlots.back(), y = s + 1;
      freeSlots.pop_back();
      PLAIT_RETURN_IF_ERROR(v.copy(s, wt));
      PLAIT_RETURN_IF_ERROR(v.axpy(s, -1.0, w));
      PLAIT_RETURN_IF_ERROR(v.copy(y, gt));
      PLAIT_RETURN_IF_ERROR(v.axpy(y, -1.0, g));
      PLAIT_ASSIGN_OR_RETURN(double sy, v.dot(s, y));
      PLAIT_ASSIGN_OR_RETURN(double yy, v.dot(y, y));
      if (sy > 1e-10 && yy > 0)
        pairs.push_back({s, y, 1.0 / sy, yy});
      else
        freeSlots.push_back(s);
    }
    std::swap(w, wt);
    std::swap(g, gt);
    f = ft;
    if (onIteration) onIteration({it, f, evaluations, t});
  }
  if (w != kParams) PLAIT_RETURN_IF_ERROR(v.copy(kParams, w));
  return f;
}

}  // namespace plait::training::ps
