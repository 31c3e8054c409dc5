// device_path.cc — the communicator's side of the CUDA executor: at init,
// every rank says which device it has and whether it can run kernels; when
// all can, they connect a second set of ring FIFOs for the kernels alone —
// in shared host memory between ranks of one host, network connectors driven
// by a proxy thread to ranks on other hosts — and hand them to the backend
// (src/device/), which puts FIFOs in GPU memory where devices reach each
// other (transport/p2p/). A device task is then planned like a host one (the
// tuner's ring plan) and enqueued.
//
// Why separate FIFOs: a host FifoSender/FifoReceiver caches its step
// counters, so a kernel advancing the same control words would desynchronise
// them. Device and host collectives on one communicator use different rings.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <strings.h>

#include "base/config.h"
#include "base/cuda_probe.h"
#include "base/log.h"
#include "core/comm.h"
#include "topology/topology.h"

namespace plait {

PLAIT_PARAM_INT(kAllowSharedDevice, "ALLOW_SHARED_DEVICE", 0,
                "1 lets several ranks use one CUDA device (testing on a machine with fewer GPUs than ranks): the "
                "kernels of those ranks must run at the same time, which separate processes get by time-slicing "
                "and threads of one process only on non-blocking streams");

PLAIT_PARAM_INT(kDeviceChannels, "DEVICE_NCHANNELS", 16,
                "channels the device path connects at init (1..32): a device collective uses one thread block per "
                "channel and rank, one channel per 256 KiB of its buffer up to this many");

// Whether every rank can take part in device collectives, as a status whose
// message says why not (the same on every rank: it is computed from what all
// of them sent).
Status Communicator::deviceUnavailableReason(const std::vector<DeviceIdentity>& ids) const {
  if (deviceBackendFactory() == nullptr)
    return invalidUsage("this build of Plait has no CUDA executor (configure with PLAIT_WITH_CUDA=ON, or "
                        "PLAIT_DEVICE_EMULATION=ON for the CPU emulator)");
  for (int r = 0; r < nranks_; ++r)
    if (!ids[r].usable)
      return invalidUsage("rank " + std::to_string(r) +
                          " has no CUDA device or runtime (its process has no CUDA executor, or cudaGetDevice failed "
                          "when it created the communicator)");
  const bool allowShared =
      std::all_of(ids.begin(), ids.end(), [](const DeviceIdentity& id) { return id.allowShared != 0; });
  for (int a = 0; a < nranks_ && !allowShared; ++a)
    for (int b = a + 1; b < nranks_; ++b) {
      if (bootstrap_->peer(a).hostHash != bootstrap_->peer(b).hostHash) continue;  // other hosts, other devices
      const bool sameBus = ids[a].busId[0] != '\0' && std::strncmp(ids[a].busId, ids[b].busId, sizeof(ids[a].busId)) == 0;
      if (sameBus || (ids[a].busId[0] == '\0' && ids[a].cudaDev == ids[b].cudaDev))
        return invalidUsage("ranks " + std::to_string(a) + " and " + std::to_string(b) + " share CUDA device " +
                            std::to_string(ids[a].cudaDev) + " (" + ids[a].busId +
                            "); as in NCCL, each rank needs its own device (cudaSetDevice before creating the "
                            "communicator), unless every rank sets PLAIT_ALLOW_SHARED_DEVICE=1");
    }
  return Status::ok();
}

// Per rank: why NCCL_P2P_DISABLE or NCCL_P2P_LEVEL forbid this rank's
// kernels a direct (P2P) path to it, or "" when they allow one. The level is
// judged on this host's topology (NCCL_TOPO_FILE and detection) when it
// knows both GPUs; where it does not, only LOC is enforced (the same device),
// and the runtime's cudaDeviceCanAccessPeer decides the rest.
std::vector<std::string> Communicator::p2pRefusals(const std::vector<DeviceIdentity>& ids) const {
  std::vector<std::string> why(nranks_);
  const char* mine = ids[rank_].busId;
  const bool otherDevices = std::any_of(ids.begin(), ids.end(), [&](const DeviceIdentity& id) {
    return std::strncmp(id.busId, mine, sizeof(id.busId)) != 0;
  });
  std::optional<topo::TopoSystem> system;
  if (otherDevices) {
    auto loaded = topo::loadLocalSystem();
    if (loaded.isOk()) system = std::move(loaded).value();
  }
  const topo::PathOptions options = topo::pathOptionsFromEnv(system ? *system : topo::TopoSystem{});
  std::optional<topo::PathTable> paths;
  auto gpuOrdinal = [&](const char* busId) {
    if (!system) return -1;
    const std::vector<int> gpus = system->of(topo::NodeType::kGpu);
    for (size_t g = 0; g < gpus.size(); ++g)
      if (strcasecmp(system->nodes[gpus[g]].busId.c_str(), busId) == 0) return static_cast<int>(g);
    return -1;
  };
  const int me = gpuOrdinal(mine);
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    if (bootstrap_->peer(r).hostHash != bootstrap_->peer(rank_).hostHash) {
      why[r] = "rank " + std::to_string(r) + " is on another host";
      continue;
    }
    if (options.p2pDisable) {
      why[r] = "NCCL_P2P_DISABLE=1";
      continue;
    }
    const bool sameDevice = std::strncmp(ids[r].busId, mine, sizeof(ids[r].busId)) == 0;
    if (sameDevice) continue;
    const int peer = gpuOrdinal(ids[r].busId);
    if (me >= 0 && peer >= 0) {
      if (!paths) paths.emplace(*system, options);
      if (!paths->p2pAllowed(me, peer))
        why[r] = std::string("the path between the GPUs is ") + topo::pathTypeName(paths->gpuToGpu(me, peer).type) +
                 ", beyond NCCL_P2P_LEVEL " + topo::pathTypeName(options.p2pLevel);
    } else if (options.p2pLevel == topo::PathType::kLoc) {
      why[r] = "NCCL_P2P_LEVEL=LOC and the ranks are on different devices";
    }
  }
  return why;
}

