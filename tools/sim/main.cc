// plait-sim — what a collective would take on a cluster Plait cannot run on:
// Plait's own graph search and tuner on described machines, a flow-level
// simulation of the fabric between them (sim/).
//
//   plait-sim --topo-file dgx_a100.xml                      one host, AllReduce 8 B .. 1 GiB
//   plait-sim --topo-file hgx_h100.xml --nodes 128 -b 1M -e 8G
//   plait-sim --topo-file cluster.xml --op all_gather --proto simple --json
//   plait-sim --topo-file hgx_h100.xml --nodes 64 --train --tp 8 --pp 4 --experts 16 --ep 8
//   plait-sim --host-ranks 2 --cores 2                       CPU ranks on a host like this one
//   plait-sim --host-ranks 2 --host-costs costs.txt          ... priced by plait-calibrate's measurements
//
// The table is nccl-tests' (out-of-place columns; the in-place ones and
// #wrong read N/A), each row followed by the plan: protocol, channels,
// latency share. Plait's CUDA executor runs rings with the Simple protocol:
// `--algo ring --proto simple` predicts Plait; the default lets the model
// pick as NCCL's tuner would. Exit status: 0, 1 on a model error, 2 on bad flags.
#include <strings.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/host_costs.h"
#include "perf_table.h"
#include "sim/collective.h"
#include "sim/host.h"
#include "sim/training.h"
#include "svg.h"

namespace {

using namespace plait;
using namespace plait::sim;

struct Flags {
  std::string topoFile, networkFile, op = "all_reduce", proto = "all", algo = "all", minSize = "8", maxSize = "1G";
  int nodes = 0;
  int gpusPerHost = 0;  // --gpus: the communicator holds the first N GPUs of each host (0: all)
  int factor = 2;
  int busiest = 5;
  bool json = false;
  bool singleSwitch = false;
  bool noPxn = false;
  int spines = 0;
  int hostsPerLeaf = 0;
  double oversubscription = 0, nicGbps = 0, switchLatencyUs = -1;
  bool train = false;
  TrainingSpec training;
  HostRunSpec host;                    // --host-ranks: CPU ranks instead of GPUs
  std::string hostCosts;               // --host-costs: a calibration file (core/host_costs.h)
  std::string svg;                     // picture to write
  std::vector<std::string> reference;  // SIZE=GBPS published points for the sweep picture
};

Status writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out ? Status::ok() : systemError("cannot write " + path);
}

Result<uint64_t> parseSize(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return invalidArgument("size \"" + text + "\" is not a number");
  }
  std::string unit = text.substr(used);
  double mult = 1;
  if (unit == "K" || unit == "k") mult = 1024.0;
  else if (unit == "M" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return invalidArgument("size \"" + text + "\": unknown unit \"" + unit + "\" (K, M, G)");
  if (!(v >= 0) || v * mult > 1e15) return invalidArgument("size \"" + text + "\" is out of range");
  return static_cast<uint64_t>(v * mult);
}

Result<CollType> parseOp(const std::string& op) {
  if (op == "all_reduce") return CollType::kAllReduce;
  if (op == "all_gather") return CollType::kAllGather;
  if (op == "reduce_scatter") return CollType::kReduceScatter;
  if (op == "broadcast") return CollType::kBroadcast;
  if (op == "reduce") return CollType::kReduce;
  if (op == "alltoall") return CollType::kAlltoAll;
  return invalidArgument("--op " + op + ": expected all_reduce, all_gather, reduce_scatter, broadcast, reduce or alltoall");
}

// "all" or a comma-separated list of `names` (any case) into bits: bit i for
// names[i]. `flag` names the option in the error.
Result<uint8_t> parseNameList(const std::string& text, const char* flag, const std::vector<std::string>& names) {
  if (text == "all") return static_cast<uint8_t>((1u << names.size()) - 1);
  uint8_t bits = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    size_t i = 0;
    while (i < names.size() && strcasecmp(names[i].c_str(), name.c_str()) != 0) ++i;
    if (i == names.size()) {
      std::string known;
      for (const std::string& n : names) known += n + ", ";
      return invalidArgument(std::string(flag) + ": unknown name \"" + name + "\" (" + known + "all)");
    }
    bits |= static_cast<uint8_t>(1u << i);
    start = comma + 1;
  }
  return bits;
}

