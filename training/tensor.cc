#include "training/tensor.h"

#include <cmath>

namespace plait::training {

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double uniformAt(uint64_t seed, uint64_t key, uint64_t i) {
  uint64_t h = mix64(mix64(mix64(seed) ^ key) ^ i);
  return double(h >> 11) * (1.0 / 9007199254740992.0);
}

double normalAt(uint64_t seed, uint64_t key, uint64_t i) {
  double u1 = uniformAt(seed, key, 2 * i), u2 = uniformAt(seed, key, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

void initParam(Param& p, uint64_t seed, uint64_t key) {
  for (size_t i = 0; i < p.numel; ++i)
    p.w[i] = p.initStd > 0 ? float(p.initStd * normalAt(seed, key, i)) : p.initValue;
}

}  // namespace plait::training
