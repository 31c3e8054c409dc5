/* nccl_device/core.h — the device API's types, host entry points, team
 * arithmetic and window pointers (see nccl_device.h). */
#ifndef PLAIT_NCCL_DEVICE_CORE_H_
#define PLAIT_NCCL_DEVICE_CORE_H_

#include <stddef.h>
#include <stdint.h>

#include "../nccl.h"

/* Function qualifiers: device code exists only for the CUDA compiler; team
 * arithmetic is also plain C++ for the host. */
#if defined(__CUDACC__) || defined(PLAIT_EMU_DEVICE_CODE) /* nvcc, or Plait's CPU emulator (emu/) */
#define PLAIT_NCCL_DEVICE_CODE 1
#define PLAIT_NCCL_DEVICE_FN __device__ __forceinline__
#define PLAIT_NCCL_HOST_DEVICE_FN __host__ __device__ __forceinline__
#include <cuda/atomic>
#else
#define PLAIT_NCCL_HOST_DEVICE_FN inline
#endif

/* ---- Handles and teams -------------------------------------------------- */
struct ncclDevComm;
typedef struct ncclDevComm ncclDevComm_t;

/* A team: nRanks ranks of the communicator, `rank` this rank's index in it,
 * consecutive members `stride` world ranks apart. */
struct ncclTeam {
  int nRanks, rank, stride;
};
typedef struct ncclTeam ncclTeam_t;

/* Tags naming the built-in teams: every rank (world), the ranks whose memory
 * this rank loads and stores directly (LSA: one host's GPUs), and the ranks
 * at the same LSA index on each host (rail). */
struct ncclTeamTagWorld {};
struct ncclTeamTagLsa {};
struct ncclTeamTagRail {};

/* A resource buffer inside the device communicator's resource window,
 * in units of 128 bytes from its start. */
typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;
typedef void* ncclGinWindow_t;

#define NCCL_GIN_MAX_CONTEXTS 4

struct ncclMultimemHandle {
  void* mcBasePtr; /* the team's multicast mapping; NULL: none (Plait never has one) */
};
typedef struct ncclMultimemHandle ncclMultimemHandle_t;

struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle; /* the barriers' words (see lsa_barrier.h) */
  int nBarriers;
};
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;

struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t bufHandle;
};
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;

struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
};
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

/* ---- What a device communicator is asked to provide -------------------- */
struct ncclDevResourceRequirements;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
struct ncclTeamRequirements;
typedef struct ncclTeamRequirements ncclTeamRequirements_t;

struct ncclDevCommRequirements {
  ncclDevResourceRequirements_t* resourceRequirementsList; /* a list: buffers (and GIN signals) to allocate */
  ncclTeamRequirements_t* teamRequirementsList;            /* a list: teams that need a multicast mapping */
  bool lsaMultimem;                                        /* a multicast mapping over the LSA team */
  int barrierCount;                                        /* world barriers (LSA and GIN) */
  int lsaBarrierCount;                                     /* LSA barriers */
  int railGinBarrierCount;                                 /* GIN barriers over the rail team */
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;               /* low-latency all-to-all buffers */
  bool ginForceEnable;
  int ginContextCount; /* a hint */
  int ginSignalCount;  /* signals 0.. */
  int ginCounterCount; /* counters 0.. */
};
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;

struct ncclDevResourceRequirements {
  ncclDevResourceRequirements_t* next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle_t* outBufferHandle; /* set by ncclDevCommCreate when non-NULL */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t* outGinSignalStart;
  ncclGinCounter_t* outGinCounterStart;
};

struct ncclTeamRequirements {
  ncclTeamRequirements_t* next;
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t* outMultimemHandle;
};

/* ---- Windows and the device communicator (filled by the library, read by
 * kernels: NCCL's layout) ------------------------------------------------- */

/* A registered window as kernels see it (ncclWindow_t points to one, in
 * device memory). The LSA team's copies of the window are mapped
 * stride4G * 4 GiB apart from lsaFlatBase (LSA rank 0's copy). */
struct ncclWindow_vidmem {
  void* winHost;      /* the library's own record */
  char* lsaFlatBase;  /* LSA rank 0's copy */
  int lsaRank;        /* this rank's index in the LSA team */
  int worldRank;
  uint32_t stride4G;  /* distance between consecutive LSA ranks' copies, in 4 GiB */
  uint32_t mcOffset4K;  /* the window in the multicast mapping, in 4 KiB */
  uint32_t ginOffset4K;
  ncclGinWindow_t ginWins[NCCL_GIN_MAX_CONTEXTS];
};

struct ncclDevCommWindowTable {
  struct Entry {
    uintptr_t base, size;
    ncclWindow_t window;
  } entries[32];
  struct ncclDevCommWindowTable* next;
};

