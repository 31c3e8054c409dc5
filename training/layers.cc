#include "training/layers.h"

#include <cmath>
#include <stdexcept>

#include "training/collectives.h"
#include "training/kernels.h"

namespace plait::training {
namespace {

// Output shape: the input's with the last dimension replaced.
std::vector<int> withCols(const std::vector<int>& shape, int cols) {
  std::vector<int> s = shape;
  s.back() = cols;
  return s;
}

// Megatron's g forward / f backward: sum the partial results of the group.
void sumOverGroup(const TensorParallel& tp, Tensor& t) {
  if (tp.size > 1) allReduce(tp.comm, t.ptr(), t.size(), ncclSum);
}

void checkDivides(int whole, int parts, const char* what) {
  if (parts < 1 || whole % parts != 0)
    throw std::invalid_argument(std::string(what) + " must divide by the tensor-parallel size");
}

}  // namespace

void addInPlace(Tensor& y, const Tensor& a) {
  for (size_t i = 0; i < y.size(); ++i) y.data[i] += a.data[i];
}

// ---- Linear ----
Linear::Linear(int in, int out, bool bias, const std::string& name)
    : W(name + ".W", {in, out}, 1.0f / std::sqrt(float(in))), b(name + ".b", {out}, 0), in_(in), out_(out),
      bias_(bias) {}

std::vector<Param*> Linear::params() {
  if (bias_) return {&W, &b};
  return {&W};
}

Tensor Linear::forward(const Tensor& x) {
  x_ = x;
  Tensor y(withCols(x.shape, out_));
  linearForward(x.rows(), in_, out_, x.ptr(), W.w, bias_ ? b.w : nullptr, y.ptr());
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  Tensor dx(x_.shape);
  linearBackward(x_.rows(), in_, out_, x_.ptr(), W.w, dy.ptr(), dx.ptr(), W.g, bias_ ? b.g : nullptr);
  return dx;
}

// ---- GELU ----
Tensor Gelu::forward(const Tensor& x) {
  x_ = x;
  Tensor y(x.shape);
  geluForward(x.size(), x.ptr(), y.ptr());
  return y;
}

Tensor Gelu::backward(const Tensor& dy) {
  Tensor dx(x_.shape);
  geluBackward(x_.size(), x_.ptr(), dy.ptr(), dx.ptr());
  return dx;
}

// ---- LayerNorm ----
LayerNorm::LayerNorm(int d, const std::string& name)
    : gamma(name + ".gamma", {d}, 0, 1.0f), beta(name + ".beta", {d}, 0, 0.0f), d_(d) {}

Tensor LayerNorm::forward(const Tensor& x) {
  x_ = x;
  mean_.resize(x.rows());
  rstd_.resize(x.rows());
  Tensor y(x.shape);
  layerNormForward(x.rows(), d_, x.ptr(), gamma.w, beta.w, 1e-5f, y.ptr(), mean_.data(), rstd_.data());
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy) {
  Tensor dx(x_.shape);
  layerNormBackward(x_.rows(), d_, x_.ptr(), gamma.w, mean_.data(), rstd_.data(), dy.ptr(), dx.ptr(), gamma.g,
                    beta.g);
  return dx;
}

// ---- Embedding ----
Embedding::Embedding(int vocab, int seq, int d)
    : tok("embed.tok", {vocab, d}, 0.5f), pos("embed.pos", {seq, d}, 0.1f), vocab_(vocab), seq_(seq), d_(d) {}

Tensor Embedding::forward(const Tensor& ids) {
  ids_ = ids;
  const int batch = ids.rows(), seq = ids.cols();
  Tensor y({batch, seq, d_});
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < seq; ++t) {
      int id = int(ids.data[size_t(b) * seq + t]);
      float* row = y.ptr() + (size_t(b) * seq + t) * d_;
      for (int j = 0; j < d_; ++j) row[j] = tok.w[size_t(id) * d_ + j] + pos.w[size_t(t) * d_ + j];
    }
  return y;
}

Tensor Embedding::backward(const Tensor& dy) {
  const int batch = ids_.rows(), seq = ids_.cols();
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < seq; ++t) {
      int id = int(ids_.data[size_t(b) * seq + t]);
      const float* row = dy.ptr() + (size_t(b) * seq + t) * d_;
      for (int j = 0; j < d_; ++j) {
        tok.g[size_t(id) * d_ + j] += row[j];
        pos.g[size_t(t) * d_ + j] += row[j];
      }
    }
  return Tensor();  // token ids have no gradient
}

// ---- Attention ----
Attention::Attention(int d, int heads, TensorParallel tp, const std::string& name)
    : Wq(name + ".Wq", {d, d / tp.size}, 1.0f / std::sqrt(float(d))),
      Wk(name + ".Wk", {d, d / tp.size}, 1.0f / std::sqrt(float(d))),
      Wv(name + ".Wv", {d, d / tp.size}, 1.0f / std::sqrt(float(d))),
      Wo(name + ".Wo", {d / tp.size, d}, 1.0f / std::sqrt(float(d))),
      bo(name + ".bo", {d}, 0),
      d_(d), heads_(heads), dh_(d / heads), tp_(tp) {
  checkDivides(heads, tp.size, "attention heads");
}

void Attention::dropCache() {
  x_ = q_ = k_ = v_ = o_ = Tensor();
  probs_.clear();
}

