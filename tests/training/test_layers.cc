// Each layer's backward against central finite differences.
//
// Kernels (kernels.h, moe_kernels.h) run in double: with h = 1e-6 the
// difference quotient's error is O(h²·f''') + O(ε/h) ≈ 1e-10, so analytic and
// numeric gradients must agree to 1e-7 relative. The float Layer objects
// (which wire kernels together: residuals, heads, routing) are checked in
// float with h = 1e-2 against a 2e-2 tolerance, enough to catch any wiring
// mistake (a missing term changes a gradient by O(1)).
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "training/kernels.h"
#include "training/layers.h"
#include "training/model.h"
#include "training/moe_kernels.h"
#include "training/moe_layer.h"

using namespace plait::training;

namespace {

std::vector<double> randomVec(size_t n, uint64_t key, double scale = 1.0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * normalAt(42, key, i);
  return v;
}

// Max over i of |analytic − numeric| / max(1, |numeric|) for the scalar f
// perturbed in x[i].
double maxGradError(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& f,
                    double h = 1e-6) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double up = f();
    x[i] = keep - h;
    double down = f();
    x[i] = keep;
    double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("linear backward matches finite differences", "[training][numerics]") {
  const int n = 3, in = 4, out = 5;
  auto x = randomVec(n * in, 1), W = randomVec(in * out, 2), b = randomVec(out, 3), r = randomVec(n * out, 4);
  auto f = [&] {
    std::vector<double> y(n * out);
    linearForward(n, in, out, x.data(), W.data(), b.data(), y.data());
    return dot(y, r);
  };
  std::vector<double> dx(n * in), dW(in * out, 0.0), db(out, 0.0);
  linearBackward(n, in, out, x.data(), W.data(), r.data(), dx.data(), dW.data(), db.data());
  CHECK(maxGradError(x, dx, f) < 1e-7);
  CHECK(maxGradError(W, dW, f) < 1e-7);
  CHECK(maxGradError(b, db, f) < 1e-7);
}

TEST_CASE("gelu backward matches finite differences", "[training][numerics]") {
  auto x = randomVec(20, 5, 2.0), r = randomVec(20, 6);
  auto f = [&] {
    std::vector<double> y(x.size());
    geluForward(x.size(), x.data(), y.data());
    return dot(y, r);
  };
  std::vector<double> dx(x.size());
  geluBackward(x.size(), x.data(), r.data(), dx.data());
  CHECK(maxGradError(x, dx, f) < 1e-7);
}

TEST_CASE("layernorm backward matches finite differences", "[training][numerics]") {
  const int n = 3, d = 6;
  auto x = randomVec(n * d, 7), gamma = randomVec(d, 8), beta = randomVec(d, 9), r = randomVec(n * d, 10);
  std::vector<double> mean(n), rstd(n);
  auto f = [&] {
    std::vector<double> y(n * d);
    layerNormForward(n, d, x.data(), gamma.data(), beta.data(), 1e-5, y.data(), mean.data(), rstd.data());
    return dot(y, r);
  };
  f();
  std::vector<double> dx(n * d), dg(d, 0.0), dbeta(d, 0.0);
  layerNormBackward(n, d, x.data(), gamma.data(), mean.data(), rstd.data(), r.data(), dx.data(), dg.data(),
                    dbeta.data());
  CHECK(maxGradError(x, dx, f) < 1e-7);
  CHECK(maxGradError(gamma, dg, f) < 1e-7);
  CHECK(maxGradError(beta, dbeta, f) < 1e-7);
}

TEST_CASE("softmax cross-entropy backward matches finite differences", "[training][numerics]") {
  const int n = 4, c = 5;
  auto logits = randomVec(n * c, 11, 2.0);
  std::vector<int> labels{0, 3, 4, 1};
  auto f = [&] { return softmaxCrossEntropy(n, c, logits.data(), labels.data(), 1.0, (double*)nullptr); };
  std::vector<double> dl(n * c);
  softmaxCrossEntropy(n, c, logits.data(), labels.data(), 1.0, dl.data());
  CHECK(maxGradError(logits, dl, f) < 1e-7);
}

TEST_CASE("causal multi-head attention backward matches finite differences", "[training][numerics]") {
  const int batch = 2, seq = 4, heads = 2, dh = 3, d = heads * dh, rows = batch * seq;
  auto q = randomVec(rows * d, 12), k = randomVec(rows * d, 13), v = randomVec(rows * d, 14);
  auto r = randomVec(rows * d, 15);
  std::vector<double> probs(batch * heads * seq * seq);
  auto f = [&] {
    std::vector<double> o(rows * d);
    attentionForward(batch, seq, heads, dh, q.data(), k.data(), v.data(), probs.data(), o.data());
    return dot(o, r);
  };
  f();
  std::vector<double> dq(rows * d), dk(rows * d), dv(rows * d);
  attentionBackward(batch, seq, heads, dh, q.data(), k.data(), v.data(), probs.data(), r.data(), dq.data(),
                    dk.data(), dv.data());
  CHECK(maxGradError(q, dq, f) < 1e-7);
  CHECK(maxGradError(k, dk, f) < 1e-7);
  CHECK(maxGradError(v, dv, f) < 1e-7);
  // Causality: the output at position 0 ignores every later key.
  CHECK(probs[1] == 0.0);
}

TEST_CASE("MoE gate backward (combine weights and balance loss) matches finite differences",
          "[training][numerics]") {
  const int n = 8, experts = 4, topK = 2, groups = 2;
  const double auxScale = 0.3;
  auto logits = randomVec(n * experts, 16, 1.5), c = randomVec(n * experts, 17);
  MoeRouting fixed = moeRoute(n, experts, topK, groups, 1.0, logits.data());
  REQUIRE(fixed.dropped > 0);  // capacity 2 per expert per group: some choices must drop
  // L = Σ_kept p[i,e]·c[i,e] + auxScale·aux, with the routing decisions held fixed
  // (they are piecewise constant; h is far below the gaps between probabilities).
  auto f = [&] {
    MoeRouting r = moeRoute(n, experts, topK, groups, 1.0, logits.data());
    double L = auxScale * r.auxLoss;
    for (const MoeSlot& s : fixed.slots) L += r.probs[s.token * experts + s.expert] * c[s.token * experts + s.expert];
    return L;
  };
  std::vector<double> dprob(n * experts, 0.0), dlogits(n * experts);
  for (const MoeSlot& s : fixed.slots) dprob[s.token * experts + s.expert] = c[s.token * experts + s.expert];
  moeGateBackward(n, fixed, dprob.data(), auxScale, dlogits.data());
  CHECK(maxGradError(logits, dlogits, f) < 1e-7);
}

namespace {

// Checks a float layer: input and parameter gradients of L = Σ r·forward(x).
void checkLayerFloat(Layer& layer, Tensor x, bool inputHasGradient = true) {
  std::vector<std::vector<float>> w, g;
  for (Param* p : layer.params()) {
    w.emplace_back(p->numel);
    g.emplace_back(p->numel, 0.0f);
    p->w = w.back().data();
    p->g = g.back().data();
    initParam(*p, 3, nameKey(p->name));
    if (p->initStd == 0)  // constants would hide bias/scale mistakes
      for (size_t i = 0; i < p->numel; ++i) p->w[i] += float(0.3 * normalAt(4, nameKey(p->name), i));
  }
  Tensor y = layer.forward(x);
  std::vector<float> r(y.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = float(normalAt(5, 0, i));
  Tensor dy(y.shape);
  dy.data = r;
  Tensor dx = layer.backward(dy);
  auto f = [&] {
    Tensor out = layer.forward(x);
    double s = 0;
    for (size_t i = 0; i < r.size(); ++i) s += double(out.data[i]) * r[i];
    return s;
  };
  auto check = [&](float* v, const float* analytic, size_t n, const std::string& what) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      float keep = v[i];
      v[i] = keep + 1e-2f;
      double up = f();
      v[i] = keep - 1e-2f;
      double down = f();
      v[i] = keep;
      double numeric = (up - down) / 2e-2;
      worst = std::max(worst, std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric)));
    }
    INFO(layer.kind() << " " << what);
    CHECK(worst < 2e-2);
  };
  if (inputHasGradient) check(x.ptr(), dx.ptr(), x.size(), "input");
  for (Param* p : layer.params()) check(p->w, p->g, p->numel, p->name);
}