struct ncclDevComm {
  int rank, nRanks;
  uint32_t nRanks_rcp32; /* reciprocals for fast division */
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;
  struct ncclDevCommWindowTable* windowTable;
  ncclWindow_t resourceWindow;                      /* device copy of resourceWindow_inlined */
  struct ncclWindow_vidmem resourceWindow_inlined;  /* the barriers' and user resources' window */
  ncclMultimemHandle_t lsaMultimem;
  ncclLsaBarrierHandle_t lsaBarrier;
  ncclGinBarrierHandle_t railGinBarrier;
  uint8_t ginContextCount;
  uint8_t ginTypes[NCCL_GIN_MAX_CONTEXTS];
  void* ginHandles[NCCL_GIN_MAX_CONTEXTS];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t* ginSignalShadows;
};

#if defined(__x86_64__) || defined(__aarch64__)
static_assert(sizeof(struct ncclWindow_vidmem) == 72, "ncclWindow_vidmem: NCCL 2.28's layout");
static_assert(sizeof(struct ncclDevCommWindowTable) == 776, "ncclDevCommWindowTable: NCCL 2.28's layout");
static_assert(sizeof(struct ncclDevComm) == 200, "ncclDevComm: NCCL 2.28's layout");
static_assert(offsetof(struct ncclDevComm, lsaBarrier) == 120, "ncclDevComm: NCCL 2.28's layout");
static_assert(sizeof(struct ncclDevCommRequirements) == 56, "ncclDevCommRequirements: NCCL 2.28's layout");
static_assert(sizeof(struct ncclDevResourceRequirements) == 56, "ncclDevResourceRequirements: NCCL 2.28's layout");
static_assert(sizeof(struct ncclTeamRequirements) == 32, "ncclTeamRequirements: NCCL 2.28's layout");
#endif

/* ---- Host entry points (libnccl) ---------------------------------------- */
extern "C" {
/* Collective over the communicator (inside a group: at ncclGroupEnd). The
 * resource window holds the LSA barriers and the buffers reqs lists; its LSA
 * copies are mapped like a symmetric window's. Plait: ncclInvalidUsage, with
 * the reason in ncclGetLastError, for multimem, GIN, or ranks that cannot map
 * each other's memory (no CUDA P2P inside the LSA team, no VMM). */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* devComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* devComm);
/* The built-in teams of a communicator, as seen from this rank ({0,0,0} for
 * an invalid communicator). LSA: ranks of one host, consecutive; every host
 * holds the same number (the largest that divides every host's run of
 * consecutive ranks). */
ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t ncclTeamRail(ncclComm_t comm);
/* The world / LSA rank of member `rank` of `team`; -1 when it has none. */
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
/* Fill a resource requirement (link it into reqs.resourceRequirementsList)
 * for nBarriers barriers; ncclDevCommCreate then sets *outHandle. */
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq);
/* Slots a low-latency all-to-all needs for maxElts elements of maxEltSize bytes. */
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                        ncclDevResourceRequirements_t* outReq);
}

/* ---- Team arithmetic (host and device) ---------------------------------- */
PLAIT_NCCL_HOST_DEVICE_FN ncclTeam ncclTeamWorld(ncclDevComm const& comm) { return ncclTeam{comm.nRanks, comm.rank, 1}; }
PLAIT_NCCL_HOST_DEVICE_FN ncclTeam ncclTeamLsa(ncclDevComm const& comm) { return ncclTeam{comm.lsaSize, comm.lsaRank, 1}; }
PLAIT_NCCL_HOST_DEVICE_FN ncclTeam ncclTeamRail(ncclDevComm const& comm) {
  return ncclTeam{comm.nRanks / comm.lsaSize, comm.rank / comm.lsaSize, comm.lsaSize};
}
/* Whether member bPeer of team b belongs to team a (both teams contain this rank). */
PLAIT_NCCL_HOST_DEVICE_FN bool ncclTeamRankIsMember(ncclTeam_t a, ncclTeam_t b, int bPeer) {
  const int delta = (bPeer - b.rank) * b.stride; /* world ranks from this rank */
  if (delta % a.stride != 0) return false;
  const int index = a.rank + delta / a.stride;
  return index >= 0 && index < a.nRanks;
}
/* The index in team a of member bPeer of team b (check ncclTeamRankIsMember first). */
PLAIT_NCCL_HOST_DEVICE_FN int ncclTeamRankToTeam(ncclTeam_t a, ncclTeam_t b, int bPeer) {
  return a.rank + (bPeer - b.rank) * b.stride / a.stride;
}
PLAIT_NCCL_HOST_DEVICE_FN int ncclTeamRankToWorld(ncclDevComm const& comm, ncclTeam team, int rank) {
  return comm.rank + (rank - team.rank) * team.stride;
}
PLAIT_NCCL_HOST_DEVICE_FN int ncclTeamRankToLsa(ncclDevComm const& comm, ncclTeam team, int rank) {
  return comm.lsaRank + (rank - team.rank) * team.stride;
}
/* Teams of innerSize consecutive members of parent, and the team of their
 * counterparts (same inner index) across those groups. */