// The network: the cluster file's <network> element, then the flags.
Result<NetworkSpec> networkFrom(const Flags& f) {
  NetworkSpec spec;
  for (const std::string& file : {f.topoFile, f.networkFile}) {
    if (file.empty()) continue;
    PLAIT_ASSIGN_OR_RETURN(topo::XmlNode root, topo::readXmlFile(file));
    const topo::XmlNode* net = root.name == "network" ? &root : root.child("network");
    if (net != nullptr) {
      PLAIT_ASSIGN_OR_RETURN(spec, parseNetworkSpec(*net));
    }
  }
  if (f.singleSwitch) spec.kind = NetworkSpec::Kind::kSingleSwitch;
  if (f.noPxn) spec.pxn = false;
  if (f.spines > 0) spec.spines = f.spines;
  if (f.hostsPerLeaf > 0) spec.hostsPerLeaf = f.hostsPerLeaf;
  if (f.oversubscription > 0) spec.oversubscription = f.oversubscription;
  if (f.nicGbps > 0) spec.nicGBs = f.nicGbps / 8.0;
  if (f.switchLatencyUs >= 0) spec.switchLatencyUs = f.switchLatencyUs;
  return spec;
}

std::vector<double> bytesByClass(const ClusterModel& model, const CollectiveResult& r) {
  std::vector<double> out(kLinkClassCount, 0.0);
  for (size_t l = 0; l < r.linkBytes.size(); ++l) out[static_cast<int>(model.fabric().links()[l].cls)] += r.linkBytes[l];
  return out;
}

const char* redopName(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kReduceScatter || c == CollType::kReduce ? "sum" : "none";
}

Status runTraining(const ClusterModel& model, const Flags& f) {
  TrainingSpec spec = f.training;
  PLAIT_ASSIGN_OR_RETURN(StepReport step, simulateStep(model, spec, f.busiest));
  if (spec.dp == 0) spec.dp = model.nranks() / (spec.tp * spec.pp);
  if (!f.svg.empty()) {
    char title[160];
    snprintf(title, sizeof title, "NIC and spine utilisation per phase of one step: tp %d pp %d dp %d ep %d, %d hosts",
             spec.tp, spec.pp, spec.dp, spec.ep, model.cluster().hosts());
    std::vector<HeatPanel> panels;
    for (const PhaseReport& p : step.phases) panels.push_back({p.name + " " + p.what, p.result.linkBusy});
    PLAIT_RETURN_IF_ERROR(writeFile(f.svg, fabricHeatmapSvg(title, model, panels, "share of the link in use", 1.0)));
  }
  if (!f.json) {
    std::printf("%s", describeStep(model, spec, step).c_str());
    return Status::ok();
  }
  nlohmann::json phases = nlohmann::json::array();
  for (const PhaseReport& p : step.phases)
    phases.push_back({{"phase", p.name}, {"kind", p.what}, {"groups", p.groups}, {"group_size", p.groupSize},
                      {"bytes_per_call", p.bytesPerCall}, {"calls", p.calls}, {"us_per_call", p.timePerCallUs},
                      {"plan", p.plan}});
  nlohmann::json classes = nlohmann::json::object();
  for (int c = 0; c < kLinkClassCount; ++c)
    if (step.bytesByClass[c] > 0)
      classes[linkClassName(static_cast<LinkClass>(c))] = {{"bytes", step.bytesByClass[c]}, {"peak_busy", step.peakByClass[c]}};
  nlohmann::json links = nlohmann::json::array();
  for (const LinkLoad& l : step.hottest)
    links.push_back({{"link", model.fabric().linkName(l.link)}, {"peak_busy", l.utilisation}, {"bytes", l.bytes}});
  nlohmann::json out = {{"program", "plait-sim"}, {"training_step", phases}, {"comm_us", step.commUs()},
                        {"link_classes", classes}, {"hottest_links", links}};
  std::printf("%s\n", out.dump(2).c_str());
  return Status::ok();
}

