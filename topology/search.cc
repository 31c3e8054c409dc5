// search.cc — ring search inside one host (see search.h for what it
// maximises and why).
#include "topology/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/config.h"
#include "base/log.h"

namespace plait::topo {

PLAIT_PARAM_INT(kCrossNic, "CROSS_NIC", 2, "0: a channel leaves by the NIC it entered; 1: any NIC; 2: any when it helps");
PLAIT_PARAM_INT(kMaxChannelsParam, "MAX_CHANNELS", 32, "most channels per communicator (a graph search uses half)");

SearchOptions searchOptionsFromEnv() {
  SearchOptions opts;
  opts.crossNic = static_cast<int>(std::clamp<int64_t>(kCrossNic.get(), 0, 2));
  opts.maxChannels = static_cast<int>(std::clamp<int64_t>(kMaxChannelsParam.get() / 2, 1, 32));
  return opts;
}

namespace {

constexpr double kEpsilon = 1e-6;
// Per-channel speeds tried, GB/s, highest first.
constexpr double kSpeeds[] = {60, 50, 48, 40, 30, 25, 24, 22, 20, 18, 15, 12, 11, 10, 9,
                              8, 7, 6, 5, 4, 3, 2.4, 2, 1.2, 0.6, 0.24, 0.12};
constexpr PathType kIntraLevels[] = {PathType::kNvl, PathType::kNvb, PathType::kC2c, PathType::kPix,
                                     PathType::kPxb, PathType::kPhb, PathType::kSys};
constexpr PathType kInterLevels[] = {PathType::kPix, PathType::kPxb, PathType::kP2c,
                                     PathType::kPxn, PathType::kPhb, PathType::kSys};

// The fastest a single channel may go on these GPUs (one SM's worth).
double maxChannelSpeed(const TopoSystem& sys) {
  int sm = 0;
  for (int g : sys.of(NodeType::kGpu)) sm = std::max(sm, sys.nodes[g].gpu.sm);
  return sm >= 90 ? 60 : 40;
}

struct Setting {
  double speed = 0;
  PathType typeIntra = PathType::kLoc;
  PathType typeInter = PathType::kLoc;
  bool crossNic = false;
  bool useNet = false;
  int target = 0;    // stop when this many channels fit
  bool greedy = true;  // first fit per channel, no backtracking across channels
};

class RingSearch {
 public:
  RingSearch(const TopoSystem& sys, const PathTable& paths, int64_t budget)
      : sys_(sys), paths_(paths), budget_(budget), nGpus_(sys.count(NodeType::kGpu)),
        nNets_(sys.count(NodeType::kNet)) {}

  // The most channels found for this setting within the step budget.
  std::vector<GraphChannel> run(const Setting& setting);
  int64_t steps() const { return totalSteps_; }

 private:
  double cost(const TopoPath& p) const;
  bool fits(const TopoPath& p) const;
  void take(const TopoPath& p, double sign);
  void searchChannel(int c);
  void extend(int c, GraphChannel& ch, std::vector<char>& visited);
  void closeChannel(int c, GraphChannel& ch);
  void channelDone(int c, GraphChannel& ch);

