// Topology files against hostile or broken input (issue 11, item 9): deep
// nesting overflowed the stack, a <node count> sized a vector unchecked,
// numbers that do not fit were cut or ignored, duplicate bus ids were
// accepted silently. Each must now be an InvalidArgument naming the problem.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "machines.h"
#include "topology/topology.h"

using namespace plait;
using namespace plait::topo;
using namespace plait::topo::test;

namespace {

// A file in the test's temporary directory, removed at scope exit.
struct TempFile {
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/plait-topo-XXXXXX";
    int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

std::string buildError(const std::string& xmlText) {
  auto xml = parseXml(xmlText);
  if (!xml.isOk()) return xml.status().message();
  auto sys = buildSystem(*xml);
  return sys.isOk() ? "" : sys.status().message();
}

const char* kGpuSystem = R"(<system version="1"><cpu numaid="0" affinity="ffffffff">
  <pci %ATTR% busid="0000:01:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
    <gpu %GPU% dev="0" sm="80"/></pci>
  <pci busid="%BUS%" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="1" sm="80"/></pci>
</cpu></system>)";

// The attributes given come first in their element, so they are the ones read.
std::string gpuSystem(const std::string& pciAttr, const std::string& gpuAttr, const std::string& secondBus) {
  std::string s = kGpuSystem;
  auto put = [&](const std::string& key, const std::string& value) { s.replace(s.find(key), key.size(), value); };
  put("%ATTR%", pciAttr);
  put("%GPU%", gpuAttr);
  put("%BUS%", secondBus);
  return s;
}

}  // namespace

TEST_CASE("XML nested 50000 deep is refused, not a stack overflow", "[topology][hostile]") {
  std::string deep;
  for (int i = 0; i < 50000; ++i) deep += "<a>";
  for (int i = 0; i < 50000; ++i) deep += "</a>";
  auto xml = parseXml("<system>" + deep + "</system>");
  REQUIRE_FALSE(xml.isOk());
  CHECK(xml.status().message().find("deeper than 64") != std::string::npos);
  std::string ok;  // the limit itself parses
  for (int i = 1; i < kMaxXmlDepth; ++i) ok += "<a>";
  for (int i = 1; i < kMaxXmlDepth; ++i) ok += "</a>";
  CHECK(parseXml("<system>" + ok + "</system>").isOk());
  TempFile file("<system>" + deep + "</system>");
  auto fromFile = loadCluster(file.path, 1);
  REQUIRE_FALSE(fromFile.isOk());
  CHECK(fromFile.status().message().find(file.path) != std::string::npos);
}

TEST_CASE("A cluster's host count must be a whole number in range", "[topology][hostile]") {
  for (const char* count : {"1e11", "100000000000", "0", "-3", "4x", "99999999999999999999"}) {
    CAPTURE(count);
    TempFile file(std::string("<cluster><node file=\"") + dataPath("cpu_2socket.xml") + "\" count=\"" + count +
                  "\"/></cluster>");
    auto c = loadCluster(file.path, 0);
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().code() == Code::kInvalidArgument);
    CHECK(c.status().message().find(std::string("count=\"") + count) != std::string::npos);
  }
  TempFile many(std::string("<cluster><node file=\"") + dataPath("cpu_2socket.xml") + "\" count=\"1000000\"/><node file=\"" +
                dataPath("cpu_2socket.xml") + "\" count=\"1000000\"/></cluster>");
  auto c = loadCluster(many.path, 0);
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().message().find("hosts in all") != std::string::npos);
  CHECK_FALSE(loadCluster(dataPath("cpu_2socket.xml"), int(kMaxClusterHosts) + 1).isOk());
  TempFile four(std::string("<cluster><node file=\"") + dataPath("cpu_2socket.xml") + "\" count=\" 4 \"/></cluster>");
  auto good = loadCluster(four.path, 0);
  REQUIRE(good.isOk());
  CHECK(good->hosts() == 4);
}

