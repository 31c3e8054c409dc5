// fuzz_topology_xml — NCCL's topology XML (NCCL_TOPO_FILE, plait-topo's
// system files): parsed, turned into the machine model, its paths computed
// and a ring graph searched, as topology/local.cc does for a real file. The
// file belongs to the user, but a typo or a file from elsewhere must give an
// error naming what is wrong, never a crash, UB, a hang or memory sized by
// a number in the file. Checked on the way: the XML tree is lossless (what
// it writes parses back equal), a searched graph passes validateGraph, and
// the graph XML written for it reads back with the same channels.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/dot.h"
#include "topology/graph_xml.h"
#include "topology/paths.h"
#include "topology/search.h"
#include "topology/system.h"
#include "topology/topology.h"
#include "topology/xml.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace plait;
using namespace plait::topo;

bool sameChannels(const NodeGraph& a, const NodeGraph& b) {
  if (a.channels.size() != b.channels.size()) return false;
  for (size_t c = 0; c < a.channels.size(); ++c) {
    const GraphChannel &x = a.channels[c], &y = b.channels[c];
    if (x.netIn != y.netIn || x.netOut != y.netOut || x.gpus != y.gpus) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto xml = parseXml(text);
  if (!xml.isOk()) {
    PLAIT_FUZZ_CHECK(!xml.status().message().empty());
    return 0;
  }
  auto again = parseXml(writeXml(xml.value()));
  PLAIT_FUZZ_CHECK(again.isOk() && again.value() == xml.value());

  auto system = buildSystem(xml.value());
  if (!system.isOk()) {
    PLAIT_FUZZ_CHECK(!system.status().message().empty());
    return 0;
  }
  (void)describeSystem(system.value());
  for (int cpu : {0, 1, 31, 32, 63, 64, 1023, 4096}) (void)numaNodeOfCpu(system.value(), cpu);

  const PathTable paths(system.value(), PathOptions{});
  for (bool multiNode : {false, true}) {
    SearchOptions options;
    options.useNet = multiNode && system->count(NodeType::kNet) > 0;
    // The search's budget is a parameter; its default (50,000 steps per
    // attempt, dozens of attempts) lets one machine with a broken NVLink
    // search for seconds under the sanitizers, which would leave the fuzzer
    // few executions. The code searched is the same.
    options.stepBudget = 2000;
    auto ring = searchRingGraph(system.value(), paths, options);
    if (!ring.isOk()) {
      PLAIT_FUZZ_CHECK(!ring.status().message().empty());
      continue;
    }
    if (ring->channels.empty()) continue;  // no GPU
    PLAIT_FUZZ_CHECK(validateGraph(system.value(), ring.value(), options.useNet).isOk());
    const NodeGraph tree = treeGraphFromRing(ring.value());
    PLAIT_FUZZ_CHECK(validateGraph(system.value(), tree, options.useNet).isOk());
    (void)ring->describe();
    (void)toDot(system.value(), ring.value());
    auto read = graphsFromXml(system.value(), graphsToXml(system.value(), {ring.value(), tree}));
    PLAIT_FUZZ_CHECK(read.isOk() && read->size() == 2 && sameChannels(read.value()[0], ring.value()) &&
          sameChannels(read.value()[1], tree));
  }
  return 0;
}