// One row of nccl-tests' table (out-of-place columns), then the plan.
void printRow(CollType coll, int n, uint64_t bytes, const CollectiveResult& r, int latencyDecimals) {
  perf::TableRow row;
  row.bytes = bytes;
  row.count = bytes / 4;
  row.type = "float";
  row.redop = redopName(coll);
  row.root = coll == CollType::kBroadcast || coll == CollType::kReduce ? 0 : -1;
  row.outOfPlace = perf::makeMeasurement(bytes, r.timeUs, ringBytesPerLink(coll, n), -1);
  std::printf("%s    # %s lat %.*f us\n", perf::formatRow(row).c_str(), r.plan.c_str(), latencyDecimals, r.latencyUs);
}

// --reference SIZE=GBPS points for the sweep picture.
Result<std::vector<SweepPoint>> parseReferences(const std::vector<std::string>& items) {
  std::vector<SweepPoint> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return invalidArgument("--reference " + item + ": expected SIZE=GBPS");
    PLAIT_ASSIGN_OR_RETURN(uint64_t bytes, parseSize(item.substr(0, eq)));
    double gbps = 0;
    try {
      gbps = std::stod(item.substr(eq + 1));
    } catch (...) {
      return invalidArgument("--reference " + item + ": bad bandwidth");
    }
    out.push_back({static_cast<double>(bytes), gbps, item.substr(eq + 1) + " GB/s"});
  }
  return out;
}

// After the table: where the largest size's bytes went.
void printLinkSummary(const ClusterModel& model, const CollectiveResult& last, int busiest) {
  std::printf("# largest size: bytes by link class:");
  const std::vector<double> byClass = bytesByClass(model, last);
  for (int c = 0; c < kLinkClassCount; ++c)
    if (byClass[c] > 0) std::printf(" %s %.3g", linkClassName(static_cast<LinkClass>(c)), byClass[c]);
  std::printf("\n# busiest links:\n");
  for (const LinkLoad& l : model.busiest(last, busiest))
    std::printf("#   %-40s %5.1f%% busy, %.3g bytes\n", model.fabric().linkName(l.link).c_str(), 100 * l.utilisation,
                l.bytes);
}

nlohmann::json linkSummaryJson(const ClusterModel& model, const CollectiveResult& last, int busiest) {
  nlohmann::json links = nlohmann::json::array();
  for (const LinkLoad& l : model.busiest(last, busiest))
    links.push_back({{"link", model.fabric().linkName(l.link)}, {"utilisation", l.utilisation}, {"bytes", l.bytes}});
  nlohmann::json classes = nlohmann::json::object();
  const std::vector<double> byClass = bytesByClass(model, last);
  for (int c = 0; c < kLinkClassCount; ++c)
    if (byClass[c] > 0) classes[linkClassName(static_cast<LinkClass>(c))] = byClass[c];
  return {{"busiest_links", links}, {"bytes_by_class", classes}};
}

