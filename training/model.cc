#include "training/model.h"

#include <stdexcept>

#include "training/kernels.h"

namespace plait::training {

std::vector<Param*> Model::params() {
  std::vector<Param*> all;
  for (auto& u : units)
    for (Param* p : u->params()) all.push_back(p);
  return all;
}

std::vector<Param*> Model::unitParams(int unit) { return units[unit]->params(); }

size_t Model::unitNumel(int unit) {
  size_t n = 0;
  for (Param* p : unitParams(unit)) n += p->numel;
  return n;
}

size_t Model::numel() {
  size_t n = 0;
  for (int u = 0; u < numUnits(); ++u) n += unitNumel(u);
  return n;
}

Tensor Model::forwardUnits(int first, int last, const Tensor& x, Hooks* hooks) {
  saved_.resize(units.size());
  checkpoint.resize(units.size(), false);
  Tensor h = x;
  for (int u = first; u < last; ++u) {
    if (hooks) hooks->preForward(u);
    if (compute != Precision::kFp32 && units[u]->kind() != "embedding") roundInPlace(compute, h.ptr(), h.size());
    if (checkpoint[u]) saved_[u] = h;
    h = units[u]->forward(h);
    if (checkpoint[u]) units[u]->dropCache();
    if (hooks) hooks->postForward(u);
  }
  return h;
}

Tensor Model::backwardUnits(int first, int last, const Tensor& dy, Hooks* hooks) {
  Tensor d = dy;
  for (int u = last - 1; u >= first; --u) {
    if (hooks) hooks->preBackward(u);
    if (checkpoint[u]) {
      units[u]->forward(saved_[u]);  // recompute the activations backward needs
      saved_[u] = Tensor();
    }
    roundInPlace(compute, d.ptr(), d.size());
    d = units[u]->backward(d);
    units[u]->dropCache();
    if (hooks) hooks->postBackward(u);
  }
  return d;
}

double lossAndGradient(Model& model, const Tensor& logits, const std::vector<int>& labels, float gradScale,
                       Tensor* dlogits) {
  const int rows = logits.rows();
  if (dlogits) *dlogits = Tensor(logits.shape);
  double ce = softmaxCrossEntropy(rows, logits.cols(), logits.ptr(), labels.data(), gradScale / float(rows),
                                  dlogits ? dlogits->ptr() : nullptr);
  double loss = ce / rows;
  for (auto& u : model.units) loss += u->auxLoss();
  return loss;
}

LossParts Model::forwardBackward(const Batch& batch, float gradScale, Hooks* hooks) {
  for (auto& u : units) u->setGradScale(gradScale);
  Tensor logits = forwardUnits(0, numUnits(), batch.x, hooks);
  Tensor dlogits;
  double loss = lossAndGradient(*this, logits, batch.labels, gradScale, &dlogits);
  backwardUnits(0, numUnits(), dlogits, hooks);
  return {loss, logits.rows()};
}

double Model::evaluate(const Batch& batch) {
  Tensor logits = forwardUnits(0, numUnits(), batch.x, nullptr);
  for (auto& u : units) u->dropCache();
  return lossAndGradient(*this, logits, batch.labels, 1.0f, nullptr);
}

std::unique_ptr<Model> buildModel(const ModelConfig& c, TensorParallel tp, ExpertParallel ep, DataParallelGroup dp) {
  auto m = std::make_unique<Model>();
  auto add = [&](Layer* l) { m->units.emplace_back(l); };
  if (c.kind == "mlp") {
    int width = c.inputs;
    for (int i = 0; i < c.depth; ++i) {
      add(new Linear(width, c.hidden, true, "fc" + std::to_string(i)));
      if (c.batchnorm) add(new BatchNorm(c.hidden, dp, "bn" + std::to_string(i)));
      add(new Gelu());
      width = c.hidden;
    }
    add(new Linear(width, c.classes, true, "head"));
  } else if (c.kind == "transformer") {
    add(new Embedding(c.vocab, c.seq, c.d));
    for (int i = 0; i < c.blocks; ++i)
      add(new TransformerBlock(c.d, c.heads, 4 * c.d, tp, "block" + std::to_string(i)));
    add(new LayerNorm(c.d, "lnf"));
    add(new Linear(c.d, c.vocab, false, "head"));
  } else if (c.kind == "moe") {
    add(new Linear(c.inputs, c.moe.d, true, "in"));
    add(new MoeLayer(c.moe, ep, "moe"));
    add(new LayerNorm(c.moe.d, "lnf"));
    add(new Linear(c.moe.d, c.classes, true, "head"));
  } else {
    throw std::invalid_argument("unknown model kind '" + c.kind + "' (mlp, transformer, moe)");
  }
  m->checkpoint.assign(m->units.size(), false);
  return m;
}

uint64_t nameKey(const std::string& name) {  // FNV-1a: stable across builds
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

void initModel(Model& model, uint64_t seed) {
  for (Param* p : model.params()) initParam(*p, seed, nameKey(p->name));
}

void bindUnit(Model& model, int unit, float* w, float* g) {
  size_t off = 0;
  for (Param* p : model.unitParams(unit)) {
    p->w = w ? w + off : nullptr;
    p->g = g ? g + off : nullptr;
    off += p->numel;
  }
}

FlatStorage::FlatStorage(Model& model) : w_(model.numUnits()), g_(model.numUnits()) {
  for (int u = 0; u < model.numUnits(); ++u) {
    w_[u].assign(model.unitNumel(u), 0.0f);
    g_[u].assign(model.unitNumel(u), 0.0f);
    bindUnit(model, u, w_[u].data(), g_[u].data());
  }
}

void FlatStorage::zeroGrads() {
  for (auto& g : g_) std::fill(g.begin(), g.end(), 0.0f);
}

std::vector<float> FlatStorage::flatWeights() const {
  std::vector<float> all;
  for (auto& w : w_) all.insert(all.end(), w.begin(), w.end());
  return all;
}

std::vector<float> FlatStorage::flatGrads() const {
  std::vector<float> all;
  for (auto& g : g_) all.insert(all.end(), g.begin(), g.end());
  return all;
}

}  // namespace plait::training