Tensor Attention::forward(const Tensor& x) {
  const int batch = x.shape[0], seq = x.shape[1], n = x.rows();
  const int heads = heads_ / tp_.size, local = heads * dh_;
  x_ = x;  // f: identity forward
  q_ = Tensor(withCols(x.shape, local));
  k_ = Tensor(q_.shape);
  v_ = Tensor(q_.shape);
  o_ = Tensor(q_.shape);
  linearForward(n, d_, local, x.ptr(), Wq.w, (const float*)nullptr, q_.ptr());
  linearForward(n, d_, local, x.ptr(), Wk.w, (const float*)nullptr, k_.ptr());
  linearForward(n, d_, local, x.ptr(), Wv.w, (const float*)nullptr, v_.ptr());
  probs_.assign(size_t(batch) * heads * seq * seq, 0.0f);
  attentionForward(batch, seq, heads, dh_, q_.ptr(), k_.ptr(), v_.ptr(), probs_.data(), o_.ptr());
  Tensor y(x.shape);
  linearForward(n, local, d_, o_.ptr(), Wo.w, (const float*)nullptr, y.ptr());
  sumOverGroup(tp_, y);  // g
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d_; ++j) y.data[size_t(i) * d_ + j] += bo.w[j];
  return y;
}

Tensor Attention::backward(const Tensor& dy) {
  const int batch = x_.shape[0], seq = x_.shape[1], n = x_.rows();
  const int heads = heads_ / tp_.size, local = heads * dh_;
  Tensor dout(o_.shape), dq(o_.shape), dk(o_.shape), dv(o_.shape), dx(x_.shape), part(x_.shape);
  linearBackward(n, local, d_, o_.ptr(), Wo.w, dy.ptr(), dout.ptr(), Wo.g, bo.g);
  attentionBackward(batch, seq, heads, dh_, q_.ptr(), k_.ptr(), v_.ptr(), probs_.data(), dout.ptr(), dq.ptr(),
                    dk.ptr(), dv.ptr());
  linearBackward(n, d_, local, x_.ptr(), Wq.w, dq.ptr(), dx.ptr(), Wq.g, (float*)nullptr);
  linearBackward(n, d_, local, x_.ptr(), Wk.w, dk.ptr(), part.ptr(), Wk.g, (float*)nullptr);
  addInPlace(dx, part);
  linearBackward(n, d_, local, x_.ptr(), Wv.w, dv.ptr(), part.ptr(), Wv.g, (float*)nullptr);
  addInPlace(dx, part);
  sumOverGroup(tp_, dx);  // f backward
  return dx;
}

// ---- MLP ----
Mlp::Mlp(int d, int hidden, TensorParallel tp, const std::string& name)
    : W1(name + ".W1", {d, hidden / tp.size}, 1.0f / std::sqrt(float(d))),
      b1(name + ".b1", {hidden / tp.size}, 0),
      W2(name + ".W2", {hidden / tp.size, d}, 1.0f / std::sqrt(float(hidden))),
      b2(name + ".b2", {d}, 0),
      d_(d), hidden_(hidden), tp_(tp) {
  checkDivides(hidden, tp.size, "MLP hidden size");
}

Tensor Mlp::forward(const Tensor& x) {
  const int n = x.rows(), local = hidden_ / tp_.size;
  x_ = x;  // f
  h_ = Tensor(withCols(x.shape, local));
  a_ = Tensor(h_.shape);
  linearForward(n, d_, local, x.ptr(), W1.w, b1.w, h_.ptr());
  geluForward(h_.size(), h_.ptr(), a_.ptr());
  Tensor y(x.shape);
  linearForward(n, local, d_, a_.ptr(), W2.w, (const float*)nullptr, y.ptr());
  sumOverGroup(tp_, y);  // g
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d_; ++j) y.data[size_t(i) * d_ + j] += b2.w[j];
  return y;
}

Tensor Mlp::backward(const Tensor& dy) {
  const int n = x_.rows(), local = hidden_ / tp_.size;
  Tensor da(a_.shape), dh(h_.shape), dx(x_.shape);
  linearBackward(n, local, d_, a_.ptr(), W2.w, dy.ptr(), da.ptr(), W2.g, b2.g);
  geluBackward(h_.size(), h_.ptr(), da.ptr(), dh.ptr());
  linearBackward(n, d_, local, x_.ptr(), W1.w, dh.ptr(), dx.ptr(), W1.g, b1.g);
  sumOverGroup(tp_, dx);  // f backward
  return dx;
}

// ---- Transformer block ----
TransformerBlock::TransformerBlock(int d, int heads, int hidden, TensorParallel tp, const std::string& name)
    : ln1_(d, name + ".ln1"), ln2_(d, name + ".ln2"), attn_(d, heads, tp, name + ".attn"),
      mlp_(d, hidden, tp, name + ".mlp") {}

std::vector<Param*> TransformerBlock::params() {
  std::vector<Param*> all;
  for (Layer* l : std::initializer_list<Layer*>{&ln1_, &attn_, &ln2_, &mlp_})
    for (Param* p : l->params()) all.push_back(p);
  return all;
}

Tensor TransformerBlock::forward(const Tensor& x) {
  Tensor h = attn_.forward(ln1_.forward(x));
  addInPlace(h, x);
  Tensor y = mlp_.forward(ln2_.forward(h));
  addInPlace(y, h);
  return y;
}

Tensor TransformerBlock::backward(const Tensor& dy) {
  Tensor dh = ln2_.backward(mlp_.backward(dy));
  addInPlace(dh, dy);
  Tensor dx = ln1_.backward(attn_.backward(dh));
  addInPlace(dx, dh);
  return dx;
}

void TransformerBlock::dropCache() {
  ln1_.dropCache();
  ln2_.dropCache();
  attn_.dropCache();
  mlp_.dropCache();
}

}  // namespace plait::training
