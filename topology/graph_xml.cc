// graph_xml.cc — NodeGraph <-> NCCL's graph XML.
#include "topology/graph_xml.h"

#include <cstdio>

namespace plait::topo {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

int ordinalOfDev(const TopoSystem& sys, NodeType type, int dev) {
  const std::vector<int>& list = sys.of(type);
  for (size_t i = 0; i < list.size(); ++i) {
    const TopoNode& n = sys.nodes[list[i]];
    if ((type == NodeType::kGpu ? n.gpu.dev : n.net.dev) == dev) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

XmlNode graphsToXml(const TopoSystem& sys, const std::vector<NodeGraph>& graphs) {
  XmlNode root;
  root.name = "graphs";
  root.setAttr("version", "1");
  for (const NodeGraph& g : graphs) {
    XmlNode& x = root.addChild("graph");
    x.setAttr("id", std::to_string(g.id));
    x.setAttr("pattern", std::to_string(static_cast<int>(g.pattern)));
    x.setAttr("crossnic", std::to_string(g.crossNic));
    x.setAttr("nchannels", std::to_string(g.channels.size()));
    x.setAttr("speedintra", number(g.speedIntra));
    x.setAttr("speedinter", number(g.speedInter));
    x.setAttr("latencyinter", number(g.latencyInter));
    x.setAttr("typeintra", pathTypeName(g.typeIntra));
    x.setAttr("typeinter", pathTypeName(g.typeInter));
    x.setAttr("samechannels", std::to_string(g.sameChannels));
    for (const GraphChannel& ch : g.channels) {
      XmlNode& xc = x.addChild("channel");
      if (ch.netIn >= 0) xc.addChild("net").setAttr("dev", std::to_string(sys.net(ch.netIn).net.dev));
      for (int gpu : ch.gpus) xc.addChild("gpu").setAttr("dev", std::to_string(sys.gpu(gpu).gpu.dev));
      if (ch.netOut >= 0) xc.addChild("net").setAttr("dev", std::to_string(sys.net(ch.netOut).net.dev));
    }
  }
  return root;
}

namespace {

Result<GraphChannel> channelFromXml(const TopoSystem& sys, const XmlNode& xc) {
  GraphChannel ch;
  for (const XmlNode& e : xc.children) {
    PLAIT_ASSIGN_OR_RETURN(int64_t dev64, e.intAttrIn("dev", -1, -1, INT32_MAX));
    const int dev = static_cast<int>(dev64);
    if (e.name == "gpu") {
      int g = ordinalOfDev(sys, NodeType::kGpu, dev);
      if (g < 0) return invalidArgument("graph names <gpu dev=\"" + std::to_string(dev) + "\"> the system lacks");
      ch.gpus.push_back(g);
    } else if (e.name == "net") {
      int n = ordinalOfDev(sys, NodeType::kNet, dev);
      if (n < 0) return invalidArgument("graph names <net dev=\"" + std::to_string(dev) + "\"> the system lacks");
      (ch.gpus.empty() ? ch.netIn : ch.netOut) = n;
    }
  }
  return ch;
}

}  // namespace

Result<std::vector<NodeGraph>> graphsFromXml(const TopoSystem& sys, const XmlNode& root) {
  if (root.name != "graphs") return invalidArgument("graph XML root is <" + root.name + ">, expected <graphs>");
  std::vector<NodeGraph> out;
  for (const XmlNode& x : root.children) {
    if (x.name != "graph") continue;
    NodeGraph g;
    PLAIT_ASSIGN_OR_RETURN(int64_t id, x.intAttrIn("id", 0, 0, 1024));
    PLAIT_ASSIGN_OR_RETURN(int64_t pattern, x.intAttrIn("pattern", 4, 0, 64));
    PLAIT_ASSIGN_OR_RETURN(int64_t crossNic, x.intAttrIn("crossnic", 0, 0, 2));
    PLAIT_ASSIGN_OR_RETURN(g.speedIntra, x.floatAttrIn("speedintra", 0, 0, 1e9));
    PLAIT_ASSIGN_OR_RETURN(g.speedInter, x.floatAttrIn("speedinter", 0, 0, 1e9));
    PLAIT_ASSIGN_OR_RETURN(g.latencyInter, x.floatAttrIn("latencyinter", 0, 0, 1e9));
    g.id = static_cast<int>(id);
    g.pattern = static_cast<GraphPattern>(pattern);
    g.crossNic = static_cast<int>(crossNic);
    auto intra = parsePathType(x.attrOr("typeintra", "LOC"));
    auto inter = parsePathType(x.attrOr("typeinter", "LOC"));
    if (!intra || !inter) return invalidArgument("graph " + std::to_string(g.id) + " has an unknown path type");
    g.typeIntra = *intra;
    g.typeInter = *inter;
    PLAIT_ASSIGN_OR_RETURN(int64_t sameChannels, x.intAttrIn("samechannels", 0, 0, 1));
    g.sameChannels = static_cast<int>(sameChannels);
    for (const XmlNode& xc : x.children) {
      if (xc.name != "channel") continue;
      PLAIT_ASSIGN_OR_RETURN(GraphChannel ch, channelFromXml(sys, xc));
      g.channels.push_back(std::move(ch));
    }
    PLAIT_ASSIGN_OR_RETURN(int64_t declared,
                           x.intAttrIn("nchannels", static_cast<int64_t>(g.channels.size()), 0, 1024));
    if (declared != static_cast<int64_t>(g.channels.size())) {
      return invalidArgument("graph " + std::to_string(g.id) + " declares " + std::to_string(declared) +
                             " channels but lists " + std::to_string(g.channels.size()));
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace plait::topo
