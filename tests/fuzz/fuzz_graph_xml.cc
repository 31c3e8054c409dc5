// fuzz_graph_xml — NCCL's graph XML (NCCL_GRAPH_FILE) read against a known
// machine, as topology/local.cc reads it: every <graph> is parsed, the ring
// (id 0) and tree (id 1) validated against the system, a missing tree made
// from the ring. The first input byte picks one of the test machines
// (tests/topology/data) and whether the job spans hosts (NIC-terminated
// channels); the rest is the file. A graph that passes validation must be
// usable: its channels name only GPUs and NICs the system has, and it
// writes back to XML that reads the same.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "topology/graph_xml.h"
#include "topology/search.h"
#include "topology/system.h"
#include "topology/xml.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace plait;
using namespace plait::topo;

std::vector<TopoSystem>& systems() {
  static std::vector<TopoSystem> list = [] {
    std::vector<TopoSystem> out;
    for (const char* file : {"dgx_a100.xml", "hgx_h100.xml", "dgx1_v100.xml", "pcie_4gpu_2socket.xml",
                             "cpu_2socket.xml"}) {
      auto xml = readXmlFile(std::string(PLAIT_FUZZ_TOPOLOGY_DATA) + "/" + file);
      if (!xml.isOk()) std::abort();  // the fuzzer is run from a checkout
      auto sys = buildSystem(xml.value());
      if (!sys.isOk()) std::abort();
      out.push_back(std::move(sys.value()));
    }
    return out;
  }();
  return list;
}

void checkUsable(const TopoSystem& sys, const NodeGraph& g) {
  const int gpus = sys.count(NodeType::kGpu), nets = sys.count(NodeType::kNet);
  for (const GraphChannel& c : g.channels) {
    for (int gpu : c.gpus) PLAIT_FUZZ_CHECK(gpu >= 0 && gpu < gpus);
    PLAIT_FUZZ_CHECK(c.netIn >= -1 && c.netIn < nets && c.netOut >= -1 && c.netOut < nets);
  }
  (void)g.describe();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)systems();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const TopoSystem& sys = systems()[data[0] % systems().size()];
  const bool multiNode = (data[0] / systems().size()) % 2 == 1;
  auto xml = parseXml(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  if (!xml.isOk()) return 0;
  auto graphs = graphsFromXml(sys, xml.value());
  if (!graphs.isOk()) {
    PLAIT_FUZZ_CHECK(!graphs.status().message().empty());
    return 0;
  }
  std::vector<NodeGraph> valid;
  for (const NodeGraph& g : graphs.value()) {
    Status st = validateGraph(sys, g, multiNode);
    if (!st.isOk()) {
      PLAIT_FUZZ_CHECK(!st.message().empty());
      continue;
    }
    checkUsable(sys, g);
    if (g.id == 0) {  // local.cc makes the tree from the ring when the file has none
      const NodeGraph tree = treeGraphFromRing(g);
      PLAIT_FUZZ_CHECK(validateGraph(sys, tree, multiNode).isOk());
      checkUsable(sys, tree);
    }
    valid.push_back(g);
  }
  if (valid.empty()) return 0;
  auto read = graphsFromXml(sys, graphsToXml(sys, valid));
  PLAIT_FUZZ_CHECK(read.isOk() && read->size() == valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    PLAIT_FUZZ_CHECK(read.value()[i].channels.size() == valid[i].channels.size());
    for (size_t c = 0; c < valid[i].channels.size(); ++c)
      PLAIT_FUZZ_CHECK(read.value()[i].channels[c].gpus == valid[i].channels[c].gpus);
  }
  return 0;
}
