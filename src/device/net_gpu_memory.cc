// net_gpu_memory.cc — GPU memory for the device path's network step buffers
// (GPUDirect RDMA, transport/net/net_transport.h's NetGpuMemory): cudaMalloc
// memory exported as a dmabuf (cuMemGetHandleForAddressRange), which a
// network plugin registers with regMrDmaBuf (ibv_reg_dmabuf_mr); the GPU's
// flush of RDMA writes (cuFlushGPUDirectRDMAWrites) for plugins without an
// iflush of their own. UNVERIFIED ON HARDWARE: run here on the emulator,
// whose dmabuf is the allocation's memfd (emu/runtime/vmm.cc).
#include "device/net_gpu_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>

#include "base/cuda_probe.h"
#include "device/driver_api.h"
#include "device/scoped_device.h"
#include "topology/topology.h"

namespace plait::device {
namespace {

// dmabufs cover whole host pages.
constexpr size_t kPageBytes = 4096;

Status cudaFailure(cudaError_t err, const std::string& what) {
  (void)cudaGetLastError();
  return systemError(what + ": " + cudaGetErrorString(err));
}

// The topology's NET node for the plugin's device: the same name (IB's
// "mlx5_0:1" is NIC "mlx5_0", port 1) or GUID.
int netOrdinal(const topo::TopoSystem& system, const PlaitNetProperties& props) {
  const std::string name = props.name ? props.name : "";
  const std::string nic = name.substr(0, name.find(':'));
  const std::vector<int>& nets = system.of(topo::NodeType::kNet);
  for (size_t n = 0; n < nets.size(); ++n) {
    const topo::NetInfo& info = system.nodes[nets[n]].net;
    if ((!nic.empty() && (info.name == name || info.name == nic)) || (props.guid != 0 && info.guid == props.guid))
      return static_cast<int>(n);
  }
  return -1;
}

class CudaNetGpuMemory final : public NetGpuMemory {
 public:
  CudaNetGpuMemory(int device, std::string busId) : device_(device), busId_(std::move(busId)) {}

  std::string description() const override { return "CUDA device " + std::to_string(device_) + " (" + busId_ + ")"; }

  Result<Buffer> allocate(size_t bytes) override {
    const DriverApi& d = driverApi();
    const size_t size = (std::max<size_t>(bytes, 1) + kPageBytes - 1) / kPageBytes * kPageBytes;
    ScopedDevice scope(device_);
    void* ptr = nullptr;
    if (cudaError_t err = cudaMalloc(&ptr, size); err != cudaSuccess)
      return cudaFailure(err, "cudaMalloc of " + std::to_string(size) + " bytes");
    Buffer b{ptr, size, -1, 0};
    if (cudaError_t err = cudaMemset(ptr, 0, size); err != cudaSuccess) {
      (void)cudaFree(ptr);
      return cudaFailure(err, "cudaMemset");
    }
    int fd = -1;
    const CUresult r = d.getHandleForAddressRange(&fd, reinterpret_cast<CUdeviceptr>(ptr), size,
                                                  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS || fd < 0) {
      (void)cudaFree(ptr);
      return systemError(driverFailure("cuMemGetHandleForAddressRange (dmabuf)", r));
    }
    b.fd = fd;
    return b;
  }

  void release(const Buffer& b) override {
    if (b.fd >= 0) ::close(b.fd);
    ScopedDevice scope(device_);
    if (b.ptr != nullptr && cudaFree(b.ptr) != cudaSuccess) (void)cudaGetLastError();
  }

  Status flush() override {
    const DriverApi& d = driverApi();
    if (d.flushRdmaWrites == nullptr) return Status::ok();  // the driver orders remote writes itself
    ScopedDevice scope(device_);
    const CUresult r = d.flushRdmaWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                         CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
    return r == CUDA_SUCCESS ? Status::ok() : systemError(driverFailure("cuFlushGPUDirectRDMAWrites", r));
  }

  std::optional<bool> nearEnough(const PlaitNetProperties& props) const override {
    auto system = topo::loadLocalSystem();
    if (!system.isOk()) return std::nullopt;
    const std::vector<int> gpus = system->of(topo::NodeType::kGpu);
    int gpu = -1;
    for (size_t g = 0; g < gpus.size(); ++g)
      if (strcasecmp(system->nodes[gpus[g]].busId.c_str(), busId_.c_str()) == 0) gpu = static_cast<int>(g);
    const int net = netOrdinal(*system, props);
    if (gpu < 0 || net < 0) return std::nullopt;
    const topo::PathTable paths(*system, topo::pathOptionsFromEnv(*system));
    return paths.gdrAllowed(gpu, net);
  }

 private:
  int device_;
  std::string busId_;
};

}  // namespace

std::shared_ptr<NetGpuMemory> makeNetGpuMemory(int cudaDev, std::string* why) {
  const DriverApi& d = driverApi();
  if (d.getHandleForAddressRange == nullptr) {
    *why = d.dmabufMissing;
    return nullptr;
  }
  int supported = 0;
  if (d.getAttribute == nullptr ||
      d.getAttribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cudaDev) != CUDA_SUCCESS || !supported) {
    *why = "CUDA device " + std::to_string(cudaDev) + " cannot export its memory as a dmabuf "
           "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: a driver or kernel without dmabuf support)";
    return nullptr;
  }
  char busId[32] = {};
  cuda::busIdOf(cudaDev, busId, sizeof busId);
  return std::make_shared<CudaNetGpuMemory>(cudaDev, busId);
}

}  // namespace plait::device
