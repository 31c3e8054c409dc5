/*
 * Plait — the NCCL 2.28 C API, implemented by Plait, and the part of NCCL
 * 2.32's additions Plait provides so far (marked "NCCL 2.32" below).
 *
 * This header is Plait's own description of the NCCL application binary
 * interface: the same type layouts, enum values, macros and function
 * signatures, so a program built against NVIDIA's nccl.h links against
 * libnccl.so.2 from Plait unchanged, and a program built against this header
 * links against NVIDIA's NCCL (2.32 or later where it calls a 2.32 function).
 *
 * Host-only builds: when CUDA headers are not available (or PLAIT_NO_CUDA is
 * defined) `cudaStream_t` is an opaque pointer. A null stream means "blocking:
 * return when the operation is complete"; a non-null stream must be a Plait
 * host stream (see plait/stream.hpp, plaitStreamCreate) in such builds.
 *
 * Every function returns ncclSuccess or an error code; on error a message
 * naming what was wrong is available from ncclGetLastError(comm).
 * Every function also exists under a `pnccl` prefix for profilers.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if !defined(PLAIT_NO_CUDA) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define PLAIT_NCCL_H_HAS_CUDA 1
#endif
#endif

#if defined(PLAIT_NCCL_H_HAS_CUDA)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else
/* Opaque stream handle for host-only builds: same size and passing
 * convention as CUDA's `struct CUstream_st*`. */
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#endif
#include <stdint.h>

#include <stddef.h>
#include <limits.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

/* Versions up to 2.8 were coded X*1000+Y*100+Z, later ones X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* Plait's own version, reported by plait-info and in NCCL_DEBUG=VERSION. */
#define PLAIT_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator: an opaque handle owned by the library. */
typedef struct ncclComm* ncclComm_t;
/* A registered memory window (not supported yet by Plait). */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The rendezvous token made by ncclGetUniqueId and shared by all ranks. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Flags of ncclCommWindowRegister. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* Values of ncclConfig_t.CTAPolicy. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* Flags of ncclCommShrink and ncclCommRevoke. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* ncclConfig_t.hostCftMode and .nvlsHostMode (NCCL 2.32; Plait has neither
 * machinery: the values are checked and accepted). */
typedef enum {
  ncclHostCftDefault = NCCL_CONFIG_UNDEF_INT,
  ncclHostCftEnable = 1,
  ncclHostCftDisable = 2,
  ncclHostCftFallback = 3
} ncclHostCftMode_t;
typedef enum {
  ncclNvlsHostModeDefault = NCCL_CONFIG_UNDEF_INT,
  ncclNvlsHostModeEnable = 0,
  ncclNvlsHostModeDisableTransport = 1 << 0,
  ncclNvlsHostModeDisableSymmetricMultimem = 1 << 1,
  ncclNvlsHostModeDisable = 0x7fffffff
} ncclNvlsHostMode_t;

/* Options for ncclCommInitRankConfig / ncclCommSplit. Always start from
 * NCCL_CONFIG_INITIALIZER; fields left at NCCL_CONFIG_UNDEF_* take defaults.
 * Fields are only ever appended: Plait reads no further than the caller's
 * `size` (a program built against an older nccl.h passes a shorter one).
 * Every value is checked; src/api/comm_config.cc says which Plait acts on. */