  const TopoSystem& sys_;
  const PathTable& paths_;
  int64_t budget_;
  int nGpus_, nNets_;
  Setting s_;
  std::vector<double> remaining_;
  std::vector<int> netInUse_, netOutUse_;
  std::vector<GraphChannel> current_, best_;
  int64_t steps_ = 0, totalSteps_ = 0;
  bool stop_ = false;
};

double RingSearch::cost(const TopoPath& p) const {
  if (p.type < PathType::kPhb) return s_.speed;
  for (int id : p.links) {
    const TopoNode& n = sys_.nodes[sys_.links[id].to];
    if (n.type == NodeType::kCpu && n.cpu.isIntel()) return s_.speed * kIntelP2pOverhead;
  }
  return s_.speed;
}

bool RingSearch::fits(const TopoPath& p) const {
  double need = cost(p);
  for (int id : p.links) {
    if (remaining_[id] + kEpsilon < need) return false;
  }
  return true;
}

void RingSearch::take(const TopoPath& p, double sign) {
  double need = cost(p) * sign;
  for (int id : p.links) remaining_[id] -= need;
}

std::vector<GraphChannel> RingSearch::run(const Setting& setting) {
  s_ = setting;
  remaining_.resize(sys_.links.size());
  for (size_t i = 0; i < sys_.links.size(); ++i) remaining_[i] = sys_.links[i].bw;
  netInUse_.assign(nNets_, 0);
  netOutUse_.assign(nNets_, 0);
  current_.clear();
  best_.clear();
  steps_ = 0;
  stop_ = false;
  searchChannel(0);
  totalSteps_ += steps_;
  return best_;
}

void RingSearch::searchChannel(int c) {
  if (c > static_cast<int>(best_.size())) best_ = current_;
  if (c >= s_.target) {
    stop_ = true;
    return;
  }
  GraphChannel ch;
  std::vector<char> visited(nGpus_, 0);
  if (!s_.useNet) {
    // A ring is a cycle: fixing its first GPU loses nothing.
    ch.gpus.push_back(0);
    visited[0] = 1;
    extend(c, ch, visited);
    return;
  }
  // Least-used NIC first, so channels spread over NICs.
  std::vector<int> nets(nNets_);
  for (int i = 0; i < nNets_; ++i) nets[i] = i;
  std::stable_sort(nets.begin(), nets.end(), [&](int a, int b) { return netInUse_[a] < netInUse_[b]; });
  for (int n : nets) {
    const int netNode = sys_.of(NodeType::kNet)[n];
    std::vector<int> firsts;
    for (int g = 0; g < nGpus_; ++g) {
      const TopoPath& p = paths_.get(netNode, sys_.of(NodeType::kGpu)[g]);
      if (p.type <= s_.typeInter && fits(p)) firsts.push_back(g);
    }
    std::stable_sort(firsts.begin(), firsts.end(), [&](int a, int b) {
      return paths_.get(netNode, sys_.of(NodeType::kGpu)[a]).type <
             paths_.get(netNode, sys_.of(NodeType::kGpu)[b]).type;
    });
    for (int g : firsts) {
      const TopoPath& p = paths_.get(netNode, sys_.of(NodeType::kGpu)[g]);
      take(p, 1);
      ch.netIn = n;
      ++netInUse_[n];
      ch.gpus.assign(1, g);
      visited[g] = 1;
      extend(c, ch, visited);
      visited[g] = 0;
      --netInUse_[n];
      take(p, -1);
      if (stop_) return;
    }
  }
}

void RingSearch::extend(int c, GraphChannel& ch, std::vector<char>& visited) {
  if (stop_ || ++steps_ > budget_) {
    stop_ = true;
    return;
  }
  if (static_cast<int>(ch.gpus.size()) == nGpus_) {
    closeChannel(c, ch);
    return;
  }
  const int last = ch.gpus.back();
  // Best path type first, then the path with the most bandwidth left.
  struct Candidate {
    int gpu;
    PathType type;
    double left;
  };
  std::vector<Candidate> cands;
  for (int g = 0; g < nGpus_; ++g) {
    if (visited[g]) continue;
    const TopoPath& p = paths_.gpuToGpu(last, g);
    if (p.type > s_.typeIntra || !fits(p)) continue;
    double left = 1e30;
    for (int id : p.links) left = std::min(left, remaining_[id]);
    cands.push_back({g, p.type, left});
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.type != b.type) return a.type < b.type;
    return a.left > b.left + kEpsilon;
  });
  for (const Candidate& cand : cands) {
    const TopoPath& p = paths_.gpuToGpu(last, cand.gpu);
    take(p, 1);
    visited[cand.gpu] = 1;
    ch.gpus.push_back(cand.gpu);
    extend(c, ch, visited);
    ch.gpus.pop_back();
    visited[cand.gpu] = 0;
    take(p, -1);
    if (stop_) return;
  }
}

void RingSearch::closeChannel(int c, GraphChannel& ch) {
  const int lastNode = sys_.of(NodeType::kGpu)[ch.gpus.back()];
  if (!s_.useNet) {
    const TopoPath& p = paths_.get(lastNode, sys_.of(NodeType::kGpu)[ch.gpus.front()]);
    if (nGpus_ > 1 && (p.type > s_.typeIntra || !fits(p))) return;
    if (nGpus_ > 1) take(p, 1);
    channelDone(c, ch);
    if (nGpus_ > 1) take(p, -1);
    return;
  }
  // Leave by the entry NIC when possible, otherwise (crossNic) by the least
  // used NIC closest to the last GPU.
  std::vector<int> outs{ch.netIn};
  if (s_.crossNic) {
    std::vector<int> others;
    for (int n = 0; n < nNets_; ++n) {
      if (n != ch.netIn) others.push_back(n);
    }
    std::stable_sort(others.begin(), others.end(), [&](int a, int b) {
      PathType ta = paths_.get(lastNode, sys_.of(NodeType::kNet)[a]).type;
      PathType tb = paths_.get(lastNode, sys_.of(NodeType::kNet)[b]).type;
      return ta != tb ? ta < tb : netOutUse_[a] < netOutUse_[b];
    });
    outs.insert(outs.end(), others.begin(), others.end());
  }
  for (int n : outs) {
    const TopoPath& p = paths_.get(lastNode, sys_.of(NodeType::kNet)[n]);
    if (p.type > s_.typeInter || !fits(p)) continue;
    take(p, 1);
    ch.netOut = n;
    ++netOutUse_[n];
    channelDone(c, ch);
    --netOutUse_[n];
    take(p, -1);
    if (stop_) return;
  }
}