// Host ranks on CPU hosts like this one (sim/host.h), nccl-tests' table.
Status runHostRanks(const Flags& f, CollType coll, uint64_t minBytes, uint64_t maxBytes) {
  HostRunSpec spec = f.host;
  if (!f.hostCosts.empty()) {
    PLAIT_ASSIGN_OR_RETURN(spec.costs, loadHostCosts(f.hostCosts));
  }
  spec.hosts = std::max(f.nodes, 1);
  if (f.nicGbps > 0) spec.nicGBs = f.nicGbps / 8.0;
  const int n = spec.hosts * spec.ranksPerHost;
  std::printf("# plait-sim: %s, host ranks: %d hosts x %d ranks on %d cores each%s; host costs: %s\n#\n",
              f.op.c_str(), spec.hosts, spec.ranksPerHost, spec.cores, spec.hosts > 1 ? ", one switch" : "",
              f.hostCosts.empty() ? "the defaults" : f.hostCosts.c_str());
  perf::printTableHeader(stdout);
  for (uint64_t bytes = std::max<uint64_t>(minBytes, 4); bytes <= maxBytes; bytes *= std::max(f.factor, 2)) {
    PLAIT_ASSIGN_OR_RETURN(CollectiveResult r, simulateHostRanks(spec, coll, bytes));
    printRow(coll, n, bytes, r, 2);
  }
  return Status::ok();
}

