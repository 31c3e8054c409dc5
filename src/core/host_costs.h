// host_costs.h — the host cost model's numbers measured on a machine instead
// of assumed: a calibration file the tuner loads, and the fit that makes one.
//
// The host tuner prices a plan with five numbers (core/cost_model.h
// HostCosts): a call's fixed cost, one FIFO hand-off between ranks, the bus
// bandwidth of a ring pass per channel, and a one-shot AllReduce's fixed
// cost and rate. kHostCosts are estimates for this project's machine class; the
// crossovers they imply (one-shot against ring, how many channels) are only
// right where the machine is like it. `plait-calibrate` measures the five on
// the machine at hand and writes them as a file; PLAIT_HOST_COSTS=<file>
// makes every communicator plan with them (plait-sim --host-costs too).
//
// The file is text, one `key value` per line, `#` starts a comment:
//   call_us 0.05
//   hop_us 0.25
//   ring_bytes_per_us 12000
//   one_shot_us 0.3
//   one_shot_bytes_per_us 8000
// Keys left out keep kHostCosts' value. Pure functions except
// loadHostCosts (reads a file); all thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/cost_model.h"
#include "plait/status.hpp"

namespace plait {

// The environment variable that names a calibration file.
inline constexpr const char* kHostCostsVariable = "PLAIT_HOST_COSTS";

// Parses a calibration's text. `source` names it in errors ("host_costs.txt"),
// which say the line and what is wrong: an unknown or repeated key, a value
// that is not a finite number, out of range (call_us and one_shot_us in
// [0, 1e6], hop_us in (0, 1e6], the rates in (0, 1e9] bytes per µs), or
// extra words.
Result<HostCosts> parseHostCosts(std::string_view text, const std::string& source);

// InvalidArgument naming `source` and the first value out of the ranges
// parseHostCosts accepts (NaN included); OK otherwise.
Status checkHostCosts(const HostCosts& costs, const std::string& source);

// The text parseHostCosts reads back to the same values (17 significant
// digits), after `comment` lines (each prefixed with "# ").
std::string formatHostCosts(const HostCosts& costs, const std::vector<std::string>& comment = {});

// Reads and parses the file at `path` (at most 64 KiB). Errors name the path.
Result<HostCosts> loadHostCosts(const std::string& path);

// kHostCosts, or the file PLAIT_HOST_COSTS names. `*fromFile` (may be null)
// says which. Errors name the variable and the file.
Result<HostCosts> hostCostsFromEnvironment(std::string* fromFile = nullptr);

// One measured point: the slowest rank's mean time per call of `algo` on
// `bytes` (the AllReduce's buffer; an AllGather's whole gathered buffer).
struct CostSample {
  enum Kind { kRingAllReduce, kOneShotAllReduce, kRingAllGather } kind = kRingAllReduce;
  double bytes = 0;
  double us = 0;
};

// Least-squares fit of HostCosts to samples taken with one channel on
// `nranks` ranks. Each kind's times are fitted as a + b * bytes weighted by
// 1/time^2 (relative error, so small sizes set a and large ones b). The ring
// intercepts give call and hop (ring AllGather: call + (n-1) hop; ring
// AllReduce: call + 2(n-1) hop), the one-shot's is its fixed cost; the
// slopes give the two rates. Needs nranks >= 2 and samples of each kind at
// two sizes or more. A fitted value out of the ranges parseHostCosts accepts
// is clamped into them (and named in *notes, if given). InvalidArgument
// when the samples cannot determine the costs.
Result<HostCosts> fitHostCosts(const std::vector<CostSample>& samples, int nranks,
                               std::vector<std::string>* notes = nullptr);

}  // namespace plait