typedef struct ncclConfig_v23200 {
  size_t size;          /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  int blocking;         /* 0: calls may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;          /* Plait: upper bound on channels */
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  /* NCCL 2.29 - 2.32 */
  int graphUsageMode;      /* 0, 1 or 2 */
  int numRmaCtx;           /* >= 0 */
  int maxP2pPeers;         /* >= 1 */
  int graphStreamOrdering; /* 0 or 1 */
  int launchOrderImplicit; /* 0 or 1 */
  int numRmaSig;           /* >= 0 */
  int rmaEagerInit;        /* 0 or 1 */
  int hostCftMode;         /* ncclHostCftMode_t */
  int nvlsHostMode;        /* ncclNvlsHostMode_t flags */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                    \
  {                                                                                \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                               \
  }

/* NCCL 2.32: one vendor option of a per-call configuration, in a list.
 * Plait reads none (it logs that it ignored them, as NCCL ignores all). */
typedef struct ncclConfigExt {
  struct ncclConfigExt* next; /* NULL ends the list */
  struct {
    int vendorId;
    int optionId;
  } key;
  union {
    int i;
    const char* s;
    void* raw;
  } val;
} ncclConfigExt_t;

/* NCCL 2.32: options of one collective call (ncclAllReduceConfig and the
 * other nccl*Config entry points). Start from NCCL_COLLCONFIG_INITIALIZER;
 * fields are only ever appended, and the library reads no further than the
 * caller's `size`. Every rank must pass the same configuration. */
typedef struct ncclCollConfig_v23200 {
  size_t size;          /* sizeof(ncclCollConfig_t) of the caller's header */
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  ncclConfigExt_t* ext; /* vendor options, or NULL */
  int minCTAs;          /* Plait: least channels for this call (UNDEF: the tuner's) */
  int maxCTAs;          /* Plait: most channels for this call */
  int nvlsCTAs;
  int cgaClusterSize;
  /* Algorithms the call may use, in NCCL_ALGO's syntax ("ring", "^tree",
   * "allreduce:ring;broadcast:ring"); NULL or "" lets the tuner choose.
   * Plait runs ring, oneshot and tree (host buffers: one-shots for small
   * messages; halving-doubling AllReduce, binomial Broadcast and Reduce),
   * direct (registered buffers) and symmetric (device windows); NCCL's
   * other names parse but Plait runs none of them. */
  const char* algSelection;
  int forceAlgSelection;      /* 1 (default): a selection the call cannot honour is an error */
  int CTAPolicy;
  uint64_t userProfilerTag;   /* shown in Plait's per-call log lines */
  cudaEvent_t launchCompletionEvent; /* recorded on the stream once the kernel is launched (device buffers) */
} ncclCollConfig_t;

#define NCCL_COLLCONFIG_INITIALIZER                                                            \
  {                                                                                            \
    sizeof(ncclCollConfig_t), 0xcafebeef, NCCL_VERSION(2, 32, 0), NCCL_CONFIG_UNDEF_PTR,       \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_PTR, 1, NCCL_CONFIG_UNDEF_INT, 0, NCCL_CONFIG_UNDEF_PTR              \
  }

/* Result of ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic; /* 0x74685283 */
  unsigned int version;
  float estimatedTime; /* microseconds */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

/* Reduction operations. Values from ncclNumOps up are user operations made
 * by ncclRedOpCreatePreMulSum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  ncclScalarDevice = 0,        /* read while the collective runs */
  ncclScalarHostImmediate = 1  /* read before the create call returns */
} ncclScalarResidence_t;

/* Declares `ncclX` and its profiler alias `pncclX` with one signature. */
#define PLAIT_DECLARE(ret, name, args) \
  ret nccl##name args;                 \
  ret pnccl##name args

/* ---- Memory ---------------------------------------------------------- */
/* Allocates device memory of the calling thread's current CUDA device where
 * there is one (as NCCL does), otherwise host memory that peers on the same
 * host can map (PLAIT_MEM_ALLOC=auto|host|device chooses; plait/memory.hpp
 * asks for host memory explicitly). Free with ncclMemFree. */
PLAIT_DECLARE(ncclResult_t, MemAlloc, (void** ptr, size_t size));
PLAIT_DECLARE(ncclResult_t, MemFree, (void* ptr));

/* ---- Version, ids, communicators --------------------------------------- */
PLAIT_DECLARE(ncclResult_t, GetVersion, (int* version));
/* Creates a rendezvous id; the caller becomes the root of the bootstrap. */
PLAIT_DECLARE(ncclResult_t, GetUniqueId, (ncclUniqueId* uniqueId));
/* Collective over all nranks ranks: blocks until all have joined or the
 * bootstrap deadline (PLAIT_TIMEOUT) passes. */
PLAIT_DECLARE(ncclResult_t, CommInitRankConfig,
              (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config));
PLAIT_DECLARE(ncclResult_t, CommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank));
/* Creates ndev communicators in this process (ranks as threads). devlist
 * may be NULL; on host builds it only labels the ranks. */
PLAIT_DECLARE(ncclResult_t, CommInitAll, (ncclComm_t* comm, int ndev, const int* devlist));
PLAIT_DECLARE(ncclResult_t, CommInitRankScalable,
              (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
               ncclConfig_t* config));
/* Waits for all operations issued on comm to complete. */
PLAIT_DECLARE(ncclResult_t, CommFinalize, (ncclComm_t comm));
PLAIT_DECLARE(ncclResult_t, CommDestroy, (ncclComm_t comm));
/* Thread-safe: unblocks every wait on comm, then frees it. */
PLAIT_DECLARE(ncclResult_t, CommAbort, (ncclComm_t comm));
/* Local: operations in flight on comm fail fast (also on peers waiting for
 * this rank), later ones are refused; destroy, split and shrink remain.
 * revokeFlags must be NCCL_REVOKE_DEFAULT; comm NULL does nothing. */
PLAIT_DECLARE(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags));
PLAIT_DECLARE(ncclResult_t, CommSplit,
              (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config));
