#include "training/mixed_precision.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace plait::training {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

Precision parsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw std::invalid_argument("unknown precision '" + name + "' (fp32, bf16, fp16)");
}

const char* precisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : p == Precision::kFp16 ? "fp16" : "fp32";
}

ncclDataType_t gradientType(Precision p) {
  return p == Precision::kBf16 ? ncclBfloat16 : p == Precision::kFp16 ? ncclFloat16 : ncclFloat32;
}

uint16_t floatToBf16(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even on the dropped 16 bits
  return uint16_t(u >> 16);
}

float bf16ToFloat(uint16_t h) { return floatOf(uint32_t(h) << 16); }

uint16_t floatToFp16(float f) {
  const uint32_t u = bitsOf(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // ≥ 65520 rounds to inf
  if (a < 0x38800000u) {
    // Below 2⁻¹⁴: a multiple of the subnormal step 2⁻²⁴. Scaling by 2²⁴ is
    // exact and nearbyint rounds half to even; 1024 is the smallest normal's
    // encoding, so rounding up into the normals needs no special case.
    return uint16_t(sign | uint32_t(std::nearbyint(std::fabs(f) * 16777216.0f)));
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13);  // rebias 127 → 15
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return uint16_t(sign | h);
}

float fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = std::ldexp(float(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return floatOf(sign | 0x7f800000u | (m << 13));
  return floatOf(sign | ((e + 112u) << 23) | (m << 13));
}

float roundTo(Precision p, float x) {
  if (p == Precision::kBf16) return bf16ToFloat(floatToBf16(x));
  if (p == Precision::kFp16) return fp16ToFloat(floatToFp16(x));
  return x;
}

void roundInPlace(Precision p, float* x, size_t n) {
  if (p == Precision::kFp32) return;
  for (size_t i = 0; i < n; ++i) x[i] = roundTo(p, x[i]);
}

bool hasNonFinite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

LossScaler::LossScaler(Precision p, LossScaleConfig c)
    : c_(c), scale_(p == Precision::kFp32 ? 1.0 : c.initial), dynamic_(p != Precision::kFp32) {}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    ++skipped_;
    good_ = 0;
    if (dynamic_) scale_ *= c_.backoff;
    return false;
  }
  if (dynamic_ && ++good_ >= c_.growthInterval) {
    scale_ *= c_.growth;
    good_ = 0;
  }
  return true;
}

void packGradients(Precision p, const float* g, size_t n, uint16_t* words) {
  for (size_t i = 0; i < n; ++i) words[i] = p == Precision::kBf16 ? floatToBf16(g[i]) : floatToFp16(g[i]);
}

void unpackGradients(Precision p, const uint16_t* words, size_t n, float factor, float* g) {
  for (size_t i = 0; i < n; ++i)
    g[i] = (p == Precision::kBf16 ? bf16ToFloat(words[i]) : fp16ToFloat(words[i])) * factor;
}

MasterWeights::MasterWeights(Precision p, std::vector<std::vector<float>*> compute)
    : p_(p), compute_(std::move(compute)) {
  for (auto* c : compute_) master_.push_back(*c);
  refresh();
}

void MasterWeights::refresh() {
  for (size_t i = 0; i < compute_.size(); ++i) {
    std::vector<float>& c = *compute_[i];
    for (size_t j = 0; j < c.size(); ++j) c[j] = roundTo(p_, master_[i][j]);
  }
}

size_t MasterWeights::bytes() const {
  size_t n = 0;
  for (auto& m : master_) n += m.size() * sizeof(float);
  return n;
}

}  // namespace plait::training
