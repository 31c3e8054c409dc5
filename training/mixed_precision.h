// training/mixed_precision.h — bf16/fp16 compute with fp32 master weights
// and dynamic loss scaling (Micikevicius et al., "Mixed Precision Training",
// ICLR 2018), emulated on the host.
//
// What is low precision, and what is not:
//   * compute: each unit's input activations, the gradients flowing into each
//     unit's backward and the weights a unit sees are rounded to the 16-bit
//     format (stored in floats that hold exactly representable values), so
//     every matmul multiplies 16-bit inputs. Products accumulate in fp32, as
//     tensor cores do; inside a unit (a transformer block) intermediate
//     activations stay fp32.
//   * communication: gradients are all-reduced as ncclBfloat16 / ncclFloat16
//     (ncclSum; the library adds in fp32 and rounds each partial sum), then
//     divided by loss scale × ranks in fp32.
//   * master weights, optimizer state and the update: fp32.
// Loss scaling: the loss gradient is multiplied by S, so small gradients
// survive fp16's narrow exponent range; gradients are unscaled by 1/S before
// the update. A step whose (reduced) gradients hold an inf or NaN is skipped
// and S halves; after growthInterval good steps in a row S doubles. Every rank
// decides with the same flag (all-reduced with ncclMax), so replicas never
// disagree about a skip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace plait::training {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32" | "bf16" | "fp16"; throws std::invalid_argument otherwise.
Precision parsePrecision(const std::string& name);
const char* precisionName(Precision p);
// The element type gradients travel in (ncclFloat32 for kFp32).
ncclDataType_t gradientType(Precision p);

// IEEE round-to-nearest-even conversions. fp16 keeps subnormals and
// overflows to ±inf; NaN stays NaN (quiet) in both.
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToFp16(float f);
float fp16ToFloat(uint16_t h);

// x rounded to p's format and back (identity for kFp32).
float roundTo(Precision p, float x);
void roundInPlace(Precision p, float* x, size_t n);
// True if any of x[0..n) is inf or NaN.
bool hasNonFinite(const float* x, size_t n);

struct LossScaleConfig {
  double initial = 65536;   // S before the first step (kFp32 always uses 1)
  int growthInterval = 100; // good steps in a row before S doubles
  double growth = 2, backoff = 0.5;
};

// Dynamic loss scale. Not thread-safe; one per trainer.
class LossScaler {
 public:
  LossScaler(Precision p, LossScaleConfig c);
  double scale() const { return scale_; }
  // Records a step's outcome and adjusts the scale; returns true if the step
  // should be applied (no overflow).
  bool update(bool overflow);
  int skippedSteps() const { return skipped_; }

 private:
  LossScaleConfig c_;
  double scale_;
  int good_ = 0, skipped_ = 0;
  bool dynamic_;
};

// The 16-bit wire format of a gradient buffer: pack rounds n floats into
// words, unpack turns them back into floats multiplied by `factor`.
void packGradients(Precision p, const float* g, size_t n, uint16_t* words);
void unpackGradients(Precision p, const uint16_t* words, size_t n, float factor, float* g);

// fp32 master copies of weights whose live (compute) copies are rounded.
// Construction copies every range into its master and rounds the range;
// refresh() re-rounds after the optimizer updated the masters.
class MasterWeights {
 public:
  MasterWeights(Precision p, std::vector<std::vector<float>*> compute);
  float* master(size_t i) { return master_[i].data(); }
  void refresh();
  size_t bytes() const;

 private:
  Precision p_;
  std::vector<std::vector<float>*> compute_;
  std::vector<std::vector<float>> master_;
};

}  // namespace plait::training
