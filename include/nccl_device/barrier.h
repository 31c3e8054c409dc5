/* nccl_device/barrier.h — a barrier over a team that may span hosts: the
 * LSA barrier among this host's ranks, then (across hosts) a GIN barrier
 * over the rail team. Plait has no GIN, so a session over more than one host
 * stops the kernel with a message; over one host it is the LSA barrier. */
#ifndef PLAIT_NCCL_DEVICE_BARRIER_H_
#define PLAIT_NCCL_DEVICE_BARRIER_H_

#include "core.h"
#include "coop.h"
#include "gin.h"
#include "lsa_barrier.h"

#if defined(PLAIT_NCCL_DEVICE_CODE)
template <typename Coop>
struct ncclBarrierSession {
  /* The world team: comm.lsaBarrier among this host's ranks; across hosts GIN. */
  PLAIT_NCCL_DEVICE_FN ncclBarrierSession(Coop coop, ncclTeamTagWorld, ncclGin gin, uint32_t index)
      : lsa_(coop, gin.comm, ncclTeamTagLsa(), index) {
    if (gin.comm.nRanks != gin.comm.lsaSize) plait_nccl_device::unsupported("a barrier across hosts (GIN)");
  }
  /* The LSA team only. */
  PLAIT_NCCL_DEVICE_FN ncclBarrierSession(Coop coop, ncclTeamTagLsa, ncclDevComm const& comm, uint32_t index)
      : lsa_(coop, comm, ncclTeamTagLsa(), index) {}
  ncclBarrierSession(ncclBarrierSession const&) = delete;

  PLAIT_NCCL_DEVICE_FN ncclLsaBarrierSession<Coop>& lsaBarrier() { return lsa_; }
  PLAIT_NCCL_DEVICE_FN void sync(Coop coop, cuda::memory_order order,
                                 ncclGinFenceLevel fence = ncclGinFenceLevel::Relaxed) {
    (void)fence;
    lsa_.sync(coop, order);
  }

 private:
  ncclLsaBarrierSession<Coop> lsa_;
};
#endif

#endif
