// XML: lossless round trips, the schema's facts, merge, and graph XML.
#include <catch2/catch.hpp>

#include "machines.h"
#include "topology/detect.h"
#include "topology/graph_xml.h"
#include "topology/search.h"

using namespace plait::topo;
using namespace plait::topo::test;

namespace {

const char* kMachines[] = {"dgx1_v100.xml", "dgx_a100.xml", "hgx_h100.xml", "pcie_4gpu_2socket.xml", "cpu_2socket.xml"};

}  // namespace

TEST_CASE("every described machine round-trips through XML without loss", "[topology][xml]") {
  for (const char* name : kMachines) {
    CAPTURE(name);
    auto xml = readXmlFile(dataPath(name));
    REQUIRE(xml.isOk());
    std::string text = writeXml(*xml);
    auto again = parseXml(text);
    REQUIRE(again.isOk());
    CHECK(*again == *xml);
    CHECK(writeXml(*again) == text);
    // The model built from the dump is the model built from the file.
    TopoSystem a = loadMachine(name);
    TopoSystem b = systemFromText(writeXml(a.xml));
    REQUIRE(a.nodes.size() == b.nodes.size());
    REQUIRE(a.links.size() == b.links.size());
    for (size_t i = 0; i < a.links.size(); ++i) {
      CHECK(a.links[i].type == b.links[i].type);
      CHECK(a.links[i].bw == Approx(b.links[i].bw));
    }
  }
}

TEST_CASE("attributes and elements Plait does not model survive a round trip", "[topology][xml]") {
  const std::string text =
      "<system version=\"1\" extra=\"kept\">\n"
      "  <cpu numaid=\"0\" host_hash=\"0xabc\" affinity=\"ff\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"25\" modelid=\"1\">\n"
      "    <pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\" future=\"x\">\n"
      "      <pcilink target=\"0000:02:00.0\"/>\n"
      "      <somethingnew a=\"1\" b=\"2\"/>\n"
      "    </pci>\n"
      "  </cpu>\n"
      "</system>\n";
  auto xml = parseXml(text);
  REQUIRE(xml.isOk());
  auto again = parseXml(writeXml(*xml));
  REQUIRE(again.isOk());
  CHECK(*again == *xml);
  CHECK(again->attrOr("extra", "") == "kept");
  const XmlNode& pci = again->children[0].children[0];
  CHECK(pci.attrOr("future", "") == "x");
  CHECK(pci.children[1].name == "somethingnew");
  CHECK(pci.children[1].attrs[1].first == "b");
}

TEST_CASE("malformed or foreign documents are refused with a reason", "[topology][xml]") {
  auto bad = parseXml("<system><cpu></system>");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().code() == plait::Code::kInvalidArgument);
  auto root = parseXml("<graphs version=\"1\"/>");
  REQUIRE(root.isOk());
  auto sys = buildSystem(*root);
  REQUIRE_FALSE(sys.isOk());
  CHECK(sys.status().message().find("expected <system>") != std::string::npos);
  auto dangling = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\">"
      "<pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\">"
      "<gpu dev=\"0\" sm=\"70\" rank=\"0\" gdr=\"1\"><nvlink target=\"0000:09:00.0\" count=\"1\" tclass=\"0x030200\"/></gpu>"
      "</pci></cpu></system>");
  REQUIRE(dangling.isOk());
  auto sys2 = buildSystem(*dangling);
  REQUIRE_FALSE(sys2.isOk());
  CHECK(sys2.status().message().find("0000:09:00.0") != std::string::npos);
  CHECK(readXmlFile("/nonexistent/topo.xml").status().code() == plait::Code::kSystemError);
}

TEST_CASE("bandwidths are NCCL's", "[topology][xml]") {
  CHECK(pciBw("8.0 GT/s PCIe", 16) == Approx(12.0));
  CHECK(pciBw("8 GT/s", 16) == Approx(12.0));
  CHECK(pciBw("16.0 GT/s PCIe", 16) == Approx(24.0));
  CHECK(pciBw("32.0 GT/s PCIe", 16) == Approx(48.0));
  CHECK(pciBw("2.5 GT/s", 1) == Approx(15.0 / 80));
  CHECK(pciBw("", 0) == Approx(12.0));  // unknown: Gen3 x16
  CHECK(nvlinkBw(60) == Approx(18.0));
  CHECK(nvlinkBw(70) == Approx(20.0));
  CHECK(nvlinkBw(80) == Approx(20.0));
  CHECK(nvlinkBw(86) == Approx(12.0));
  CHECK(nvlinkBw(90) == Approx(20.6));
  TopoSystem a100 = loadMachine("dgx_a100.xml");
  CHECK(a100.count(NodeType::kGpu) == 8);
  CHECK(a100.count(NodeType::kNvs) == 1);
  CHECK(a100.count(NodeType::kNet) == 8);
  CHECK(a100.net(0).net.bw == Approx(25.0));  // 200 Gb/s
  CHECK(a100.outBw(a100.of(NodeType::kGpu)[0], LinkType::kNvl) == Approx(240.0));  // 12 links x 20
  TopoSystem dgx1 = loadMachine("dgx1_v100.xml");
  CHECK(dgx1.count(NodeType::kNvs) == 0);
  CHECK(dgx1.outBw(dgx1.of(NodeType::kGpu)[0], LinkType::kNvl) == Approx(120.0));  // 6 links x 20
  const TopoNode& cpu0 = dgx1.nodes[dgx1.of(NodeType::kCpu)[0]];
  int sysLink = dgx1.findLink(dgx1.of(NodeType::kCpu)[0], dgx1.of(NodeType::kCpu)[1]);
  REQUIRE(sysLink >= 0);
  CHECK(cpu0.cpu.modelId == 79);
  CHECK(dgx1.links[sysLink].bw == Approx(kBwQpi));  // Broadwell
  TopoSystem cpu = loadMachine("cpu_2socket.xml");
  sysLink = cpu.findLink(cpu.of(NodeType::kCpu)[0], cpu.of(NodeType::kCpu)[1]);
  CHECK(cpu.links[sysLink].bw == Approx(kBwAmdFabric));
}

