// dot.cc — DOT output.
#include "topology/dot.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace plait::topo {

namespace {

const char* fill(NodeType t) {
  switch (t) {
    case NodeType::kGpu: return "#9ad26b";
    case NodeType::kCpu: return "#8fb3e8";
    case NodeType::kNvs: return "#e8c36b";
    case NodeType::kNic:
    case NodeType::kNet: return "#e89b8f";
    case NodeType::kPci: return "#dddddd";
  }
  return "white";
}

const char* linkColor(LinkType t) {
  switch (t) {
    case LinkType::kNvl: return "#3a8a1a";
    case LinkType::kSys: return "#c03030";
    case LinkType::kNet: return "#c06020";
    case LinkType::kC2c: return "#7030a0";
    default: return "#555555";
  }
}

constexpr const char* kRingColors[] = {"#d62728", "#1f77b4", "#ff7f0e", "#9467bd",
                                       "#8c564b", "#e377c2", "#17becf", "#bcbd22"};

}  // namespace

std::string toDot(const TopoSystem& sys, const NodeGraph& graph, const DotOptions& options) {
  std::ostringstream out;
  out << "digraph topology {\n  graph [fontname=\"Helvetica\", labelloc=t, label=\"" << options.title
      << "\", overlap=false, splines=true];\n"
      << "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n"
      << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  for (size_t i = 0; i < sys.nodes.size(); ++i) {
    const TopoNode& n = sys.nodes[i];
    std::string label = n.label();
    if (n.type == NodeType::kGpu) label += "\\nsm " + std::to_string(n.gpu.sm);
    if (n.type == NodeType::kNet) label += "\\n" + n.net.name;
    if (n.type == NodeType::kCpu) label += "\\n" + n.cpu.vendor;
    out << "  n" << i << " [label=\"" << label << "\", fillcolor=\"" << fill(n.type) << "\"];\n";
  }
  // CPUs on top; PCIe edges (drawn top-down) place everything else below.
  out << "  { rank=same;";
  for (int i : sys.of(NodeType::kCpu)) out << " n" << i << ";";
  out << " }\n";
  std::set<std::pair<int, int>> drawn;
  char bw[32];
  for (const TopoLink& l : sys.links) {
    auto key = std::minmax(l.from, l.to);
    if (!drawn.insert(key).second) continue;
    std::snprintf(bw, sizeof bw, "%s %.0f", linkTypeName(l.type), l.bw);
    // PCIe and network links shape the layout; NVLink and SYS edges do not.
    bool shapes = l.type == LinkType::kPci || l.type == LinkType::kNet;
    int from = l.from, to = l.to;
    if (shapes && sys.nodes[to].type == NodeType::kCpu) std::swap(from, to);  // top-down
    if (shapes && sys.nodes[from].type == NodeType::kNet) std::swap(from, to);
    if (shapes && sys.nodes[from].type != NodeType::kCpu && sys.nodes[to].type == NodeType::kPci) std::swap(from, to);
    out << "  n" << from << " -> n" << to << " [dir=none, color=\"" << linkColor(l.type) << "\", label=\"" << bw
        << "\"" << (l.type == LinkType::kNvl ? ", penwidth=2" : "") << (shapes ? "" : ", constraint=false") << "];\n";
  }
  const std::vector<int>& gpus = sys.of(NodeType::kGpu);
  const std::vector<int>& nets = sys.of(NodeType::kNet);
  for (size_t c = 0; c < graph.channels.size() && static_cast<int>(c) < options.maxChannels; ++c) {
    const GraphChannel& ch = graph.channels[c];
    const char* color = kRingColors[c % std::size(kRingColors)];
    auto arrow = [&](int from, int to) {
      out << "  n" << from << " -> n" << to << " [color=\"" << color << "\", penwidth=1.6, constraint=false, label=\"c"
          << c << "\", fontcolor=\"" << color << "\"];\n";
    };
    if (ch.netIn >= 0 && !ch.gpus.empty()) arrow(nets[ch.netIn], gpus[ch.gpus.front()]);
    for (size_t i = 0; i + 1 < ch.gpus.size(); ++i) arrow(gpus[ch.gpus[i]], gpus[ch.gpus[i + 1]]);
    if (ch.netOut >= 0 && !ch.gpus.empty()) arrow(gpus[ch.gpus.back()], nets[ch.netOut]);
    if (ch.netIn < 0 && ch.gpus.size() > 1) arrow(gpus[ch.gpus.back()], gpus[ch.gpus.front()]);
  }
  out << "}\n";
  return out.str();
}

}  // namespace plait::topo