// GPU memory the device path's network connectors may put their steps in
// (GPUDirect RDMA), when some rank is on another host and this build's CUDA
// side can export it; the transport decides per network (PLAIT_NET_GDR).
std::shared_ptr<NetGpuMemory> Communicator::netGpuMemory(const std::vector<uint64_t>& hostOf) const {
  const bool remote = std::any_of(hostOf.begin(), hostOf.end(), [&](uint64_t h) { return h != hostOf[rank_]; });
  const NetGpuMemoryFactory make = netGpuMemoryFactory();
  if (!remote || make == nullptr) return nullptr;
  std::string why;
  std::shared_ptr<NetGpuMemory> gpu = make(cudaDev_, &why);
  if (!gpu) PLAIT_INFO(kInit | ::plait::log::kNet, "rank %d: no GPUDirect RDMA: %s", rank_, why.c_str());
  return gpu;
}

Status Communicator::connectDevice(OobExchange& oob, const ShmTransportOptions& hostOptions,
                                   const std::vector<uint64_t>& hostOf, Deadline deadline) {
  // Checked in every build, so a bad value is found where it is set, not on
  // the first machine with a GPU.
  const int64_t wanted = kDeviceChannels.get();
  if (wanted < 1 || wanted > kDeviceChannelLimit)
    return invalidArgument("PLAIT_DEVICE_NCHANNELS=" + std::to_string(wanted) + ": the device path connects 1 to " +
                           std::to_string(kDeviceChannelLimit) + " channels");
  deviceChannels_ = static_cast<int>(wanted);
  std::vector<DeviceIdentity> ids(nranks_);
  std::memset(static_cast<void*>(ids.data()), 0, ids.size() * sizeof(DeviceIdentity));  // no garbage to peers
  DeviceIdentity& mine = ids[rank_];
  if (cudaDev_ < 0 && deviceBackendFactory() != nullptr) {
    static std::once_flag said;
    std::call_once(said, [] {
      PLAIT_INFO(kInit, "this process sees no CUDA device (no driver, no device, or none selected): "
                        "collectives on host memory only");
    });
  }
  mine.cudaDev = cudaDev_;
  mine.usable = deviceBackendFactory() != nullptr && cudaDev_ >= 0 ? 1 : 0;
  mine.allowShared = kAllowSharedDevice.get() == 1 ? 1 : 0;
  if (cudaDev_ >= 0) cuda::busIdOf(cudaDev_, mine.busId, sizeof(mine.busId));
  PLAIT_RETURN_IF_ERROR(oob.allGather(ids.data(), sizeof(DeviceIdentity), deadline));
  for (DeviceIdentity& id : ids) id.busId[sizeof(id.busId) - 1] = '\0';
  devices_ = ids;
  deviceUnavailable_ = deviceUnavailableReason(ids);
  if (!deviceUnavailable_.isOk()) {
    PLAIT_INFO(kInit, "rank %d: no device collectives: %s", rank_, deviceUnavailable_.message().c_str());
    return Status::ok();
  }

  // Every rank gets here (the decision above is the same everywhere).
  // Device channels reuse the host's rings in turn: the kernels want more
  // channels (thread blocks) than the host has cores to drive.
  const int hostChannels = hostOptions.nChannels;
  ShmTransportOptions so = hostOptions;
  so.nChannels = deviceChannels_;
  so.ringPrev.clear();
  so.ringNext.clear();
  for (int c = 0; c < deviceChannels_; ++c) {
    so.ringPrev.push_back(hostOptions.ringPrev[c % hostChannels]);
    so.ringNext.push_back(hostOptions.ringNext[c % hostChannels]);
  }
  // The kernels slice every point-to-point FIFO alike (CudaExecutor::
  // enqueueP2p): the network connectors take the local ones' shape.
  so.netP2p = so.p2p;
  so.remoteRingSend.clear();
  so.remoteRingRecv.clear();
  so.remoteP2pSend.clear();
  so.remoteP2pRecv.clear();
  so.mesh = FifoShape{1, 4096};  // unused by kernels; the smallest valid shape
  // Edges to other hosts: network connectors whose FIFOs are host memory of
  // this process, which the executor registers and maps like the shared
  // ones. The kernel writes a step there; this transport's proxy thread
  // sends it, and posts what it receives into the receiving FIFO the peer's
  // kernel polls (net_transport.h). Their own connections and proxy: the
  // host's connectors cache their counters, as the shared FIFOs do.
  PLAIT_ASSIGN_OR_RETURN(deviceNet_, connectNetworkEdges(oob, so, hostOf, deadline, netGpuMemory(hostOf)));
  PLAIT_ASSIGN_OR_RETURN(deviceShm_, ShmTransport::connect(oob, so, deadline));

  DeviceBackendSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.cudaDev = cudaDev_;
  for (int c = 0; c < deviceChannels_; ++c) {
    setup.rings.push_back(rings_[c % hostChannels]);
    setup.positions.push_back(ringPositions_[c % hostChannels]);
  }
  setup.timeoutMs = timeoutMs_;
  setup.oob = &oob;
  setup.deadline = deadline;
  setup.pids = pids_;
  for (const DeviceIdentity& id : ids) setup.busIds.emplace_back(id.busId);
  setup.p2pRefusal = p2pRefusals(ids);
  // A FIFO end as the backend maps it (steps apart: a GPUDirect connector's).
  auto fifoOf = [](auto* end, const FifoShape& shape) {
    return end ? DeviceFifoMemory{end->control(), shape, end->detachedSteps()} : DeviceFifoMemory{nullptr, shape};
  };
  for (int c = 0; c < so.nChannels; ++c) {
    setup.recv.push_back(fifoOf(deviceShm_->ringRecv(c), so.ring));
    setup.send.push_back(fifoOf(deviceShm_->ringSend(c), so.ring));
  }
  for (int r = 0; r < nranks_; ++r) {
    setup.p2pSend.push_back(fifoOf(r == rank_ ? nullptr : deviceShm_->p2pSend(r), so.p2p));
    setup.p2pRecv.push_back(fifoOf(r == rank_ ? nullptr : deviceShm_->p2pRecv(r), so.p2p));
  }
  Status created;
  auto backend = deviceBackendFactory()(setup);
  if (backend.isOk()) {
    device_ = std::move(backend).value();
  } else {
    created = backend.takeStatus();
  }
  // A rank whose backend failed (pinned memory, say) would leave the others'
  // kernels waiting on it: all agree, or none runs device collectives.
  std::vector<int32_t> ok(nranks_, 0);
  ok[rank_] = created.isOk() ? 1 : 0;
  PLAIT_RETURN_IF_ERROR(oob.allGather(ok.data(), sizeof(int32_t), deadline));
  for (int r = 0; r < nranks_; ++r) {
    if (ok[r]) continue;
    deviceUnavailable_ = invalidUsage("rank " + std::to_string(r) + " could not set up its CUDA executor" +
                                      (r == rank_ ? ": " + created.message() : std::string()));
    PLAIT_WARN(kInit, "rank %d: no device collectives: %s", rank_, deviceUnavailable_.message().c_str());
    device_.reset();
    deviceShm_.reset();
    deviceNet_.reset();
    return Status::ok();
  }
  PLAIT_INFO(kInit, "rank %d: device collectives on %s", rank_, device_->description().c_str());
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    if (hostOf[r] != hostOf[rank_])
      PLAIT_INFO(kInit, "rank %d -> rank %d: device FIFOs via %s (proxy; %s)", rank_, r,
                 deviceNet_->description().c_str(),
                 deviceNet_->gpuDirect() ? "steps in GPU memory the NIC reaches, control in host memory"
                                         : "FIFOs in host memory mapped for the kernels");
    else
      PLAIT_INFO(kInit, "rank %d -> rank %d: device FIFOs via %s", rank_, r, device_->peerPath(r).c_str());
  }
  return Status::ok();
}

