/* nccl_device/gin.h — GIN (GPU-initiated networking): a kernel's puts and
 * signals to ranks on other hosts. Plait has no GIN: ncclDevCommCreate
 * refuses requirements that ask for it, and every network call below stops
 * the kernel with a message. The types exist so that kernels written for
 * both cases compile. */
#ifndef PLAIT_NCCL_DEVICE_GIN_H_
#define PLAIT_NCCL_DEVICE_GIN_H_

#include "core.h"
#include "coop.h"

#if defined(PLAIT_NCCL_DEVICE_CODE)
enum class ncclGinFenceLevel { Relaxed };

/* Actions a put may carry: on the remote side, on the local side. */
struct ncclGin_None {};
struct ncclGin_SignalAdd {
  ncclGinSignal_t signal;
  uint64_t value;
};
struct ncclGin_SignalInc {
  ncclGinSignal_t signal;
};
struct ncclGin_CounterInc {
  ncclGinCounter_t counter;
};

struct ncclGin {
  ncclDevComm const& comm;
  int contextId;

  PLAIT_NCCL_DEVICE_FN ncclGin(ncclDevComm const& devComm, int contextIndex) : comm(devComm), contextId(contextIndex) {}

  template <typename RemoteAction = ncclGin_None, typename LocalAction = ncclGin_None, typename Coop = ncclCoopThread>
  PLAIT_NCCL_DEVICE_FN void put(ncclTeam, int, ncclWindow_t, size_t, ncclWindow_t, size_t, size_t,
                                RemoteAction = ncclGin_None{}, LocalAction = ncclGin_None{}, Coop = ncclCoopThread{}) const {
    plait_nccl_device::unsupported("ncclGin::put (GIN)");
  }
  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread>
  PLAIT_NCCL_DEVICE_FN void putValue(ncclTeam, int, ncclWindow_t, size_t, T, RemoteAction = ncclGin_None{},
                                     Coop = ncclCoopThread{}) const {
    plait_nccl_device::unsupported("ncclGin::putValue (GIN)");
  }
  template <typename RemoteAction, typename Coop = ncclCoopThread>
  PLAIT_NCCL_DEVICE_FN void signal(ncclTeam, int, RemoteAction, Coop = ncclCoopThread{}) const {
    plait_nccl_device::unsupported("ncclGin::signal (GIN)");
  }
  template <typename Coop>
  PLAIT_NCCL_DEVICE_FN void flush(Coop, cuda::memory_order = cuda::memory_order_acquire) const {
    plait_nccl_device::unsupported("ncclGin::flush (GIN)");
  }
  PLAIT_NCCL_DEVICE_FN uint64_t readSignal(ncclGinSignal_t, int = 64, cuda::memory_order = cuda::memory_order_acquire) const {
    plait_nccl_device::unsupported("ncclGin::readSignal (GIN)");
    return 0;
  }
  template <typename Coop>
  PLAIT_NCCL_DEVICE_FN void waitSignal(Coop, ncclGinSignal_t, uint64_t, int = 64,
                                       cuda::memory_order = cuda::memory_order_acquire) const {
    plait_nccl_device::unsupported("ncclGin::waitSignal (GIN)");
  }
  PLAIT_NCCL_DEVICE_FN void resetSignal(ncclGinSignal_t) const { plait_nccl_device::unsupported("ncclGin::resetSignal (GIN)"); }
  PLAIT_NCCL_DEVICE_FN uint64_t readCounter(ncclGinCounter_t, int = 56, cuda::memory_order = cuda::memory_order_acquire) const {
    plait_nccl_device::unsupported("ncclGin::readCounter (GIN)");
    return 0;
  }
  template <typename Coop>
  PLAIT_NCCL_DEVICE_FN void waitCounter(Coop, ncclGinCounter_t, uint64_t, int = 56,
                                        cuda::memory_order = cuda::memory_order_acquire) const {
    plait_nccl_device::unsupported("ncclGin::waitCounter (GIN)");
  }
  PLAIT_NCCL_DEVICE_FN void resetCounter(ncclGinCounter_t) const { plait_nccl_device::unsupported("ncclGin::resetCounter (GIN)"); }
};
#endif

#endif