TEST_CASE("detection completes a user's file without overriding it", "[topology][xml]") {
  auto user = parseXml("<system version=\"1\"><cpu numaid=\"0\" arch=\"mine\"/></system>");
  auto detected = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\"><pci busid=\"0000:01:00.0\"/></cpu>"
      "<cpu numaid=\"1\" arch=\"x86_64\"/></system>");
  REQUIRE(user.isOk());
  REQUIRE(detected.isOk());
  XmlNode merged = *user;
  mergeSystemXml(merged, *detected);
  REQUIRE(merged.children.size() == 2);
  CHECK(merged.children[0].attrOr("arch", "") == "mine");
  CHECK(merged.children[0].attrOr("vendor", "") == "GenuineIntel");
  CHECK(merged.children[0].children.size() == 1);
  CHECK(merged.children[1].attrOr("numaid", "") == "1");
}

TEST_CASE("graph XML round-trips and reads NCCL's form", "[topology][xml][graph]") {
  TopoSystem sys = loadMachine("dgx_a100.xml");
  NodeGraph g;
  g.speedIntra = g.speedInter = 24;
  g.typeIntra = PathType::kNvl;
  g.typeInter = PathType::kPix;
  g.channels.push_back({0, {0, 1, 2, 3, 4, 5, 6, 7}, 0});
  g.channels.push_back({1, {1, 0, 3, 2, 5, 4, 7, 6}, 1});
  XmlNode xml = graphsToXml(sys, {g, treeGraphFromRing(g)});
  auto parsed = parseXml(writeXml(xml));
  REQUIRE(parsed.isOk());
  auto graphs = graphsFromXml(sys, *parsed);
  REQUIRE(graphs.isOk());
  REQUIRE(graphs->size() == 2);
  const NodeGraph& ring = (*graphs)[0];
  CHECK(ring.pattern == GraphPattern::kRing);
  CHECK(ring.speedIntra == Approx(24));
  CHECK(ring.typeInter == PathType::kPix);
  REQUIRE(ring.channels.size() == 2);
  CHECK(ring.channels[1].gpus == g.channels[1].gpus);
  CHECK(ring.channels[1].netIn == 1);
  CHECK((*graphs)[1].pattern == GraphPattern::kBalancedTree);

  const std::string nccl =
      "<graphs version=\"1\">\n"
      "  <graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"40\" speedinter=\"24\" "
      "latencyinter=\"0\" typeintra=\"NVL\" typeinter=\"PIX\" samechannels=\"0\">\n"
      "    <channel><net dev=\"3\"/><gpu dev=\"3\"/><gpu dev=\"2\"/><gpu dev=\"1\"/><gpu dev=\"0\"/>"
      "<gpu dev=\"7\"/><gpu dev=\"6\"/><gpu dev=\"5\"/><gpu dev=\"4\"/><net dev=\"3\"/></channel>\n"
      "  </graph>\n</graphs>\n";
  auto ncclXml = parseXml(nccl);
  REQUIRE(ncclXml.isOk());
  auto fromNccl = graphsFromXml(sys, *ncclXml);
  REQUIRE(fromNccl.isOk());
  CHECK((*fromNccl)[0].channels[0].gpus.front() == 3);
  CHECK((*fromNccl)[0].channels[0].netOut == 3);
  CHECK(validateGraph(sys, (*fromNccl)[0], true).isOk());
  CHECK_FALSE(validateGraph(sys, (*fromNccl)[0], false).isOk());

  auto badDev = parseXml("<graphs><graph id=\"0\" nchannels=\"1\"><channel><gpu dev=\"42\"/></channel></graph></graphs>");
  REQUIRE(badDev.isOk());
  CHECK_FALSE(graphsFromXml(sys, *badDev).isOk());
}

TEST_CASE("a detected NIC whose dev the user's file uses gets the next free one", "[topology][xml]") {
  // cpu_2socket.xml's NICs are dev 0 and 1; this host's own (detected) NIC is
  // dev 0 too: merged as is, the topology would name dev 0 twice.
  auto user = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:41:00.0\"><nic><net name=\"eth0\" dev=\"0\"/></nic>"
      "</pci></cpu><cpu numaid=\"1\"><pci busid=\"0000:c1:00.0\"><nic><net name=\"eth1\" dev=\"1\"/></nic></pci></cpu>"
      "</system>");
  auto detected = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:00:03.0\"><nic><net name=\"ens3\" dev=\"0\"/></nic>"
      "</pci></cpu></system>");
  REQUIRE(user.isOk());
  REQUIRE(detected.isOk());
  XmlNode merged = *user;
  mergeSystemXml(merged, *detected);
  REQUIRE(merged.children[0].children.size() == 2);
  const XmlNode& added = merged.children[0].children[1].children[0].children[0];
  CHECK(added.attrOr("name", "") == "ens3");
  CHECK(added.attrOr("dev", "") == "2");
  CHECK(merged.children[0].children[0].children[0].children[0].attrOr("dev", "") == "0");  // the file's keeps its own
  CHECK(buildSystem(merged).isOk());
}