Status Communicator::runOnDevice(const Task& task) {
  if (!device_)
    return Status(deviceUnavailable_.code(), std::string(collName(task.coll)) +
                                                 " on CUDA device buffers: " + deviceUnavailable_.message());
  if (isPointToPoint(task.coll)) return runDeviceP2p({task});
  const size_t blockBytes = task.count * typeSize(task.type);
  const bool blocked = task.coll == CollType::kAllGather || task.coll == CollType::kReduceScatter;
  const size_t bytes = blocked ? blockBytes * nranks_ : blockBytes;
  // The call's algorithm selection (ncclCollConfig_t): symmetric kernels
  // and the ring are what the device path runs.
  const bool symmetricAllowed = task.algos == 0 || (task.algos & kAlgoSymmetric) != 0;
  const bool ringAllowed = task.algos == 0 || (task.algos & kAlgoRing) != 0;
  if (symmetricAllowed) {
    if (std::optional<SymmetricPlan> symmetric = symmetricPlan(task)) {
      tagged(task, bytes, "symmetric");
      return device_->enqueueSymmetric(task, *symmetric);
    }
  }
  if (!ringAllowed && task.forceAlgos) return unrunnableSelection(task, bytes);
  const Plan plan = tuner_->devicePlan(task, bytes, deviceChannels_);
  tagged(task, bytes, "ring");
  DevicePlan dp;
  dp.nChannels = plan.nChannels;
  dp.sliceBytes = plan.sliceBytes;
  dp.chunkBytes = plan.chunkBytes;
  return device_->enqueue(task, dp);
}

