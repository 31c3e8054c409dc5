// training/parameter_server/lbfgs.h — batch L-BFGS over vectors that live
// wherever a VectorSpace keeps them: in memory (the serial reference) or
// sharded on parameter servers (Sandblaster), driven by the same code so the
// two differ only in the order float sums are taken.
//
// Nocedal & Wright, Numerical Optimization, Algorithm 7.4 (two-loop
// recursion) with 7.5's initial scaling γ = sᵀy / yᵀy; the first direction
// is the steepest descent scaled to unit length; a backtracking line search
// (Armijo, c1 = 1e-4, halving from t = 1); a pair with sᵀy ≤ 1e-10 is not
// kept (the curvature condition); a non-descent direction restarts from the
// steepest descent with the history cleared.
#pragma once

#include <functional>
#include <vector>

#include "plait/status.hpp"

namespace plait::training::ps {

// Vectors are named by small integers; ids() says how many the driver uses.
class VectorSpace {
 public:
  virtual ~VectorSpace() = default;
  virtual Status copy(int dst, int src) = 0;
  virtual Status axpy(int dst, double alpha, int src) = 0;  // dst += alpha · src
  virtual Status scale(int dst, double alpha) = 0;
  virtual Result<double> dot(int a, int b) = 0;
  // The objective at vector x; its gradient into vector g.
  virtual Result<double> evaluate(int x, int g) = 0;
};

// Vector ids: the parameters (kParams: the initial point before the run, the
// answer after), and the driver's work vectors.
enum LbfgsVector : int { kParams = 0, kGrad, kTrial, kTrialGrad, kDirection, kFirstPair };
inline int lbfgsVectors(int history) { return kFirstPair + 2 * history; }

struct LbfgsIteration {
  int iteration = 0;
  double loss = 0;    // at the accepted point
  int evaluations = 0;  // so far, the initial one included
  double step = 0;
};

// Runs `iterations` iterations from vector kParams; after each, onIteration.
// Returns the loss at the final point (kParams holds it).
Result<double> runLbfgs(VectorSpace& space, int history, int iterations, int maxLineSearch,
                        const std::function<void(const LbfgsIteration&)>& onIteration);

}  // namespace plait::training::ps