/* Called by every rank not in excludeRanksList (the excluded ones may be
 * dead); the survivors keep their order. NCCL_SHRINK_ABORT revokes comm
 * first. Without config the result keeps comm's blocking mode. */
PLAIT_DECLARE(ncclResult_t, CommShrink,
              (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
               ncclConfig_t* config, int shrinkFlags));

/* NCCL 2.32: adding ranks to a live communicator. One existing rank (the
 * "root") gets an id with ncclCommGetUniqueId (one outstanding per
 * communicator) and hands it to the newcomers; then every rank calls
 * ncclCommGrow with the new size: existing ranks with their comm and
 * rank = -1 (the root passes the id, the others NULL; they keep their
 * ranks), newcomers with comm = NULL, the id and their rank. The result is a
 * new communicator; the old one stays valid. */
PLAIT_DECLARE(ncclResult_t, CommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId));
PLAIT_DECLARE(ncclResult_t, CommGrow,
              (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
               ncclConfig_t* config));

/* NCCL 2.32: giving GPU memory back while a communicator is idle. Both calls
 * are collective. NCCL_SUSPEND_MEM releases the device path's connections
 * (FIFOs, P2P blocks, network steps in GPU memory); until ncclCommResume
 * every operation on comm is ncclInvalidUsage. Without the flag suspend does
 * nothing. A communicator whose kernels were captured into a CUDA graph
 * cannot suspend its memory. */
#define NCCL_SUSPEND_MEM 0x01
PLAIT_DECLARE(ncclResult_t, CommSuspend, (ncclComm_t comm, int flags));
PLAIT_DECLARE(ncclResult_t, CommResume, (ncclComm_t comm));
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes the communicator allocated that suspend releases */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* bytes it allocated that stay while suspended */
  ncclStatGpuMemTotal = 3      /* the two together */
} ncclCommMemStat_t;
PLAIT_DECLARE(ncclResult_t, CommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value));

/* ---- Errors and queries ------------------------------------------------ */
PLAIT_DECLARE(const char*, GetErrorString, (ncclResult_t result));
/* The last error message of this thread (comm may be NULL). */
PLAIT_DECLARE(const char*, GetLastError, (ncclComm_t comm));
__attribute__((deprecated("ncclResetDebugInit is not part of the supported API"))) void ncclResetDebugInit(void);
__attribute__((deprecated("pncclResetDebugInit is not part of the supported API"))) void pncclResetDebugInit(void);
PLAIT_DECLARE(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError));
PLAIT_DECLARE(ncclResult_t, CommCount, (const ncclComm_t comm, int* count));
/* Host communicators answer -1 (no CUDA device). */
PLAIT_DECLARE(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int* device));
PLAIT_DECLARE(ncclResult_t, CommUserRank, (const ncclComm_t comm, int* rank));