// A group's point-to-point operations on device buffers: decomposed into
// sends, receives and local copies (NCCL's AlltoAll, Gather and Scatter are
// such groups too) and launched together on their common stream.
Status Communicator::runDeviceP2p(const std::vector<Task>& tasks) {
  if (!device_)
    return Status(deviceUnavailable_.code(),
                  "point-to-point on CUDA device buffers: " + deviceUnavailable_.message());
  std::vector<DeviceP2pRequest> requests;
  std::vector<const void*> selfSends;
  std::vector<void*> selfRecvs;
  std::vector<size_t> selfSendBytes, selfRecvBytes;
  std::vector<void*> streams;
  void* launchEvent = nullptr;  // at most one per group, as NCCL allows
  for (const Task& t : tasks) {
    if (t.launchEvent != nullptr) {
      if (launchEvent != nullptr && launchEvent != t.launchEvent)
        return invalidUsage("a group's point-to-point operations on device buffers carry two different "
                            "launchCompletionEvents (at most one per communicator and group)");
      launchEvent = t.launchEvent;
    }
    if (t.count == 0) continue;
    if (std::find(streams.begin(), streams.end(), t.cudaStream) == streams.end()) streams.push_back(t.cudaStream);
    const size_t bytes = t.count * typeSize(t.type);
    const char* in = static_cast<const char*>(t.sendbuff);
    char* out = static_cast<char*>(t.recvbuff);
    auto send = [&](int peer, const void* src) {
      if (peer == rank_) {
        selfSends.push_back(src);
        selfSendBytes.push_back(bytes);
      } else {
        requests.push_back(DeviceP2pRequest{DeviceP2pRequest::kSend, peer, src, nullptr, bytes});
      }
    };
    auto recv = [&](int peer, void* dst) {
      if (peer == rank_) {
        selfRecvs.push_back(dst);
        selfRecvBytes.push_back(bytes);
      } else {
        requests.push_back(DeviceP2pRequest{DeviceP2pRequest::kRecv, peer, nullptr, dst, bytes});
      }
    };
    // A collective's own block: a local copy, apart from the caller's sends
    // to itself (which pair with its receives from itself in call order);
    // none where it already lies in place.
    auto copyOwn = [&](const void* src, void* dst) {
      if (src != dst) requests.push_back(DeviceP2pRequest{DeviceP2pRequest::kCopy, rank_, src, dst, bytes});
    };
    switch (t.coll) {
      case CollType::kSend: send(t.peer, in); break;
      case CollType::kRecv: recv(t.peer, out); break;
      case CollType::kAlltoAll: {
        // The kernel sends each block while it receives: an AlltoAll whose
        // buffers overlap was refused at the call (api/coll_api.cc).
        if (nranks_ > 1 && rangesOverlap(in, out, bytes * static_cast<size_t>(nranks_)))
          return internalError("an AlltoAll on overlapping device buffers reached the device path");
        for (int p = 0; p < nranks_; ++p) {
          if (p == rank_) {
            copyOwn(in + p * bytes, out + p * bytes);
            continue;
          }
          send(p, in + p * bytes);
          recv(p, out + p * bytes);
        }
        break;
      }
      case CollType::kGather:
        if (rank_ != t.root) {
          send(t.root, in);
          break;
        }
        copyOwn(in, out + rank_ * bytes);
        for (int p = 0; p < nranks_; ++p)
          if (p != rank_) recv(p, out + p * bytes);
        break;
      case CollType::kScatter:
        if (rank_ != t.root) {
          recv(t.root, out);
          break;
        }
        for (int p = 0; p < nranks_; ++p)
          if (p != rank_) send(p, in + p * bytes);
        copyOwn(in + rank_ * bytes, out);
        break;
      default: return internalError(std::string(collName(t.coll)) + " is not point-to-point");
    }
  }
  // Sends to ourselves meet our receives from ourselves in call order.
  if (selfSends.size() != selfRecvs.size())
    return invalidUsage("a group sends " + std::to_string(selfSends.size()) + " message(s) to this rank itself but " +
                        "receives " + std::to_string(selfRecvs.size()) + " from itself");
  for (size_t i = 0; i < selfSends.size(); ++i) {
    if (selfSendBytes[i] != selfRecvBytes[i])
      return invalidUsage("a send to this rank itself of " + std::to_string(selfSendBytes[i]) +
                          " bytes meets a receive of " + std::to_string(selfRecvBytes[i]) + " bytes");
    if (selfSends[i] != selfRecvs[i])
      requests.push_back(DeviceP2pRequest{DeviceP2pRequest::kCopy, rank_, selfSends[i], selfRecvs[i], selfSendBytes[i]});
  }
  if (requests.empty()) return Status::ok();
  return device_->enqueueP2p(requests, streams, launchEvent);
}

