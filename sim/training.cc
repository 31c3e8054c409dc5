// training.cc — see training.h.
#include "sim/training.h"

#include <algorithm>
#include <cstdio>

namespace plait::sim {

double StepReport::commUs() const {
  double t = 0;
  for (const PhaseReport& p : phases) t += p.totalUs();
  return t;
}

namespace {

// Where each (tp, dp, pp) rank runs.
class Layout {
 public:
  Layout(const TrainingSpec& s, int gpusPerHost) : s_(s), g_(gpusPerHost) {}

  GpuRef at(int t, int d, int p) const {
    const int rank = s_.tpAcrossHosts ? d + s_.dp * (t + s_.tp * p) : t + s_.tp * (d + s_.dp * p);
    const int local = (rank % g_ + p * s_.ppRailShift) % g_;
    return {rank / g_, local};
  }

 private:
  const TrainingSpec& s_;
  int g_;
};

Status validate(const ClusterModel& model, TrainingSpec* s) {
  const topo::Cluster& cluster = model.cluster();
  const int g = cluster.host(0).count(topo::NodeType::kGpu);
  for (int h = 1; h < cluster.hosts(); ++h)
    if (cluster.host(h).count(topo::NodeType::kGpu) != g)
      return invalidArgument("a training layout needs hosts with equal GPU counts");
  const int world = model.nranks();
  if (s->tp < 1 || s->pp < 1 || s->ep < 1 || s->dp < 0) return invalidArgument("tp, pp and ep must be >= 1, dp >= 0");
  if (s->dp == 0) s->dp = world / (s->tp * s->pp);
  if (static_cast<long>(s->tp) * s->pp * s->dp != world)
    return invalidArgument("tp " + std::to_string(s->tp) + " x pp " + std::to_string(s->pp) + " x dp " +
                           std::to_string(s->dp) + " is not the cluster's " + std::to_string(world) + " GPUs");
  if (s->dp % s->ep != 0) return invalidArgument("ep " + std::to_string(s->ep) + " does not divide dp " + std::to_string(s->dp));
  if (s->blocks % s->pp != 0)
    return invalidArgument("blocks " + std::to_string(s->blocks) + " do not split into " + std::to_string(s->pp) + " stages");
  if (s->seq % s->tp != 0) return invalidArgument("seq " + std::to_string(s->seq) + " does not split over tp " + std::to_string(s->tp));
  if (s->experts < 0 || (s->experts > 0 && s->experts % s->ep != 0))
    return invalidArgument("experts " + std::to_string(s->experts) + " do not spread over ep " + std::to_string(s->ep));
  if (s->dModel < 1 || s->seq < 1 || s->microBatch < 1 || s->accumulate < 1 || s->bytesPerValue < 1 || s->topK < 1 ||
      !(s->capacityFactor > 0))
    return invalidArgument("d_model, seq, micro-batch, accumulate, bytes per value, top-k and capacity factor must be positive");
  if (s->ppRailShift != 0 && (s->tp * s->dp) % g != 0)
    return invalidArgument("a rail shift needs whole hosts per pipeline stage (tp x dp a multiple of " + std::to_string(g) + ")");
  return Status::ok();
}

Result<PhaseReport> collectivePhase(const ClusterModel& model, std::string name,
                                    const std::vector<std::vector<GpuRef>>& groups, double bytes, int calls,
                                    const SimOptions& options) {
  PhaseReport p;
  p.name = std::move(name);
  p.what = "all-reduce";
  p.groups = static_cast<int>(groups.size());
  p.groupSize = groups.empty() ? 0 : static_cast<int>(groups[0].size());
  p.bytesPerCall = bytes;
  p.calls = calls;
  std::vector<SimComm> comms;
  for (const auto& g : groups) {
    PLAIT_ASSIGN_OR_RETURN(SimComm c, model.communicator(g));
    comms.push_back(std::move(c));
  }
  PLAIT_ASSIGN_OR_RETURN(p.result, model.simulateConcurrent(comms, CollType::kAllReduce, static_cast<uint64_t>(bytes), options));
  p.timePerCallUs = p.result.timeUs;
  p.plan = p.result.plan;
  return p;
}

PhaseReport transferPhase(const ClusterModel& model, std::string name, std::string what,
                          const std::vector<Transfer>& transfers, int groups, int groupSize, int calls) {
  PhaseReport p;
  p.name = std::move(name);
  p.what = std::move(what);
  p.groups = groups;
  p.groupSize = groupSize;
  p.bytesPerCall = transfers.empty() ? 0 : transfers[0].bytes;
  p.calls = calls;
  p.result = model.simulateTransfers(transfers);
  p.timePerCallUs = p.result.timeUs;
  p.plan = p.result.plan;
  return p;
}

// Per link and link class over the step: bytes (each phase's times its
// calls) and the highest utilisation any phase reached.
void summarise(const ClusterModel& model, int hottest, StepReport* report) {
  const std::vector<SimLink>& links = model.fabric().links();
  report->bytesByClass.assign(kLinkClassCount, 0.0);
  report->peakByClass.assign(kLinkClassCount, 0.0);
  report->linkBytes.assign(links.size(), 0.0);
  CollectiveResult peak;  // per link: the step's bytes, and the highest utilisation of any phase
  peak.linkBusy.assign(links.size(), 0.0);
  peak.linkBytes.assign(links.size(), 0.0);
  for (const PhaseReport& p : report->phases)
    for (size_t l = 0; l < links.size(); ++l) {
      const double bytes = p.result.linkBytes[l] * p.calls;
      const int cls = static_cast<int>(links[l].cls);
      report->linkBytes[l] += bytes;
      report->bytesByClass[cls] += bytes;
      peak.linkBytes[l] += bytes;
      peak.linkBusy[l] = std::max(peak.linkBusy[l], p.result.linkBusy[l]);
      report->peakByClass[cls] = std::max(report->peakByClass[cls], p.result.linkBusy[l]);
    }
  report->linkPeak = peak.linkBusy;
  report->hottest = model.busiest(peak, hottest);
}

}  // namespace

Result<StepReport> simulateStep(const ClusterModel& model, const TrainingSpec& in, int hottest) {
  TrainingSpec s = in;
  PLAIT_RETURN_IF_ERROR(validate(model, &s));
  const Layout at(s, model.cluster().host(0).count(topo::NodeType::kGpu));
  const SimOptions options;
  const double act = static_cast<double>(s.microBatch) * s.seq * s.dModel * s.bytesPerValue;
  const int blocksPerStage = s.blocks / s.pp;
  const double d2 = static_cast<double>(s.dModel) * s.dModel;
  StepReport report;

  if (s.tp > 1) {
    std::vector<std::vector<GpuRef>> groups;
    for (int p = 0; p < s.pp; ++p)
      for (int d = 0; d < s.dp; ++d) {
        auto& g = groups.emplace_back();
        for (int t = 0; t < s.tp; ++t) g.push_back(at.at(t, d, p));
      }
    PLAIT_ASSIGN_OR_RETURN(PhaseReport phase,
                           collectivePhase(model, "TP", groups, act, 4 * blocksPerStage * s.accumulate, options));
    report.phases.push_back(std::move(phase));
  }
  if (s.pp > 1) {
    std::vector<Transfer> transfers;
    for (int p = 0; p + 1 < s.pp; ++p)
      for (int d = 0; d < s.dp; ++d)
        for (int t = 0; t < s.tp; ++t) {
          transfers.push_back({at.at(t, d, p), at.at(t, d, p + 1), act / s.tp});  // activations forward
          transfers.push_back({at.at(t, d, p + 1), at.at(t, d, p), act / s.tp});  // gradients backward
        }
    report.phases.push_back(transferPhase(model, "PP", "send/recv", transfers, (s.pp - 1) * s.dp * s.tp, 2, s.accumulate));
  }
  if (s.experts > 0 && s.ep > 1) {
    const double perRank = static_cast<double>(s.microBatch) * (s.seq / s.tp) * s.dModel * s.bytesPerValue * s.topK *
                           s.capacityFactor;
    std::vector<Transfer> transfers;
    int groups = 0;
    for (int p = 0; p < s.pp; ++p)
      for (int t = 0; t < s.tp; ++t)
        for (int j = 0; j < s.dp / s.ep; ++j, ++groups)
          for (int a = 0; a < s.ep; ++a)
            for (int b = 0; b < s.ep; ++b)
              if (a != b) transfers.push_back({at.at(t, j * s.ep + a, p), at.at(t, j * s.ep + b, p), perRank / s.ep});
    report.phases.push_back(
        transferPhase(model, "EP", "all-to-all", transfers, groups, s.ep, 4 * blocksPerStage * s.accumulate));
  }
  if (s.dp > 1) {
    std::vector<std::vector<GpuRef>> groups;
    for (int p = 0; p < s.pp; ++p)
      for (int t = 0; t < s.tp; ++t) {
        auto& g = groups.emplace_back();
        for (int d = 0; d < s.dp; ++d) g.push_back(at.at(t, d, p));
      }
    const double dense = (s.experts > 0 ? 4 : 12) * d2 * blocksPerStage / s.tp * s.bytesPerValue;
    PLAIT_ASSIGN_OR_RETURN(PhaseReport phase, collectivePhase(model, "DP", groups, dense, 1, options));
    report.phases.push_back(std::move(phase));
  }
  if (s.experts > 0 && s.dp / s.ep > 1) {
    std::vector<std::vector<GpuRef>> groups;
    for (int p = 0; p < s.pp; ++p)
      for (int t = 0; t < s.tp; ++t)
        for (int a = 0; a < s.ep; ++a) {
          auto& g = groups.emplace_back();
          for (int j = 0; j < s.dp / s.ep; ++j) g.push_back(at.at(t, j * s.ep + a, p));
        }
    const double expertParams = static_cast<double>(s.experts / s.ep) * 8 * d2 * blocksPerStage / s.tp * s.bytesPerValue;
    PLAIT_ASSIGN_OR_RETURN(PhaseReport phase, collectivePhase(model, "EDP", groups, expertParams, 1, options));
    report.phases.push_back(std::move(phase));
  }

  summarise(model, hottest, &report);
  return report;
}

std::string describeStep(const ClusterModel& model, const TrainingSpec& spec, const StepReport& r) {
  std::string out;
  char line[256];
  snprintf(line, sizeof line,
           "# training step: tp %d pp %d dp %d ep %d, d_model %d, %d blocks, seq %d, %d x %d-sequence micro-batches%s%s\n",
           spec.tp, spec.pp, spec.dp, spec.ep, spec.dModel, spec.blocks, spec.seq, spec.accumulate, spec.microBatch,
           spec.experts > 0 ? (", " + std::to_string(spec.experts) + " experts top-" + std::to_string(spec.topK)).c_str() : "",
           spec.tpAcrossHosts ? ", TP across hosts" : (spec.ppRailShift != 0 ? ", pipeline off-rail" : ""));
  out += line;
  out += "# phase  kind          groups  size  bytes/call   calls   us/call    total ms  plan\n";
  for (const PhaseReport& p : r.phases) {
    snprintf(line, sizeof line, "  %-5s  %-11s %7d %5d  %10.3g  %6d  %8.1f  %10.2f  %s\n", p.name.c_str(), p.what.c_str(),
             p.groups, p.groupSize, p.bytesPerCall, p.calls, p.timePerCallUs, p.totalUs() / 1e3, p.plan.c_str());
    out += line;
  }
  snprintf(line, sizeof line, "# communication per step: %.2f ms (phases in sequence, no overlap with compute)\n",
           r.commUs() / 1e3);
  out += line;
  out += "# link class     bytes/step    peak busy\n";
  for (int c = 0; c < kLinkClassCount; ++c) {
    if (r.bytesByClass[c] <= 0) continue;
    snprintf(line, sizeof line, "  %-12s  %12.4g  %8.1f%%\n", linkClassName(static_cast<LinkClass>(c)), r.bytesByClass[c],
             100 * r.peakByClass[c]);
    out += line;
  }
  out += "# hottest links (peak busy, bytes/step):\n";
  for (const LinkLoad& l : r.hottest) {
    snprintf(line, sizeof line, "  %-44s %6.1f%%  %.3g\n", model.fabric().linkName(l.link).c_str(), 100 * l.utilisation,
             l.bytes);
    out += line;
  }
  return out;
}

}  // namespace plait::sim
