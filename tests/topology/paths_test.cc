// Paths: types and bottleneck bandwidths as NCCL defines them.
#include <catch2/catch.hpp>

#include "machines.h"

using namespace plait::topo;
using namespace plait::topo::test;

namespace {

const TopoPath& gpuNet(const TopoSystem& sys, const PathTable& paths, int g, int n) {
  return paths.get(sys.of(NodeType::kGpu)[g], sys.of(NodeType::kNet)[n]);
}

}  // namespace

TEST_CASE("hybrid cube mesh: NVL to neighbours, NVB to the rest, PIX/PXN to NICs", "[topology][paths]") {
  TopoSystem sys = loadMachine("dgx1_v100.xml");
  PathTable paths(sys, PathOptions{});
  CHECK(paths.gpuToGpu(0, 0).type == PathType::kLoc);
  CHECK(paths.gpuToGpu(0, 1).type == PathType::kNvl);
  CHECK(paths.gpuToGpu(0, 1).bw == Approx(20));
  CHECK(paths.gpuToGpu(0, 3).bw == Approx(40));  // two NVLinks
  CHECK(paths.gpuToGpu(0, 4).type == PathType::kNvl);
  // 0 and 5 share no NVLink: one hop through GPU 1 or 4.
  const TopoPath& nvb = paths.gpuToGpu(0, 5);
  CHECK(nvb.type == PathType::kNvb);
  CHECK(nvb.bw == Approx(20));
  CHECK(nvb.links.size() == 2);
  CHECK(gpuNet(sys, paths, 0, 0).type == PathType::kPix);
  CHECK(gpuNet(sys, paths, 0, 0).bw == Approx(12));  // PCIe Gen3 below the 12.5 GB/s NIC
  // NIC 1 sits with GPUs 2 and 3, NVLink neighbours of GPU 0: PXN.
  CHECK(gpuNet(sys, paths, 0, 1).type == PathType::kPxn);
  CHECK(gpuNet(sys, paths, 0, 1).bw == Approx(12));

  PathOptions noNvb;
  noNvb.nvbDisable = true;
  noNvb.pxnDisable = true;
  PathTable strict(sys, noNvb);
  CHECK(strict.gpuToGpu(0, 5).type == PathType::kSys);
  CHECK(gpuNet(sys, strict, 0, 1).type == PathType::kPhb);
  CHECK(gpuNet(sys, strict, 0, 2).type == PathType::kSys);
}

TEST_CASE("NVSwitch: every GPU pair is NVL at the full per-GPU bandwidth", "[topology][paths]") {
  TopoSystem sys = loadMachine("hgx_h100.xml");
  PathTable paths(sys, PathOptions{});
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      CHECK(paths.gpuToGpu(a, b).type == PathType::kNvl);
      CHECK(paths.gpuToGpu(a, b).bw == Approx(18 * 20.6));
      CHECK(paths.p2pAllowed(a, b));
    }
    CHECK(gpuNet(sys, paths, a, a).type == PathType::kPix);
    CHECK(gpuNet(sys, paths, a, a).bw == Approx(48));
    CHECK(gpuNet(sys, paths, a, (a + 4) % 8).type == PathType::kPxn);
    CHECK(paths.gdrAllowed(a, a));
    CHECK_FALSE(paths.gdrAllowed(a, (a + 4) % 8));
  }
}

TEST_CASE("PCIe box: PIX under a switch, SYS across sockets, P2P level applies", "[topology][paths]") {
  TopoSystem sys = loadMachine("pcie_4gpu_2socket.xml");
  PathOptions defaults = pathOptionsFromEnv(sys);
  CHECK(defaults.p2pLevel == PathType::kPxb);  // Intel CPUs
  PathTable paths(sys, defaults);
  CHECK(paths.gpuToGpu(0, 1).type == PathType::kPix);
  CHECK(paths.gpuToGpu(0, 1).bw == Approx(24));
  CHECK(paths.gpuToGpu(0, 2).type == PathType::kSys);
  CHECK(paths.gpuToGpu(0, 2).bw == Approx(kBwSklQpi));
  CHECK(paths.p2pAllowed(0, 1));
  CHECK_FALSE(paths.p2pAllowed(0, 2));
  CHECK(gpuNet(sys, paths, 0, 0).type == PathType::kPhb);
  CHECK(gpuNet(sys, paths, 0, 1).type == PathType::kSys);
  {
    ScopedEnv level("NCCL_P2P_LEVEL", "LOC");
    PathOptions opts = pathOptionsFromEnv(sys);
    CHECK(opts.p2pLevel == PathType::kLoc);
    PathTable none(sys, opts);
    CHECK_FALSE(none.p2pAllowed(0, 1));
    // Staged through the CPU now.
    CHECK(none.gpuToGpu(0, 1).type == PathType::kPhb);
  }
  {
    ScopedEnv level("NCCL_P2P_LEVEL", "SYS");
    CHECK(PathTable(sys, pathOptionsFromEnv(sys)).p2pAllowed(0, 2));
  }
  {
    ScopedEnv level("NCCL_P2P_LEVEL", "2");  // NCCL's legacy number for PXB
    CHECK(pathOptionsFromEnv(sys).p2pLevel == PathType::kPxb);
  }
  {
    ScopedEnv disable("NCCL_P2P_DISABLE", "1");
    CHECK(pathOptionsFromEnv(sys).p2pLevel == PathType::kLoc);
  }
}

TEST_CASE("two PCIe switches in a row make PXB", "[topology][paths]") {
  const char* kBoard =
      "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"23\" modelid=\"49\">"
      "<pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">"
      "  <pci busid=\"0000:11:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">"
      "    <pci busid=\"0000:12:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"/></pci>"
      "  </pci>"
      "  <pci busid=\"0000:13:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" link_width=\"8\">"
      "    <pci busid=\"0000:14:00.0\" class=\"0x030200\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"><gpu dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"/></pci>"
      "  </pci>"
      "</pci></cpu></system>";
  TopoSystem sys = systemFromText(kBoard);
  PathTable paths(sys, pathOptionsFromEnv(sys));
  CHECK(paths.gpuToGpu(0, 1).type == PathType::kPxb);
  CHECK(paths.gpuToGpu(0, 1).bw == Approx(12));  // the x8 switch uplink
  CHECK(paths.p2pAllowed(0, 1));
}

TEST_CASE("CPU-only box: NICs are PHB from their socket, SYS from the other", "[topology][paths]") {
  TopoSystem sys = loadMachine("cpu_2socket.xml");
  PathTable paths(sys, pathOptionsFromEnv(sys));
  const auto& cpus = sys.of(NodeType::kCpu);
  const auto& nets = sys.of(NodeType::kNet);
  CHECK(paths.get(cpus[0], nets[0]).type == PathType::kPhb);
  CHECK(paths.get(cpus[0], nets[1]).type == PathType::kSys);
  CHECK(paths.get(cpus[0], nets[1]).bw == Approx(12.5));  // the 100 Gb/s NIC, below the 16 GB/s fabric
  std::string matrix = pathMatrix(sys, paths);
  CHECK(matrix.find("CPU0") != std::string::npos);
  CHECK(matrix.find("SYS") != std::string::npos);
  CHECK(describePath(sys, paths.get(cpus[0], nets[1])).find("SYS/12.5") == 0);
}