void RingSearch::channelDone(int c, GraphChannel& ch) {
  current_.push_back(ch);
  searchChannel(c + 1);
  current_.pop_back();
  // First fit: a channel that cannot be followed ends the attempt.
  if (s_.greedy) stop_ = true;
}

// The most channels the link budget could allow: every GPU sends once per
// channel, over links its hops may use (NVLink only at NVL/NVB limits) or, as
// the last GPU of a channel, towards a NIC; every channel enters by one NIC.
int channelBound(const TopoSystem& sys, const Setting& s, int maxChannels) {
  const bool nvlOnly = s.typeIntra <= PathType::kNvb;
  const int nGpus = sys.count(NodeType::kGpu);
  if (nGpus == 1 && !s.useNet) return 1;
  int bound = maxChannels;
  for (int g : sys.of(NodeType::kGpu)) {
    double intra = 0, pci = 0;
    for (int id : sys.nodes[g].links) {
      const TopoLink& l = sys.links[id];
      if (l.type == LinkType::kNvl || !nvlOnly) intra += l.bw;
      if (l.type == LinkType::kPci) pci += l.bw;
    }
    int n = nGpus > 1 ? static_cast<int>(intra / s.speed + kEpsilon) : 0;
    if (s.useNet) n += nvlOnly ? static_cast<int>(pci / s.speed + kEpsilon) : 0;
    if (s.useNet && !nvlOnly) n = static_cast<int>(intra / s.speed + kEpsilon);
    bound = std::min(bound, n);
  }
  if (s.useNet) {
    int nics = 0;
    for (int n : sys.of(NodeType::kNet)) nics += static_cast<int>(sys.nodes[n].net.bw / s.speed + kEpsilon);
    bound = std::min(bound, nics);
  }
  return bound;
}

struct Found {
  std::vector<GraphChannel> channels;
  Setting setting;
  double total() const { return static_cast<double>(channels.size()) * setting.speed; }
};

// Best total bandwidth at fixed type limits, trying speeds from high to low.
Found searchLevel(RingSearch& search, const TopoSystem& sys, const SearchOptions& opts, Setting base,
                  SearchStats* stats) {
  Found best;
  const double top = maxChannelSpeed(sys);
  std::vector<bool> crossChoices;
  if (!base.useNet || opts.crossNic != 1) crossChoices.push_back(false);
  if (base.useNet && opts.crossNic != 0) crossChoices.push_back(true);
  for (double speed : kSpeeds) {
    if (speed > top + kEpsilon) continue;
    if (speed * opts.maxChannels <= best.total() + kEpsilon) break;
    Setting s = base;
    s.speed = speed;
    s.target = channelBound(sys, s, opts.maxChannels);
    if (s.target == 0 || speed * s.target <= best.total() + kEpsilon) continue;
    for (bool cross : crossChoices) {
      s.crossNic = cross;
      s.greedy = true;
      std::vector<GraphChannel> found = search.run(s);
      if (static_cast<int>(found.size()) < s.target) {
        s.greedy = false;
        std::vector<GraphChannel> full = search.run(s);
        if (full.size() > found.size()) found = std::move(full);
      }
      if (stats) stats->attempts += 2;
      Found f{std::move(found), s};
      if (f.total() > best.total() + kEpsilon) best = std::move(f);
    }
  }
  return best;
}

NodeGraph toGraph(const Found& f) {
  NodeGraph g;
  g.id = 0;
  g.pattern = GraphPattern::kRing;
  g.speedIntra = f.setting.speed;
  g.speedInter = f.setting.useNet ? f.setting.speed : 0;
  g.typeIntra = f.setting.typeIntra;
  g.typeInter = f.setting.useNet ? f.setting.typeInter : PathType::kLoc;
  g.channels = f.channels;
  for (const GraphChannel& ch : g.channels) {
    if (ch.netIn != ch.netOut) g.crossNic = 1;
  }
  return g;
}

}  // namespace