// Kernels may still run on the FIFOs and flags: wait for them (a bounded
// wait; then abort them and wait again) before anything is unmapped. What
// still runs after that keeps its memory: leaked, not freed under it.
void Communicator::releaseDevice() {
  if (!device_) {  // none, or suspended (ncclCommSuspend drained the kernels)
    symmetric_.reset();
    deviceShm_.reset();
    deviceNet_.reset();
    return;
  }
  const int64_t graceMs = std::clamp<int64_t>(timeoutMs_, 100, 10000);
  bool done = device_->drain(Deadline::afterMs(graceMs));
  if (!done) {
    PLAIT_WARN(kInit, "rank %d: device collectives still running at destroy; aborting them", rank_);
    device_->abort();
    if (deviceShm_) deviceShm_->abort();
    if (deviceNet_) deviceNet_->abort();
    done = device_->drain(Deadline::afterMs(graceMs));
  }
  if (!done) {
    PLAIT_WARN(kInit, "rank %d: device collectives did not stop; their memory is leaked", rank_);
    (void)symmetric_.release();
    (void)device_.release();
    (void)deviceShm_.release();
    if (deviceNet_) deviceNet_->abort();  // its proxy stops; its FIFOs stay
    (void)deviceNet_.release();
    return;
  }
  symmetric_.reset();  // the windows' mappings and structures, while the device is still there
  device_.reset();  // unregisters the FIFOs from CUDA first
  deviceShm_.reset();
  deviceNet_.reset();  // after deviceShm_, which hands out its connectors
}

}  // namespace plait
