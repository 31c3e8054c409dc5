#include "training/moe_layer.h"

#include <cmath>
#include <stdexcept>

#include "training/collectives.h"
#include "training/kernels.h"

namespace plait::training {

MoeLayer::MoeLayer(const MoeConfig& config, ExpertParallel ep, const std::string& name)
    : gate(name + ".gate", {config.d, config.experts}, 1.0f / std::sqrt(float(config.d))), config_(config), ep_(ep) {
  if (config.experts % ep.size != 0) throw std::invalid_argument("experts must divide by the expert-parallel size");
  if (ep.size > 1 && config.groups != 1) throw std::invalid_argument("expert parallelism routes one group per rank");
  const int local = config.experts / ep.size;
  experts_.resize(local);
  for (int i = 0; i < local; ++i) {
    std::string e = name + ".expert" + std::to_string(ep.rank * local + i);
    experts_[i].W1 = Param(e + ".W1", {config.d, config.hidden}, 1.0f / std::sqrt(float(config.d)));
    experts_[i].b1 = Param(e + ".b1", {config.hidden}, 0);
    experts_[i].W2 = Param(e + ".W2", {config.hidden, config.d}, 1.0f / std::sqrt(float(config.hidden)));
    experts_[i].b2 = Param(e + ".b2", {config.d}, 0);
  }
}

std::vector<Param*> MoeLayer::params() {
  std::vector<Param*> all{&gate};
  for (Param* p : expertParams()) all.push_back(p);
  return all;
}

std::vector<Param*> MoeLayer::expertParams() {
  std::vector<Param*> all;
  for (Expert& e : experts_) all.insert(all.end(), {&e.W1, &e.b1, &e.W2, &e.b2});
  return all;
}

void MoeLayer::dropCache() {
  x_ = logits_ = Tensor();
  routing_ = MoeRouting();
  combined_.clear();
  for (Expert& e : experts_) e.x = e.h = e.a = e.y = Tensor();
}

int MoeLayer::sources() const { return ep_.size > 1 ? ep_.size : config_.groups; }

// Row of a kept choice in this rank's token-side buffer [groups][experts][capacity].
size_t MoeLayer::slotRow(const MoeSlot& s) const {
  return (size_t(s.group) * config_.experts + s.expert) * routing_.capacity + s.slot;
}

std::vector<float> MoeLayer::exchange(const std::vector<float>& buffer) {
  if (ep_.size == 1) return buffer;
  std::vector<float> out(buffer.size());
  size_t perPeer = buffer.size() / ep_.size;
  check(ncclAlltoAll(buffer.data(), out.data(), perPeer, ncclFloat32, ep_.comm, nullptr), "ncclAlltoAll", ep_.comm);
  return out;
}

// The expert-side buffer is [sources][localExperts][capacity][d]; serially
// sources = groups and localExperts = experts, which is the token-side layout.
std::vector<float> MoeLayer::runExperts(const std::vector<float>& in) {
  const int d = config_.d, f = config_.hidden, C = routing_.capacity, S = sources(), L = int(experts_.size());
  std::vector<float> out(in.size(), 0.0f);
  for (int e = 0; e < L; ++e) {
    Expert& ex = experts_[e];
    ex.x = Tensor({S * C, d});
    for (int s = 0; s < S; ++s)
      std::copy_n(&in[(size_t(s) * L + e) * C * d], size_t(C) * d, ex.x.ptr() + size_t(s) * C * d);
    ex.h = Tensor({S * C, f});
    ex.a = Tensor({S * C, f});
    ex.y = Tensor({S * C, d});
    linearForward(S * C, d, f, ex.x.ptr(), ex.W1.w, ex.b1.w, ex.h.ptr());
    geluForward(ex.h.size(), ex.h.ptr(), ex.a.ptr());
    linearForward(S * C, f, d, ex.a.ptr(), ex.W2.w, ex.b2.w, ex.y.ptr());
    for (int s = 0; s < S; ++s)
      std::copy_n(ex.y.ptr() + size_t(s) * C * d, size_t(C) * d, &out[(size_t(s) * L + e) * C * d]);
  }
  return out;
}

std::vector<float> MoeLayer::backExperts(const std::vector<float>& dOut) {
  const int d = config_.d, f = config_.hidden, C = routing_.capacity, S = sources(), L = int(experts_.size());
  std::vector<float> dIn(dOut.size(), 0.0f);
  for (int e = 0; e < L; ++e) {
    Expert& ex = experts_[e];
    Tensor dy({S * C, d}), da({S * C, f}), dh({S * C, f}), dx({S * C, d});
    for (int s = 0; s < S; ++s)
      std::copy_n(&dOut[(size_t(s) * L + e) * C * d], size_t(C) * d, dy.ptr() + size_t(s) * C * d);
    linearBackward(S * C, f, d, ex.a.ptr(), ex.W2.w, dy.ptr(), da.ptr(), ex.W2.g, ex.b2.g);
    geluBackward(ex.h.size(), ex.h.ptr(), da.ptr(), dh.ptr());
    linearBackward(S * C, d, f, ex.x.ptr(), ex.W1.w, dh.ptr(), dx.ptr(), ex.W1.g, ex.b1.g);
    for (int s = 0; s < S; ++s)
      std::copy_n(dx.ptr() + size_t(s) * C * d, size_t(C) * d, &dIn[(size_t(s) * L + e) * C * d]);
  }
  return dIn;
}

Tensor MoeLayer::forward(const Tensor& x) {
  const int n = x.rows(), d = config_.d, E = config_.experts;
  x_ = x;
  logits_ = Tensor({n, E});
  linearForward(n, d, E, x.ptr(), gate.w, (const float*)nullptr, logits_.ptr());
  routing_ = moeRoute(n, E, config_.topK, config_.groups, config_.capacityFactor, logits_.ptr());
  const int C = routing_.capacity;
  std::vector<float> dispatch(size_t(config_.groups) * E * C * d, 0.0f);
  for (const MoeSlot& s : routing_.slots)
    std::copy_n(x.ptr() + size_t(s.token) * d, d, &dispatch[slotRow(s) * d]);
  combined_ = exchange(runExperts(exchange(dispatch)));
  Tensor y = x;
  for (const MoeSlot& s : routing_.slots) {
    float p = float(routing_.probs[size_t(s.token) * E + s.expert]);
    for (int j = 0; j < d; ++j) y.data[size_t(s.token) * d + j] += p * combined_[slotRow(s) * d + j];
  }
  return y;
}

Tensor MoeLayer::backward(const Tensor& dy) {
  const int n = x_.rows(), d = config_.d, E = config_.experts;
  std::vector<double> dprob(size_t(n) * E, 0.0);
  std::vector<float> dOut(combined_.size(), 0.0f);
  for (const MoeSlot& s : routing_.slots) {
    float p = float(routing_.probs[size_t(s.token) * E + s.expert]);
    float dot = 0;
    for (int j = 0; j < d; ++j) {
      dot += dy.data[size_t(s.token) * d + j] * combined_[slotRow(s) * d + j];
      dOut[slotRow(s) * d + j] = p * dy.data[size_t(s.token) * d + j];
    }
    dprob[size_t(s.token) * E + s.expert] = dot;
  }
  std::vector<float> dIn = exchange(backExperts(exchange(dOut)));
  Tensor dx = dy;
  for (const MoeSlot& s : routing_.slots)
    for (int j = 0; j < d; ++j) dx.data[size_t(s.token) * d + j] += dIn[slotRow(s) * d + j];
  Tensor dlogits({n, E}), dxGate(x_.shape);
  moeGateBackward(n, routing_, dprob.data(), double(config_.auxWeight) * gradScale_, dlogits.ptr());
  linearBackward(n, d, E, x_.ptr(), gate.w, dlogits.ptr(), dxGate.ptr(), gate.g, (float*)nullptr);
  addInPlace(dx, dxGate);
  return dx;
}

}  // namespace plait::training