Result<NodeGraph> searchRingGraph(const TopoSystem& sys, const PathTable& paths, const SearchOptions& opts,
                                  SearchStats* stats) {
  if (sys.count(NodeType::kGpu) == 0) return NodeGraph{};
  const bool useNet = opts.useNet && sys.count(NodeType::kNet) > 0;
  RingSearch search(sys, paths, opts.stepBudget);
  std::vector<PathType> inters = useNet ? std::vector<PathType>(std::begin(kInterLevels), std::end(kInterLevels))
                                        : std::vector<PathType>{PathType::kLoc};
  for (PathType inter : inters) {
    for (PathType intra : kIntraLevels) {
      Setting base;
      base.typeIntra = intra;
      base.typeInter = inter;
      base.useNet = useNet;
      // Does any ring fit at these limits? Cheap at the lowest speed.
      Setting probe = base;
      probe.speed = kSpeeds[std::size(kSpeeds) - 1];
      probe.target = 1;
      probe.crossNic = useNet && opts.crossNic != 0;
      if (search.run(probe).empty()) continue;
      Found f = searchLevel(search, sys, opts, base, stats);
      if (f.channels.empty()) continue;
      if (stats) stats->steps = search.steps();
      NodeGraph g = toGraph(f);
      PLAIT_INFO(kGraph, "Ring graph: %zu channels x %.1f GB/s, intra %s, inter %s", g.channels.size(),
                 g.speedIntra, pathTypeName(g.typeIntra), useNet ? pathTypeName(g.typeInter) : "-");
      return g;
    }
  }
  return internalError("no ring fits the topology (is a GPU disconnected?)");
}

NodeGraph treeGraphFromRing(const NodeGraph& ring) {
  NodeGraph tree = ring;
  tree.id = 1;
  tree.pattern = GraphPattern::kBalancedTree;
  // A chain is entered and left at its head: both ends use the entry NIC.
  for (GraphChannel& ch : tree.channels) ch.netOut = ch.netIn;
  tree.crossNic = 0;
  return tree;
}

Status validateGraph(const TopoSystem& sys, const NodeGraph& graph, bool multiNode) {
  const int nGpus = sys.count(NodeType::kGpu), nNets = sys.count(NodeType::kNet);
  for (size_t c = 0; c < graph.channels.size(); ++c) {
    const GraphChannel& ch = graph.channels[c];
    std::vector<int> seen(nGpus, 0);
    for (int g : ch.gpus) {
      if (g < 0 || g >= nGpus) return invalidArgument("graph channel " + std::to_string(c) + " names a GPU the system lacks");
      if (seen[g]++) return invalidArgument("graph channel " + std::to_string(c) + " visits a GPU twice");
    }
    if (static_cast<int>(ch.gpus.size()) != nGpus) {
      return invalidArgument("graph channel " + std::to_string(c) + " does not visit every GPU");
    }
    bool netsOk = multiNode ? (ch.netIn >= 0 && ch.netIn < nNets && ch.netOut >= 0 && ch.netOut < nNets)
                            : (ch.netIn < 0 && ch.netOut < 0);
    if (!netsOk) return invalidArgument("graph channel " + std::to_string(c) + " has missing or unknown NICs");
  }
  return Status::ok();
}

std::string NodeGraph::describe() const {
  std::ostringstream out;
  char head[160];
  std::snprintf(head, sizeof head, "%s graph: %zu channels x %.1f GB/s (total %.1f), intra %s, inter %s%s\n",
                pattern == GraphPattern::kRing ? "Ring" : "Tree", channels.size(), speedIntra, totalBw(),
                pathTypeName(typeIntra), speedInter > 0 ? pathTypeName(typeInter) : "-",
                crossNic ? ", cross-NIC" : "");
  out << head;
  for (size_t c = 0; c < channels.size(); ++c) {
    const GraphChannel& ch = channels[c];
    out << "  channel " << c << ":";
    if (ch.netIn >= 0) out << " NET" << ch.netIn;
    for (int g : ch.gpus) out << " GPU" << g;
    if (ch.netOut >= 0) out << " NET" << ch.netOut;
    out << "\n";
  }
  return out.str();
}

}  // namespace plait::topo
