// GPU memory for GPUDirect RDMA (src/device/net_gpu_memory.cc): zeroed
// device memory with a dmabuf fd, the GPU's flush of RDMA writes, and the
// topology's verdict on NIC distance. Built on the emulator (CI) and, as
// test_net_gpu_memory_gpu, for a real GPU (scripts/gpu_check.sh): where the
// dmabuf is the emulator's memfd this also checks that the fd reaches the
// buffer's bytes; a real GPU's dmabuf cannot be mapped by the CPU.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../scoped_env.h"
#include "device/net_gpu_memory.h"

using namespace plait;

namespace {

#ifdef PLAIT_REAL_GPU
constexpr bool kEmulated = false;
#else
constexpr bool kEmulated = true;
#endif

// A topology with one GPU (bus `gpuBus`) and one NIC "mlx5_0" behind the
// same PCIe switch: the path is PIX, within NCCL_NET_GDR_LEVEL's default PXB.
std::string writeTopology(const std::string& gpuBus) {
  char path[] = "/tmp/plait-gdr-topo-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string xml =
      "<system version=\"1\">\n"
      " <cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"25\" modelid=\"1\">\n"
      "  <pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
      "   <pci busid=\"" + gpuBus + "\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
      "    <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\"/>\n"
      "   </pci>\n"
      "   <pci busid=\"0000:12:00.0\" class=\"0x020700\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
      "    <nic>\n"
      "     <net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" port=\"1\" guid=\"0x1234\" maxconn=\"131072\" gdr=\"1\"/>\n"
      "    </nic>\n"
      "   </pci>\n"
      "  </pci>\n"
      " </cpu>\n"
      "</system>\n";
  REQUIRE(::write(fd, xml.data(), xml.size()) == static_cast<ssize_t>(xml.size()));
  ::close(fd);
  return path;
}

}  // namespace

TEST_CASE("GPUDirect memory: zeroed device memory with a dmabuf of it, and the GPU's flush", "[gdr]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  std::string why;
  std::shared_ptr<NetGpuMemory> gpu = device::makeNetGpuMemory(0, &why);
  INFO(why);
  REQUIRE(gpu != nullptr);
  CHECK_THAT(gpu->description(), Catch::StartsWith("CUDA device 0"));
  auto b = gpu->allocate(10000);
  INFO(b.status().toString());
  REQUIRE(b.isOk());
  CHECK(b->bytes >= 10000);
  CHECK(b->bytes % 4096 == 0);
  CHECK(b->fd >= 0);
  CHECK(b->offset == 0);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, b->ptr) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeDevice);
  std::vector<unsigned char> host(b->bytes, 0xAB);
  REQUIRE(cudaMemcpy(host.data(), b->ptr, b->bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::count(host.begin(), host.end(), 0) == static_cast<long>(host.size()));
  if (kEmulated) {
    // The emulator's dmabuf is the allocation's memfd: what the GPU writes,
    // a NIC (a mapping of the fd) reads, and the other way round.
    void* nic = ::mmap(nullptr, b->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    REQUIRE(nic != MAP_FAILED);
    REQUIRE(cudaMemset(b->ptr, 0x5A, 100) == cudaSuccess);
    CHECK(static_cast<unsigned char*>(nic)[99] == 0x5A);
    static_cast<unsigned char*>(nic)[200] = 0x77;
    unsigned char back = 0;
    REQUIRE(cudaMemcpy(&back, static_cast<char*>(b->ptr) + 200, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == 0x77);
    ::munmap(nic, b->bytes);
  }
  // From a thread that never used the device: the memory object sets it.
  Status flushed;
  std::thread([&] { flushed = gpu->flush(); }).join();
  CHECK(flushed.isOk());
  gpu->release(*b);
}

TEST_CASE("GPUDirect memory: NCCL_NET_GDR_LEVEL against the topology decides whether a NIC is near", "[gdr]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  char bus[32] = {};
  REQUIRE(cudaDeviceGetPCIBusId(bus, sizeof bus, 0) == cudaSuccess);
  std::string lower = bus;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string topo = writeTopology(lower);
  test::ScopedEnv file("NCCL_TOPO_FILE", topo.c_str());
  test::ScopedEnv alone("PLAIT_TOPO_DETECT", "0");  // the file is the whole machine (a GPU host has more)
  std::string why;
  auto gpu = device::makeNetGpuMemory(0, &why);
  REQUIRE(gpu != nullptr);
  PlaitNetProperties props{};
  char ib[] = "mlx5_0:1", other[] = "eth9";
  props.name = ib;
  {
    test::ScopedEnv level("NCCL_NET_GDR_LEVEL", nullptr);
    CHECK(gpu->nearEnough(props) == std::optional<bool>(true));
  }
  {
    test::ScopedEnv level("NCCL_NET_GDR_LEVEL", "LOC");
    CHECK(gpu->nearEnough(props) == std::optional<bool>(false));
  }
  props.name = other;
  CHECK_FALSE(gpu->nearEnough(props).has_value());  // a NIC the topology does not have
  ::unlink(topo.c_str());
}

// PLAIT_EMU_NO_DMABUF is read once per process: ctest runs this case alone
// with it set (test_net_gpu_memory_no_dmabuf); the plain run leaves it out.
TEST_CASE("GPUDirect memory: none where the device cannot export dmabufs", "[no_dmabuf]") {
  REQUIRE(std::getenv("PLAIT_EMU_NO_DMABUF") != nullptr);
  std::string why;
  CHECK(device::makeNetGpuMemory(0, &why) == nullptr);
  CHECK_THAT(why, Catch::Contains("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"));
}
