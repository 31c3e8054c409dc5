// training/tensor.h — a float tensor with a shape, parameters whose storage
// is bound by whoever owns memory (a flat buffer, a DDP bucket, a ZeRO-3
// gather buffer), and the seeded random numbers everything is built from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace plait::training {

// Row-major float data; rows() is every dimension but the last.
struct Tensor {
  std::vector<int> shape;
  std::vector<float> data;

  Tensor() = default;
  explicit Tensor(std::vector<int> s) : shape(std::move(s)), data(countOf(shape), 0.0f) {}
  static size_t countOf(const std::vector<int>& s) {
    size_t n = 1;
    for (int d : s) n *= size_t(d);
    return n;
  }
  size_t size() const { return data.size(); }
  int cols() const { return shape.empty() ? 1 : shape.back(); }
  int rows() const { return cols() == 0 ? 0 : int(data.size() / size_t(cols())); }
  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
};

// A trainable array. The layer that declares it knows its shape and how to
// initialise it; w and g point into storage someone else owns and may rebind
// (null while not materialised, as under ZeRO-3 between uses).
struct Param {
  std::string name;
  std::vector<int> shape;
  size_t numel = 0;
  float initStd = 0;    // N(0, initStd²) when > 0 ...
  float initValue = 0;  // ... otherwise this constant
  float* w = nullptr;
  float* g = nullptr;

  Param() = default;
  Param(std::string n, std::vector<int> s, float std, float value = 0)
      : name(std::move(n)), shape(std::move(s)), numel(Tensor::countOf(shape)), initStd(std), initValue(value) {}
};

// Counter-based random numbers: value i of stream `key` under `seed`, the
// same on every rank and in every order of asking (so a shard can be made
// without making the whole).
uint64_t mix64(uint64_t x);
// Uniform in [0, 1).
double uniformAt(uint64_t seed, uint64_t key, uint64_t i);
// Standard normal (Box–Muller on two uniforms).
double normalAt(uint64_t seed, uint64_t key, uint64_t i);
// Fills p.w per its init spec; `key` distinguishes parameters.
void initParam(Param& p, uint64_t seed, uint64_t key);

}  // namespace plait::training