Status run(const Flags& f) {
  PLAIT_ASSIGN_OR_RETURN(CollType coll, parseOp(f.op));
  // Bit order: Protocol's and SimAlgo's values.
  PLAIT_ASSIGN_OR_RETURN(uint8_t protocols, parseNameList(f.proto, "--proto", {"ll", "ll128", "simple"}));
  PLAIT_ASSIGN_OR_RETURN(uint8_t algorithms, parseNameList(f.algo, "--algo", {"ring", "tree", "nvls"}));
  PLAIT_ASSIGN_OR_RETURN(uint64_t minBytes, parseSize(f.minSize));
  PLAIT_ASSIGN_OR_RETURN(uint64_t maxBytes, parseSize(f.maxSize));
  if (f.host.ranksPerHost > 0) return runHostRanks(f, coll, minBytes, maxBytes);
  if (f.topoFile.empty()) return invalidArgument("--topo-file is required (or --host-ranks for CPU ranks)");
  PLAIT_ASSIGN_OR_RETURN(NetworkSpec network, networkFrom(f));
  PLAIT_ASSIGN_OR_RETURN(topo::Cluster cluster, topo::loadCluster(f.topoFile, f.nodes));
  const auto start = std::chrono::steady_clock::now();
  PLAIT_ASSIGN_OR_RETURN(std::unique_ptr<ClusterModel> model, ClusterModel::create(std::move(cluster), network));
  if (f.train) return runTraining(*model, f);
  // --gpus: a communicator of the first N GPUs of each host, as nccl-tests
  // run on part of a machine; its graphs are searched on those GPUs alone.
  std::optional<SimComm> part;
  if (f.gpusPerHost > 0) {
    if (coll == CollType::kAlltoAll) return invalidArgument("--gpus: all_to_all is simulated on every GPU only");
    std::vector<GpuRef> gpus;
    for (int h = 0; h < model->cluster().hosts(); ++h) {
      const int have = model->cluster().host(h).count(topo::NodeType::kGpu);
      if (f.gpusPerHost > have)
        return invalidArgument("--gpus " + std::to_string(f.gpusPerHost) + ": host " + std::to_string(h) + " has " +
                               std::to_string(have) + " GPUs");
      for (int g = 0; g < f.gpusPerHost; ++g) gpus.push_back({h, g});
    }
    PLAIT_ASSIGN_OR_RETURN(part, model->communicator(gpus));
  }
  const int n = part ? part->nranks() : model->nranks();
  SimOptions options;
  options.protocols = protocols;
  options.algorithms = algorithms;

  nlohmann::json rows = nlohmann::json::array();
  if (!f.json) {
    std::printf("# plait-sim: %s on %d hosts, %d GPUs, %zu ring channels x %.1f GB/s\n# network: %s\n#\n",
                f.op.c_str(), model->cluster().hosts(), n, (part ? *part : model->world()).graphs.comm.rings.size(),
                (part ? *part : model->world()).graphs.comm.ringBw, describeNetwork(network).c_str());
    perf::printTableHeader(stdout);
  }
  PLAIT_ASSIGN_OR_RETURN(std::vector<SweepPoint> reference, parseReferences(f.reference));
  std::vector<SweepPoint> points;
  CollectiveResult last;
  double busSum = 0;
  int count = 0;
  for (uint64_t bytes = std::max<uint64_t>(minBytes, 4); bytes <= maxBytes; bytes *= std::max(f.factor, 2)) {
    if (coll == CollType::kAlltoAll) {
      PLAIT_ASSIGN_OR_RETURN(last, model->simulateAlltoAll(bytes));
    } else {
      PLAIT_ASSIGN_OR_RETURN(last, part ? model->simulateConcurrent({*part}, coll, bytes, options)
                                        : model->simulate(coll, bytes, options));
    }
    busSum += last.busBw;
    ++count;
    points.push_back({static_cast<double>(bytes), last.busBw, last.plan.substr(0, last.plan.rfind(' '))});
    if (f.json) {
      rows.push_back({{"size_bytes", bytes},
                      {"time_us", last.timeUs},
                      {"algbw", last.algBw},
                      {"busbw", last.busBw},
                      {"plan", last.plan},
                      {"algorithm", simAlgoName(last.algorithm)},
                      {"protocol", protocolName(last.protocol)},
                      {"channels", last.channels},
                      {"latency_us", last.latencyUs},
                      {"channel_gbs", last.channelGBs}});
      continue;
    }
    printRow(coll, n, bytes, last, 1);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!f.svg.empty()) {
    char title[200];
    snprintf(title, sizeof title, "%s on %d hosts x %d GPUs (%s)", f.op.c_str(), model->cluster().hosts(),
             n / model->cluster().hosts(), f.topoFile.substr(f.topoFile.find_last_of('/') + 1).c_str());
    PLAIT_RETURN_IF_ERROR(writeFile(f.svg, sweepSvg(title, points, reference)));
  }
  if (f.json) {
    nlohmann::json out = {{"program", "plait-sim"}, {"collective", f.op}, {"nranks", n},
                          {"hosts", model->cluster().hosts()}, {"rows", rows},
                          {"largest", linkSummaryJson(*model, last, f.busiest)}, {"simulation_ms", ms}};
    std::printf("%s\n", out.dump(2).c_str());
    return Status::ok();
  }
  std::printf("# Avg bus bandwidth    : %g \n#\n", count > 0 ? busSum / count : 0);
  printLinkSummary(*model, last, f.busiest);
  std::printf("# simulated in %.1f ms\n", ms);
  return Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"plait-sim: Plait's graphs and tuner on a described cluster, with a flow-level network model"};
  app.add_option("--topo-file", f.topoFile, "NCCL topology XML of a host, or a Plait <cluster> file");
  f.host.ranksPerHost = 0;
  app.add_option("--host-ranks", f.host.ranksPerHost, "CPU ranks per host instead of GPUs (hosts: --nodes)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--cores", f.host.cores, "host ranks: CPUs per host")->check(CLI::Range(1, 1 << 16));
  app.add_option("--net-hop-us", f.host.netHopUs, "host ranks: one step across the network")->check(CLI::Range(0.0, 1e6));
  app.add_option("--mem-gbps", f.host.memGBs, "host ranks: DRAM copy rate per host, GB/s (0: all in cache)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--cache-bytes", f.host.cacheBytes, "host ranks: buffers beyond this go through DRAM")
      ->check(CLI::Range(0.0, 1e15));
  app.add_option("--host-costs", f.hostCosts, "host ranks: a calibration file from plait-calibrate (default: built-in costs)");
  app.add_option("--wake-us", f.host.wakeUs, "host ranks: one step when threads outnumber cores")->check(CLI::Range(0.0, 1e6));
  app.add_option("--nodes", f.nodes, "hosts (copies of a <system> file)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--gpus", f.gpusPerHost, "GPUs of each host in the communicator, the first N (default: all)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--network", f.networkFile, "file holding a <network> element");
  app.add_flag("--single-switch", f.singleSwitch, "every NIC on one non-blocking switch");
  app.add_option("--spines", f.spines, "spine switches, each flow on the one its hash picks (default: ideal ECMP)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--no-pxn", f.noPxn, "point-to-point leaves by the sender's own NIC, not its NVLink peer's on the receiver's rail");
  app.add_option("--hosts-per-leaf", f.hostsPerLeaf, "hosts under one leaf switch per rail")->check(CLI::Range(1, 1 << 20));
  app.add_option("--oversubscription", f.oversubscription, "leaf downlink:uplink bandwidth")->check(CLI::Range(1.0, 1e3));
  app.add_option("--nic-gbps", f.nicGbps, "NIC speed, Gb/s (default: the topology's)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--switch-latency-us", f.switchLatencyUs, "latency per switch")->check(CLI::Range(0.0, 1e6));
  app.add_option("--op", f.op, "all_reduce, all_gather, reduce_scatter, broadcast, reduce");
  app.add_option("-b,--minbytes", f.minSize, "smallest size (K, M, G suffixes)");
  app.add_option("-e,--maxbytes", f.maxSize, "largest size");
  app.add_option("-f,--stepfactor", f.factor, "size multiplier")->check(CLI::Range(2, 1024));
  app.add_option("--algo", f.algo, "algorithms the tuner may pick: all, or a list of ring, tree, nvls (Plait runs ring)");
  app.add_option("--proto", f.proto, "protocols the tuner may pick: all, or a list of ll, ll128, simple");
  app.add_option("--busiest", f.busiest, "busiest links reported for the largest size")->check(CLI::Range(0, 1000));
  app.add_flag("--json", f.json, "JSON on stdout instead of the table");
  app.add_option("--svg", f.svg, "write a picture: busbw against size (sweep), or the fabric's heat map (--train)");
  app.add_option("--reference", f.reference, "published points for the sweep picture, SIZE=GBPS (e.g. 1G=231.5)");
  TrainingSpec& t = f.training;
  app.add_flag("--train", f.train, "one transformer training step's DP/TP/PP/EP traffic instead of a sweep");
  app.add_option("--tp", t.tp, "tensor-parallel group size")->check(CLI::Range(1, 1 << 20));
  app.add_option("--pp", t.pp, "pipeline stages")->check(CLI::Range(1, 1 << 20));
  app.add_option("--dp", t.dp, "data-parallel replicas (0: what is left)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--ep", t.ep, "expert-parallel group size")->check(CLI::Range(1, 1 << 20));
  app.add_option("--d-model", t.dModel, "transformer width")->check(CLI::Range(1, 1 << 20));
  app.add_option("--blocks", t.blocks, "transformer blocks")->check(CLI::Range(1, 1 << 16));
  app.add_option("--seq", t.seq, "sequence length")->check(CLI::Range(1, 1 << 24));
  app.add_option("--micro-batch", t.microBatch, "sequences per micro-batch")->check(CLI::Range(1, 1 << 16));
  app.add_option("--accumulate", t.accumulate, "micro-batches per step")->check(CLI::Range(1, 1 << 16));
  app.add_option("--experts", t.experts, "MoE experts per block (0: dense)")->check(CLI::Range(0, 1 << 16));
  app.add_option("--top-k", t.topK, "experts per token")->check(CLI::Range(1, 64));
  app.add_option("--capacity-factor", t.capacityFactor, "MoE capacity factor")->check(CLI::Range(0.01, 100.0));
  app.add_flag("--tp-across-hosts", t.tpAcrossHosts, "place tensor-parallel groups across hosts (data-parallel rank fastest)");
  app.add_option("--pp-rail-shift", t.ppRailShift, "stage s uses GPU (g + s*shift) of its host: pipeline traffic off rail")
      ->check(CLI::Range(0, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad flag: 2, with CLI11's message
  }
  const Status status = run(f);
  if (!status.isOk()) {
    std::fprintf(stderr, "plait-sim: %s\n", status.toString().c_str());
    return 1;
  }
  return 0;
}
