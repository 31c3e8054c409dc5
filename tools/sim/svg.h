// svg.h — plait-sim's pictures, as standalone SVG files: the bus bandwidth
// of a sweep against message size, and a heat map of the fabric (bytes each
// host's NICs and each leaf's spine uplinks carry in a training step).
#pragma once

#include <string>
#include <vector>

#include "sim/collective.h"

namespace plait::sim {

struct SweepPoint {
  double bytes = 0;
  double busBw = 0;  // GB/s
  std::string plan;  // "ring Simple", shown where it changes
};

// busbw (GB/s, linear) against size (log2), with the published figures to
// compare as separate marks (empty: none).
std::string sweepSvg(const std::string& title, const std::vector<SweepPoint>& points,
                     const std::vector<SweepPoint>& reference);

struct HeatPanel {
  std::string label;            // "DP all-reduce"
  std::vector<double> perLink;  // a value per fabric link: a utilisation in [0, 1], or bytes
};

// Panels side by side (one per phase of a training step), each with a
// column per rail. Rows: hosts (their NIC on that rail, up and down), then
// one row per leaf group (its spine uplink and downlink on that rail); a
// cell shows the larger of its two links' values, coloured against `scale`
// (0: the largest cell). Beyond `maxHosts` hosts, each row is a leaf
// group's hosts.
std::string fabricHeatmapSvg(const std::string& title, const ClusterModel& model, const std::vector<HeatPanel>& panels,
                             const std::string& legend, double scale, int maxHosts = 64);

}  // namespace plait::sim