TEST_CASE("Numbers that do not fit are errors naming the attribute", "[topology][hostile]") {
  CHECK(buildError(gpuSystem("", "", "0000:02:00.0")) == "");
  CHECK(buildError(gpuSystem("link_width=\"4294967312\"", "", "0000:02:00.0")).find("link_width") !=
        std::string::npos);
  CHECK(buildError(gpuSystem("", "dev=\"99999999999999999999\"", "0000:02:00.0")).find("dev=") != std::string::npos);
  CHECK(buildError(gpuSystem("", "sm=\"8e1\"", "0000:02:00.0")).find("sm=") != std::string::npos);
  CHECK(buildError(gpuSystem("vendor=\"0x1ffff\"", "", "0000:02:00.0")).find("vendor") != std::string::npos);
  const std::string nvlink = R"(<system version="1"><cpu numaid="0" affinity="ff">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="80"><nvlink target="0000:02:00.0" count="2147483648"/></gpu></pci>
    <pci busid="0000:02:00.0" class="0x030200"><gpu dev="1" sm="80"/></pci></cpu></system>)";
  CHECK(buildError(nvlink).find("count=") != std::string::npos);
  const std::string net = R"(<system version="1"><cpu numaid="0" affinity="ff"><nic>
    <net name="eth0" dev="0" speed="1e400" port="1"/></nic></cpu></system>)";
  CHECK(buildError(net).find("speed=") != std::string::npos);
}

TEST_CASE("A bus id that appears twice is an error", "[topology][hostile]") {
  std::string err = buildError(gpuSystem("", "", "0000:01:00.0"));
  CHECK(err.find("0000:01:00.0 appears twice") != std::string::npos);
  err = buildError(gpuSystem("", "", "0000:01:00.0 "));  // distinct text, distinct id
  CHECK(err == "");
}

// Regression (tests/fuzz, topology_xml): two GPUs with one dev were
// accepted, and a graph written for that system read back naming the first
// GPU for both.
TEST_CASE("A GPU or NET dev that appears twice is an error", "[topology][hostile]") {
  const std::string gpus = R"(<system version="1"><cpu numaid="0" affinity="ff">
    <pci busid="0000:01:00.0" class="0x030200"><gpu dev="0" sm="80"/></pci>
    <pci busid="0000:02:00.0" class="0x030200"><gpu dev="0" sm="80"/></pci></cpu></system>)";
  CHECK(buildError(gpus).find("<gpu> dev=0 appears twice") != std::string::npos);
  const std::string nets = R"(<system version="1"><cpu numaid="0" affinity="ff"><nic>
    <net name="eth0" dev="3" speed="10000" port="1"/><net name="eth1" dev="3" speed="10000" port="1"/></nic></cpu></system>)";
  CHECK(buildError(nets).find("<net> dev=3 appears twice") != std::string::npos);
  for (const char* machine : {"dgx_a100.xml", "hgx_h100.xml", "dgx1_v100.xml", "pcie_4gpu_2socket.xml"})
    CHECK(loadMachine(machine).count(NodeType::kGpu) > 0);
}

TEST_CASE("The NUMA node of a CPU comes from the <cpu> affinity masks", "[topology][hostile]") {
  TopoSystem sys = loadMachine("cpu_2socket.xml");  // NUMA 0: CPUs 0-31, NUMA 1: CPUs 32-63
  CHECK(numaNodeOfCpu(sys, 0) == 0);
  CHECK(numaNodeOfCpu(sys, 31) == 0);
  CHECK(numaNodeOfCpu(sys, 32) == 1);
  CHECK(numaNodeOfCpu(sys, 63) == 1);
  CHECK(numaNodeOfCpu(sys, 64) == -1);
  CHECK(numaNodeOfCpu(sys, -1) == -1);
  {
    ScopedEnv file("NCCL_TOPO_FILE", dataPath("cpu_2socket.xml").c_str());
    CHECK(localTopologyConfigured());
  }
  ScopedEnv none("NCCL_TOPO_FILE", nullptr);
  ScopedEnv dump("NCCL_TOPO_DUMP_FILE", nullptr);
  CHECK_FALSE(localTopologyConfigured());
}