/* ---- Registration ------------------------------------------------------ */
PLAIT_DECLARE(ncclResult_t, CommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle));
PLAIT_DECLARE(ncclResult_t, CommDeregister, (const ncclComm_t comm, void* handle));
PLAIT_DECLARE(ncclResult_t, CommWindowRegister,
              (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
PLAIT_DECLARE(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
/* NCCL 2.32: the buffer a window was registered with. */
PLAIT_DECLARE(ncclResult_t, WinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr));

/* ---- User reduction operations ----------------------------------------- */
/* A sum where each rank's input is first multiplied by *scalar. */
PLAIT_DECLARE(ncclResult_t, RedOpCreatePreMulSum,
              (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
               ncclComm_t comm));
PLAIT_DECLARE(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

/* ---- Collectives ------------------------------------------------------- */
PLAIT_DECLARE(ncclResult_t, Reduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               int root, ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Bcast,
              (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
               cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Broadcast,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, AllReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, ReduceScatter,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, AllGather,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
               ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, AlltoAll,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Gather,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Scatter,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream));

/* NCCL 2.32: the collectives with a per-call configuration (NULL: as the
 * plain call). */
PLAIT_DECLARE(ncclResult_t, AllReduceConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, BroadcastConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, ReduceConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               int root, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, AllGatherConfig,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, ReduceScatterConfig,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, AlltoAllConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, GatherConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));
PLAIT_DECLARE(ncclResult_t, ScatterConfig,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
               ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t* config));

/* ---- Point to point and groups ----------------------------------------- */
PLAIT_DECLARE(ncclResult_t, Send,
              (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
               cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Recv,
              (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
               cudaStream_t stream));
/* Groups nest; the depth is per thread. Operations issued between the
 * outermost Start and End are launched together at End. */
PLAIT_DECLARE(ncclResult_t, GroupStart, (void));
PLAIT_DECLARE(ncclResult_t, GroupEnd, (void));
PLAIT_DECLARE(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t* simInfo));

/* ---- Parameters (NCCL 2.32) ------------------------------------------- */
/* Plait's tunables by key: NCCL's spelling (NCCL_NCHANNELS), Plait's
 * (PLAIT_NCHANNELS) or the bare name. A handle belongs to the library. An
 * integer that does not fit the requested type, or a string parameter read
 * as an integer, is an error naming both. Returned strings and tables stay
 * valid until the same thread's next call of the same function. */
typedef struct ncclParamHandle* ncclParamHandle_t;
PLAIT_DECLARE(ncclResult_t, ParamBind, (ncclParamHandle_t* out, const char* key));
PLAIT_DECLARE(ncclResult_t, ParamGetI8, (ncclParamHandle_t h, int8_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetI16, (ncclParamHandle_t h, int16_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetI32, (ncclParamHandle_t h, int32_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetI64, (ncclParamHandle_t h, int64_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetU8, (ncclParamHandle_t h, uint8_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetU16, (ncclParamHandle_t h, uint16_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetU32, (ncclParamHandle_t h, uint32_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetU64, (ncclParamHandle_t h, uint64_t* out));
PLAIT_DECLARE(ncclResult_t, ParamGetStr, (ncclParamHandle_t h, const char** out));
/* Integers as 8 bytes (int64_t), strings with their NUL; *len is set even
 * when maxLen is too small (an error). */
PLAIT_DECLARE(ncclResult_t, ParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len));
PLAIT_DECLARE(ncclResult_t, ParamGetParameter, (const char* key, const char** value, int* valueLen));
PLAIT_DECLARE(ncclResult_t, ParamGetAllParameterKeys, (const char*** table, int* tableLen));
/* Every parameter and where its value came from, at NCCL_DEBUG=INFO (ENV). */
PLAIT_DECLARE(void, ParamDumpAll, (void));

/* ---- Encryption (NCCL 2.32) ------------------------------------------- */
/* Process-wide: TCP connections Plait opens after the call (bootstrap and
 * the socket transport) are TLS 1.3 sessions keyed by `psk`, a text both
 * sides must share; NONE turns it off for later connections. Needs OpenSSL 3
 * (libssl.so.3) at run time: without it the call fails with
 * ncclSystemError and nothing changes. Shared memory, CUDA IPC, UCX and
 * verbs traffic is not covered. */
typedef enum {
  NCCL_ENCRYPTION_MODE_NONE = 0, /* plaintext */
  NCCL_ENCRYPTION_MODE_PSK = 1   /* pre-shared key */
} ncclEncryptionMode_t;

typedef struct ncclEncryptionConfig_v23200 {
  size_t size;         /* sizeof(ncclEncryptionConfig_t) as the caller knows it */
  unsigned int magic;  /* 0xcafebeef */
  unsigned int version;
  int mode;            /* ncclEncryptionMode_t */
  const char* psk;     /* NUL-terminated key text (PSK mode) */
} ncclEncryptionConfig_t;

#define NCCL_ENCRYPTION_CONFIG_INITIALIZER                                      \
  {                                                                             \
    sizeof(ncclEncryptionConfig_t), 0xcafebeef, NCCL_VERSION(2, 32, 0),         \
        NCCL_ENCRYPTION_MODE_NONE, NCCL_CONFIG_UNDEF_PTR                        \
  }

PLAIT_DECLARE(ncclResult_t, SetEncryption, (const ncclEncryptionConfig_t* config));

/* ---- One-sided operations (NCCL 2.32) --------------------------------- */
/* A rank writes into a peer's window (registered collectively with
 * ncclCommWindowRegister: peerWin is this rank's handle of it) and raises a
 * signal the peer counts; the peer takes no part until it waits. Signals
 * are counters per (sender, sigIdx, ctx): ncclWaitSignal returns once each
 * descriptor's opCnt more signals came, and consumes them. A put's bytes are
 * in the window before its signal is counted. sigIdx, ctx and flags must
 * be 0 (as NCCL 2.32). Plait: host memory (stream NULL blocks; a Plait host
 * stream queues); the first one-sided call on a communicator is collective
 * (every rank's first such call connects them). */
PLAIT_DECLARE(ncclResult_t, PutSignal,
              (const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
               size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream));
PLAIT_DECLARE(ncclResult_t, Signal,
              (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream));

typedef struct {
  int opCnt;  /* signals to wait for (> 0) */
  int peer;   /* from this rank */
  int sigIdx; /* 0 */
  int ctx;    /* 0 */
} ncclWaitSignalDesc_t;

PLAIT_DECLARE(ncclResult_t, WaitSignal,
              (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream));

#undef PLAIT_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
