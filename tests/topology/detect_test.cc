// Detection on this host, NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE, DOT output.
#include <unistd.h>

#include <cstdio>

#include <catch2/catch.hpp>

#include "machines.h"
#include "topology/detect.h"
#include "topology/dot.h"
#include "topology/topology.h"

using namespace plait::topo;
using namespace plait::topo::test;

TEST_CASE("this host is detected and builds a model", "[topology][detect]") {
  auto xml = detectSystemXml();
  REQUIRE(xml.isOk());
  CHECK(xml->name == "system");
  REQUIRE(xml->child("cpu") != nullptr);
  CHECK_FALSE(xml->child("cpu")->attrOr("arch", "").empty());
  auto sys = buildSystem(*xml);
  REQUIRE(sys.isOk());
  CHECK(sys->count(NodeType::kCpu) >= 1);
  // Without NVML there are no GPUs, and that is not an error.
  if (detectNvmlGpus().empty()) CHECK(sys->count(NodeType::kGpu) == 0);
  CHECK(std::string(cpuDetectionSource()).size() > 0);
  PathTable paths(*sys, pathOptionsFromEnv(*sys));
  CHECK(pathMatrix(*sys, paths).find("CPU0") != std::string::npos);
}

TEST_CASE("NCCL_TOPO_FILE replaces or completes detection, NCCL_TOPO_DUMP_FILE writes it", "[topology][detect]") {
  std::string dump = "/tmp/plait_topo_dump_" + std::to_string(getpid()) + ".xml";
  ScopedEnv file("NCCL_TOPO_FILE", dataPath("dgx_a100.xml").c_str());
  ScopedEnv out("NCCL_TOPO_DUMP_FILE", dump.c_str());
  {
    ScopedEnv replace("PLAIT_TOPO_DETECT", "0");
    auto sys = loadLocalSystem();
    REQUIRE(sys.isOk());
    CHECK(sys->count(NodeType::kGpu) == 8);
    auto original = readXmlFile(dataPath("dgx_a100.xml"));
    auto dumped = readXmlFile(dump);
    REQUIRE(original.isOk());
    REQUIRE(dumped.isOk());
    CHECK(*dumped == *original);  // lossless
  }
  {
    auto sys = loadLocalSystem();
    REQUIRE(sys.isOk());
    CHECK(sys->count(NodeType::kGpu) == 8);                  // the file's GPUs stay
    CHECK(sys->count(NodeType::kNet) >= 8);                  // detected NICs are added
    auto dumped = readXmlFile(dump);
    REQUIRE(dumped.isOk());
    CHECK(buildSystem(*dumped).isOk());
  }
  std::remove(dump.c_str());
}

TEST_CASE("DOT output draws the machine and its rings", "[topology][dot]") {
  TopoSystem sys = loadMachine("dgx1_v100.xml");
  NodeGraph g;
  g.channels.push_back({-1, {0, 1, 2, 3, 7, 6, 5, 4}, -1});
  std::string dot = toDot(sys, g, {8, "DGX-1"});
  CHECK(dot.rfind("digraph topology {", 0) == 0);
  CHECK(dot.find("label=\"c0\"") != std::string::npos);
  CHECK(dot.find("NVL 40") != std::string::npos);
  CHECK(dot.back() == '\n');
}