Tensor randomTensor(std::vector<int> shape, uint64_t key) {
  Tensor t(shape);
  for (size_t i = 0; i < t.size(); ++i) t.data[i] = float(normalAt(9, key, i));
  return t;
}

}  // namespace

TEST_CASE("float layers wire their kernels correctly", "[training][numerics]") {
  SECTION("linear") {
    Linear l(4, 3, true, "l");
    checkLayerFloat(l, randomTensor({5, 4}, 1));
  }
  SECTION("layernorm") {
    LayerNorm l(6, "ln");
    checkLayerFloat(l, randomTensor({3, 6}, 2));
  }
  SECTION("attention") {
    Attention a(8, 2, {}, "a");
    checkLayerFloat(a, randomTensor({2, 4, 8}, 3));
  }
  SECTION("mlp") {
    Mlp m(6, 12, {}, "m");
    checkLayerFloat(m, randomTensor({2, 3, 6}, 4));
  }
  SECTION("transformer block") {
    TransformerBlock b(8, 2, 16, {}, "b");
    checkLayerFloat(b, randomTensor({2, 4, 8}, 5));
  }
  SECTION("embedding") {
    Embedding e(6, 4, 5);
    Tensor ids({2, 4});
    for (size_t i = 0; i < ids.size(); ++i) ids.data[i] = float(i % 6);
    checkLayerFloat(e, ids, false);
  }
  SECTION("moe") {
    // Every token takes both experts and capacity holds them all, so no
    // routing decision can flip under the ±1e-2 probe (a flip is a jump, not
    // a gradient); top-k and dropping are checked in double above.
    MoeConfig c;
    c.d = 6, c.hidden = 8, c.experts = 2, c.topK = 2, c.capacityFactor = 1.0, c.auxWeight = 0.0f;  // first choices can flip: aux tested in double
    MoeLayer m(c, {}, "moe");
    checkLayerFloat(m, randomTensor({8, 6}, 6));
  }
}