PLAIT_NCCL_HOST_DEVICE_FN ncclTeam_t ncclTeamInnerFactor(ncclTeam_t parent, int innerSize) {
  return ncclTeam_t{innerSize, parent.rank % innerSize, parent.stride};
}
PLAIT_NCCL_HOST_DEVICE_FN ncclTeam_t ncclTeamOuterFactor(ncclTeam_t parent, int innerSize) {
  return ncclTeam_t{parent.nRanks / innerSize, parent.rank / innerSize, parent.stride * innerSize};
}
/* Byte offset of a resource buffer in the resource window. */
PLAIT_NCCL_HOST_DEVICE_FN size_t ncclGetResourceBufferOffset(ncclDevResourceHandle_t handle) {
  return static_cast<size_t>(handle) * 128;
}

#if defined(PLAIT_NCCL_DEVICE_CODE)
#include <stdio.h>
/* ---- Window pointers (device) -------------------------------------------- */
namespace plait_nccl_device {
/* The resource window a device communicator carries inside itself. */
PLAIT_NCCL_DEVICE_FN ncclWindow_t resourceWindow(ncclDevComm const& comm) {
  return const_cast<ncclWindow_t>(&comm.resourceWindow_inlined);
}
/* LSA rank `lsaPeer`'s copy of byte `offset` of window w. */
PLAIT_NCCL_DEVICE_FN void* lsaAddress(const ncclWindow_vidmem* w, size_t offset, int lsaPeer) {
  const uint64_t stride = static_cast<uint64_t>(w->stride4G) << 32;
  return w->lsaFlatBase + static_cast<uint64_t>(lsaPeer) * stride + offset;
}
/* Between polls of a flag a peer sets: a short sleep where the GPU has one
 * (sm_70+); in the emulator it yields the CPU to the peers' blocks. */
PLAIT_NCCL_DEVICE_FN void backOff() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700
  __nanosleep(64);
#endif
}
/* Prints where and why, then stops the kernel (an unsupported device call). */
PLAIT_NCCL_DEVICE_FN void unsupported(const char* what) {
  printf("Plait nccl_device.h: %s is not supported (block %d thread %d)\n", what, static_cast<int>(blockIdx.x),
         static_cast<int>(threadIdx.x));
  __trap();
}
}  // namespace plait_nccl_device

PLAIT_NCCL_DEVICE_FN void* ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer) {
  return plait_nccl_device::lsaAddress(w, offset, peer);
}
PLAIT_NCCL_DEVICE_FN void* ncclGetLocalPointer(ncclWindow_t w, size_t offset) {
  return plait_nccl_device::lsaAddress(w, offset, w->lsaRank);
}
/* `peer` is a world rank of the window's LSA team. */
PLAIT_NCCL_DEVICE_FN void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer) {
  return plait_nccl_device::lsaAddress(w, offset, w->lsaRank + (peer - w->worldRank));
}
/* `peer` is a member of team tm. */
PLAIT_NCCL_DEVICE_FN void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, ncclTeam tm, int peer) {
  return plait_nccl_device::lsaAddress(w, offset, w->lsaRank + (peer - tm.rank) * tm.stride);
}
PLAIT_NCCL_DEVICE_FN void* ncclGetMultimemPointer(ncclWindow_t w, size_t offset, ncclMultimemHandle mm) {
  if (mm.mcBasePtr == nullptr) plait_nccl_device::unsupported("a multimem pointer (no multicast mapping)");
  return static_cast<char*>(mm.mcBasePtr) + static_cast<size_t>(w->mcOffset4K) * 4096 + offset;
}
PLAIT_NCCL_DEVICE_FN void* ncclGetLsaMultimemPointer(ncclWindow_t w, size_t offset, ncclDevComm const& comm) {
  return ncclGetMultimemPointer(w, offset, comm.lsaMultimem);
}
PLAIT_NCCL_DEVICE_FN void* ncclGetResourceBufferLocalPointer(ncclDevComm const& comm, ncclDevResourceHandle h) {
  return ncclGetLocalPointer(plait_nccl_device::resourceWindow(comm), ncclGetResourceBufferOffset(h));
}
PLAIT_NCCL_DEVICE_FN void* ncclGetResourceBufferLsaPointer(ncclDevComm const& comm, ncclDevResourceHandle h, int peer) {
  return ncclGetLsaPointer(plait_nccl_device::resourceWindow(comm), ncclGetResourceBufferOffset(h), peer);
}
PLAIT_NCCL_DEVICE_FN void* ncclGetResourceBufferPeerPointer(ncclDevComm const& comm, ncclDevResourceHandle h,
                                                           ncclTeam tm, int peer) {
  return ncclGetPeerPointer(plait_nccl_device::resourceWindow(comm), ncclGetResourceBufferOffset(h), tm, peer);
}
#endif /* PLAIT_NCCL_DEVICE_CODE */

#endif
