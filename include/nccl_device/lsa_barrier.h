/* nccl_device/lsa_barrier.h — barriers among an LSA team's blocks through
 * its members' resource buffers.
 *
 * The buffer of a handle with n barriers over a team of T ranks holds
 * 3n + n*T 32-bit words (zeroed at creation): [0,n) multicast epochs,
 * [n,2n) this rank's epoch per barrier, [2n,3n) multicast inboxes, and at
 * 3n + index*T + peer the inbox where `peer` posts its arrivals at barrier
 * `index`. A session loads the barrier's epoch; arrive() stores epoch+1
 * (release, system scope) into each peer's inbox for this rank; wait()
 * waits until every peer's inbox here reached epoch+1 (acquire) and advances
 * the epoch; the session writes the epoch back when it ends, so the next
 * kernel's session on the same barrier continues from it. */
#ifndef PLAIT_NCCL_DEVICE_LSA_BARRIER_H_
#define PLAIT_NCCL_DEVICE_LSA_BARRIER_H_

#include "core.h"
#include "coop.h"

#if defined(PLAIT_NCCL_DEVICE_CODE)
template <typename Coop>
struct ncclLsaBarrierSession {
  PLAIT_NCCL_DEVICE_FN ncclLsaBarrierSession(Coop coop, ncclDevComm const& comm, ncclTeam team,
                                             ncclLsaBarrierHandle handle, uint32_t index, bool multimem = false,
                                             ncclMultimemHandle mmHandle = ncclMultimemHandle{nullptr})
      : comm_(comm), team_(team), handle_(handle), index_(index) {
    (void)coop;
    (void)mmHandle;
    if (multimem) plait_nccl_device::unsupported("a multimem LSA barrier (NVLink SHARP)");
    epoch_ = cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(words()[handle_.nBarriers + index_])
                 .load(cuda::memory_order_relaxed);
  }
  PLAIT_NCCL_DEVICE_FN ncclLsaBarrierSession(Coop coop, ncclDevComm const& comm, ncclTeamTagLsa, uint32_t index,
                                             bool multimem = false)
      : ncclLsaBarrierSession(coop, comm, ncclTeamLsa(comm), comm.lsaBarrier, index, multimem, comm.lsaMultimem) {}
  ncclLsaBarrierSession(ncclLsaBarrierSession const&) = delete;
  PLAIT_NCCL_DEVICE_FN ~ncclLsaBarrierSession() {
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
      cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(words()[handle_.nBarriers + index_])
          .store(epoch_, cuda::memory_order_relaxed);
  }

  PLAIT_NCCL_DEVICE_FN void arrive(Coop coop, cuda::memory_order order) {
    (void)order;  // always a release: the peer's wait must see what came before
    coop.sync();
    const uint32_t next = epoch_ + 1;
    for (int peer = coop.thread_rank(); peer < team_.nRanks; peer += coop.size()) {
      if (peer == team_.rank) continue;
      uint32_t* theirs = static_cast<uint32_t*>(
          ncclGetResourceBufferPeerPointer(comm_, handle_.bufHandle, team_, peer));
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(theirs[inbox(team_.rank)])
          .store(next, cuda::memory_order_release);
    }
  }
  PLAIT_NCCL_DEVICE_FN void wait(Coop coop, cuda::memory_order order) {
    (void)order;  // always an acquire: what the peers wrote before arriving is visible after
    const uint32_t next = epoch_ + 1;
    for (int peer = coop.thread_rank(); peer < team_.nRanks; peer += coop.size()) {
      if (peer == team_.rank) continue;
      cuda::atomic_ref<uint32_t, cuda::thread_scope_system> box(words()[inbox(peer)]);
      // Rolling comparison: epochs wrap around.
      while (static_cast<int32_t>(box.load(cuda::memory_order_acquire) - next) < 0) plait_nccl_device::backOff();
    }
    epoch_ = next;
    coop.sync();
  }
  PLAIT_NCCL_DEVICE_FN void sync(Coop coop, cuda::memory_order order) {
    arrive(coop, order);
    wait(coop, order);
  }

 private:
  PLAIT_NCCL_DEVICE_FN uint32_t* words() const {
    return static_cast<uint32_t*>(ncclGetResourceBufferLocalPointer(comm_, handle_.bufHandle));
  }
  PLAIT_NCCL_DEVICE_FN size_t inbox(int peer) const {
    return 3 * static_cast<size_t>(handle_.nBarriers) + static_cast<size_t>(index_) * team_.nRanks + peer;
  }

  ncclDevComm const& comm_;
  ncclTeam team_;
  ncclLsaBarrierHandle handle_;
  uint32_t index_;
  uint32_t epoch_ = 0;
};
#endif

#endif
