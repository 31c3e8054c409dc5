/* The device drop-in check: C, compiled against NVIDIA's nccl.h and the CUDA
 * toolkit's runtime header only, linked against Plait's libnccl.so.2 and
 * either the emulated CUDA runtime (CI) or libcudart (a GPU). Forks N ranks; each takes
 * CUDA device `rank` (modulo the devices there are), allocates with cudaMalloc
 * and ncclMemAlloc (which must give device memory),
 * runs every collective and point-to-point call on its own stream and checks
 * the results it copies back, then replays an AllReduce captured into a CUDA
 * graph. `device_conformance abort`: ncclCommAbort ends a kernel waiting on a
 * killed peer. Exit 77: no CUDA device (skipped).
 * Launched (PLAIT_RANK and PLAIT_NRANKS set, NCCL_COMM_ID naming the root, no
 * argument: plait-run, or tests/net/netns.sh's nodes) it runs that one rank
 * and forks nothing; the device's index is the local rank (PLAIT_LOCAL_RANK).
 * `device_conformance kill`, launched: see killMain.
 * Usage: device_conformance [N | abort | kill] */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define COUNT 10007
#define SKIPPED 77

#define CHECK_CUDA(call, code)                                                            \
  do {                                                                                    \
    if ((call) != cudaSuccess) {                                                          \
      fprintf(stderr, "rank %d: %s failed (%d)\n", rank, #call, code);                    \
      return code;                                                                        \
    }                                                                                     \
  } while (0)
#define CHECK_NCCL(call, code)                                                            \
  do {                                                                                    \
    if ((call) != ncclSuccess) {                                                          \
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, ncclGetLastError(comm));   \
      return code;                                                                        \
    }                                                                                     \
  } while (0)

/* What every rank holds: its device buffers, host staging and its stream. */
struct Rank {
  int rank, nranks;
  ncclComm_t comm;
  cudaStream_t stream;
  float *fsend, *frecv, *fhost;
  int32_t *isend, *irecv, *ihost;
};

/* The value rank r puts at element i of its int32 send buffer. */
static int32_t ivalue(int r, size_t i) { return (int32_t)(r * 1000 + i % 101); }

/* Copies `count` int32 results back to ihost. */
static int fetchInts(struct Rank* k, size_t count, int code) {
  int rank = k->rank;
  CHECK_CUDA(cudaMemcpyAsync(k->ihost, k->irecv, count * sizeof(int32_t), cudaMemcpyDeviceToHost, k->stream), code);
  CHECK_CUDA(cudaStreamSynchronize(k->stream), code + 1);
  return 0;
}

/* The five ring collectives. */
static int ringCollectives(struct Rank* k) {
  const int rank = k->rank, nranks = k->nranks;
  const size_t n = COUNT;
  ncclComm_t comm = k->comm;
  int rc;

  /* AllReduce: sum of floats. */
  CHECK_NCCL(ncclAllReduce(k->fsend, k->frecv, n, ncclFloat, ncclSum, comm, k->stream), 31);
  CHECK_CUDA(cudaMemcpyAsync(k->fhost, k->frecv, n * sizeof(float), cudaMemcpyDeviceToHost, k->stream), 32);
  CHECK_CUDA(cudaStreamSynchronize(k->stream), 33);
  for (size_t i = 0; i < n; ++i)
    if (k->fhost[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 17)) return 34;

  /* AllGather of int32 blocks. */
  CHECK_NCCL(ncclAllGather(k->isend, k->irecv, n, ncclInt32, comm, k->stream), 35);
  if ((rc = fetchInts(k, n * nranks, 36))) return rc;
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (k->ihost[r * n + i] != ivalue(r, i)) return 38;

  /* ReduceScatter: max of int32. Block `rank` of every rank's input. */
  CHECK_NCCL(ncclReduceScatter(k->isend, k->irecv, n, ncclInt32, ncclMax, comm, k->stream), 39);
  if ((rc = fetchInts(k, n, 40))) return rc;
  for (size_t i = 0; i < n; ++i)
    if (k->ihost[i] != ivalue(nranks - 1, rank * n + i)) return 42;

  /* Broadcast from the last rank, in place. */
  CHECK_CUDA(cudaMemcpyAsync(k->frecv, k->fsend, n * sizeof(float), cudaMemcpyDeviceToDevice, k->stream), 43);
  CHECK_NCCL(ncclBroadcast(k->frecv, k->frecv, n, ncclFloat, nranks - 1, comm, k->stream), 44);
  CHECK_CUDA(cudaMemcpyAsync(k->fhost, k->frecv, n * sizeof(float), cudaMemcpyDeviceToHost, k->stream), 45);
  CHECK_CUDA(cudaStreamSynchronize(k->stream), 46);
  for (size_t i = 0; i < n; ++i)
    if (k->fhost[i] != (float)nranks * (float)(i % 17)) return 47;

  /* Reduce (sum of int32) to rank 0, on CUDA's default stream. */
  CHECK_NCCL(ncclReduce(k->isend, k->irecv, n, ncclInt32, ncclSum, 0, comm, NULL), 48);
  CHECK_CUDA(cudaMemcpy(k->ihost, k->irecv, n * sizeof(int32_t), cudaMemcpyDeviceToHost), 49);
  if (rank == 0)
    for (size_t i = 0; i < n; ++i)
      if (k->ihost[i] != (int32_t)(1000 * nranks * (nranks - 1) / 2 + nranks * (int)(i % 101))) return 50;
  return 0;
}

/* Point-to-point: a Send/Recv ring in a group, AlltoAll, Gather, Scatter. */
static int pointToPoint(struct Rank* k) {
  const int rank = k->rank, nranks = k->nranks;
  const size_t n = COUNT;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks, root = nranks - 1;
  ncclComm_t comm = k->comm;
  int rc;

  CHECK_NCCL(ncclGroupStart(), 70);
  CHECK_NCCL(ncclSend(k->isend, n, ncclInt32, next, comm, k->stream), 71);
  CHECK_NCCL(ncclRecv(k->irecv, n, ncclInt32, prev, comm, k->stream), 72);
  CHECK_NCCL(ncclGroupEnd(), 73);
  if ((rc = fetchInts(k, n, 74))) return rc;
  for (size_t i = 0; i < n; ++i)
    if (k->ihost[i] != ivalue(prev, i)) return 76;

  /* AlltoAll: block r of my output is block `rank` of rank r's input. */
  CHECK_NCCL(ncclAlltoAll(k->isend, k->irecv, n, ncclInt32, comm, k->stream), 90);
  if ((rc = fetchInts(k, n * nranks, 91))) return rc;
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (k->ihost[r * n + i] != ivalue(r, rank * n + i)) return 93;

  /* Gather to the last rank: block r is rank r's first block. */
  CHECK_NCCL(ncclGather(k->isend, k->irecv, n, ncclInt32, root, comm, k->stream), 94);
  if ((rc = fetchInts(k, n * nranks, 95))) return rc;
  if (rank == root)
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < n; ++i)
        if (k->ihost[r * n + i] != ivalue(r, i)) return 97;

  /* Scatter from rank 0: I get block `rank` of rank 0's input. */
  CHECK_NCCL(ncclScatter(k->isend, k->irecv, n, ncclInt32, 0, comm, k->stream), 98);
  if ((rc = fetchInts(k, n, 110))) return rc;
  for (size_t i = 0; i < n; ++i)
    if (k->ihost[i] != ivalue(0, rank * n + i)) return 112;
  return 0;
}

/* An in-place AllReduce captured into a CUDA graph (global capture mode, as
 * PyTorch's CUDA graphs use), replayed twice. */
static int graphReplay(struct Rank* k) {
  const int rank = k->rank, nranks = k->nranks;
  const size_t n = COUNT;
  ncclComm_t comm = k->comm;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaMemcpyAsync(k->frecv, k->fsend, n * sizeof(float), cudaMemcpyDeviceToDevice, k->stream), 113);
  CHECK_CUDA(cudaStreamSynchronize(k->stream), 114);
  CHECK_CUDA(cudaStreamBeginCapture(k->stream, cudaStreamCaptureModeGlobal), 115);
  CHECK_NCCL(ncclAllReduce(k->frecv, k->frecv, n, ncclFloat, ncclSum, comm, k->stream), 116);
  CHECK_CUDA(cudaStreamEndCapture(k->stream, &graph), 117);
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0), 118);
  CHECK_CUDA(cudaGraphLaunch(exec, k->stream), 119);
  CHECK_CUDA(cudaGraphLaunch(exec, k->stream), 120);
  CHECK_CUDA(cudaMemcpyAsync(k->fhost, k->frecv, n * sizeof(float), cudaMemcpyDeviceToHost, k->stream), 121);
  CHECK_CUDA(cudaStreamSynchronize(k->stream), 122);
  for (size_t i = 0; i < n; ++i)
    if (k->fhost[i] != (float)(nranks * nranks * (nranks + 1) / 2) * (float)(i % 17)) return 123;
  CHECK_CUDA(cudaGraphExecDestroy(exec), 124);
  CHECK_CUDA(cudaGraphDestroy(graph), 125);
  return 0;
}

/* 77 (skipped) when the process sees no CUDA device. */
static int rankMain(int rank, int nranks, int localRank, ncclUniqueId id) {
  struct Rank k = {rank, nranks, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  ncclComm_t comm = NULL;
  const size_t n = COUNT;
  int dev = -1, devices = 0, rc;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return SKIPPED;
  k.fhost = malloc(n * nranks * sizeof(float));
  k.ihost = malloc(n * nranks * sizeof(int32_t));
  /* With fewer devices than ranks (a one-GPU machine) ranks share them, which
   * the CMake test allows with PLAIT_ALLOW_SHARED_DEVICE=1. */
  CHECK_CUDA(cudaSetDevice(localRank % devices), 20);
  CHECK_CUDA(cudaStreamCreate(&k.stream), 21);
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank), 22);
  k.comm = comm;
  CHECK_NCCL(ncclCommCuDevice(comm, &dev), 23);
  if (dev != localRank % devices) return 24;
  CHECK_CUDA(cudaMalloc((void**)&k.fsend, n * nranks * sizeof(float)), 25);
  CHECK_CUDA(cudaMalloc((void**)&k.frecv, n * nranks * sizeof(float)), 26);
  CHECK_CUDA(cudaMalloc((void**)&k.isend, n * nranks * sizeof(int32_t)), 27);
  /* ncclMemAlloc gives device memory of the current device, as NCCL's does. */
  CHECK_NCCL(ncclMemAlloc((void**)&k.irecv, n * nranks * sizeof(int32_t)), 28);
  struct cudaPointerAttributes attr;
  CHECK_CUDA(cudaPointerGetAttributes(&attr, k.irecv), 28);
  if (attr.type != cudaMemoryTypeDevice || attr.device != localRank % devices) return 28;
  for (size_t i = 0; i < n * nranks; ++i) {
    k.fhost[i] = (float)(rank + 1) * (float)(i % 17);
    k.ihost[i] = ivalue(rank, i);
  }
  CHECK_CUDA(cudaMemcpyAsync(k.fsend, k.fhost, n * nranks * sizeof(float), cudaMemcpyHostToDevice, k.stream), 29);
  CHECK_CUDA(cudaMemcpyAsync(k.isend, k.ihost, n * nranks * sizeof(int32_t), cudaMemcpyHostToDevice, k.stream), 30);
  CHECK_CUDA(cudaStreamSynchronize(k.stream), 30);
  if ((rc = ringCollectives(&k))) return rc;
  if ((rc = pointToPoint(&k))) return rc;
  if ((rc = graphReplay(&k))) return rc;

  CHECK_NCCL(ncclMemFree(k.irecv), 61);
  CHECK_NCCL(ncclCommDestroy(comm), 60);
  cudaFree(k.fsend);
  cudaFree(k.frecv);
  cudaFree(k.isend);
  cudaStreamDestroy(k.stream);
  free(k.fhost);
  free(k.ihost);
  return 0;
}

/* `device_conformance abort`: rank 1 dies (SIGKILL) after init; rank 0's
 * AllReduce kernel waits on it until ncclCommAbort, which must end the kernel
 * (its stream drains) within seconds. */
static int abortMain(void) {
  const int rank = 0;
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  cudaStream_t stream;
  float* buf;
  int devices = 0, status = 0;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  const pid_t child = fork();
  if (child == 0) {
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) _exit(SKIPPED);
    if (cudaSetDevice(1 % devices) != cudaSuccess || ncclCommInitRank(&comm, 2, id, 1) != ncclSuccess) _exit(2);
    raise(SIGKILL);
    _exit(3);
  }
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    waitpid(child, &status, 0);
    printf("device conformance (abort): no CUDA device visible: skipped\n");
    return SKIPPED;
  }
  CHECK_CUDA(cudaSetDevice(0), 130);
  CHECK_NCCL(ncclCommInitRank(&comm, 2, id, 0), 131);
  if (waitpid(child, &status, 0) != child || !WIFSIGNALED(status)) return 132;
  CHECK_CUDA(cudaStreamCreate(&stream), 133);
  CHECK_CUDA(cudaMalloc((void**)&buf, (1 << 20) * sizeof(float)), 134);
  CHECK_NCCL(ncclAllReduce(buf, buf, 1 << 20, ncclFloat, ncclSum, comm, stream), 135);
  usleep(300 * 1000);
  if (cudaStreamQuery(stream) != cudaErrorNotReady) return 136; /* it must still wait on the dead peer */
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  CHECK_NCCL(ncclCommAbort(comm), 137);
  cudaError_t q;
  double waited = 0;
  while ((q = cudaStreamQuery(stream)) == cudaErrorNotReady && waited < 30) {
    usleep(5000);
    clock_gettime(CLOCK_MONOTONIC, &now);
    waited = (double)(now.tv_sec - start.tv_sec) + 1e-9 * (double)(now.tv_nsec - start.tv_nsec);
  }
  printf("device conformance (abort): the kernel waiting on a killed peer ended %.3f s after ncclCommAbort: %s\n",
         waited, q == cudaSuccess ? "ok" : "FAILED");
  if (q != cudaSuccess || waited > 5) return 138;
  cudaFree(buf);
  cudaStreamDestroy(stream);
  return 0;
}

/* `device_conformance kill`, launched (tests/net/netns.sh --kill-node): runs
 * 1 MiB AllReduces on device buffers until one fails, as tests/net/
 * net_kill_rank does on host buffers: once another node is killed, the
 * kernel waiting on it must end and ncclCommGetAsyncError say ncclRemoteError
 * within the deadline. Exit 0 for that, 1 for anything else, 2 when it could
 * not start. */
static int killMain(int rank, int nranks, int localRank, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  cudaStream_t stream;
  float* buf;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 2;
  if (cudaSetDevice(localRank % devices) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) return 2;
  if (cudaMalloc((void**)&buf, (1 << 18) * sizeof(float)) != cudaSuccess) return 2;
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(NULL));
    return 2;
  }
  printf("net_kill_rank: rank %d: running (device buffers)\n", rank);
  fflush(stdout);
  const char* timeout = getenv("PLAIT_TIMEOUT");
  const double limit = (timeout ? atof(timeout) : 60.0) + 30.0;
  ncclResult_t rc = ncclSuccess, async = ncclSuccess;
  struct timespec start, now;
  double waited = 0;
  while (rc == ncclSuccess && async == ncclSuccess) {
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = ncclAllReduce(buf, buf, 1 << 18, ncclFloat, ncclMax, comm, stream);
    cudaError_t q = cudaErrorNotReady;
    waited = 0;
    while (rc == ncclSuccess && (q = cudaStreamQuery(stream)) == cudaErrorNotReady && waited < limit) {
      usleep(2000);
      clock_gettime(CLOCK_MONOTONIC, &now);
      waited = (double)(now.tv_sec - start.tv_sec) + 1e-9 * (double)(now.tv_nsec - start.tv_nsec);
    }
    if (rc == ncclSuccess && q != cudaSuccess) {
      printf("net_kill_rank: rank %d: the AllReduce kernel still ran %.1f s later\n", rank, waited);
      return 1;
    }
    if (rc == ncclSuccess) ncclCommGetAsyncError(comm, &async);
  }
  const ncclResult_t got = rc != ncclSuccess ? rc : async;
  printf("net_kill_rank: rank %d: %s after %.0f ms: %s\n", rank, ncclGetErrorString(got), waited * 1000,
         ncclGetLastError(comm));
  fflush(stdout);
  ncclCommAbort(comm);
  return got == ncclRemoteError ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "abort") == 0) return abortMain();
  ncclUniqueId id;
  const char* launchedRank = getenv("PLAIT_RANK");
  const char* launchedRanks = getenv("PLAIT_NRANKS");
  if (argc == 2 && strcmp(argv[1], "kill") == 0 && launchedRank && launchedRanks) {
    const char* local = getenv("PLAIT_LOCAL_RANK");
    if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
    return killMain(atoi(launchedRank), atoi(launchedRanks), local ? atoi(local) : atoi(launchedRank), id);
  }
  if (argc == 1 && launchedRank && launchedRanks) {
    const char* local = getenv("PLAIT_LOCAL_RANK");
    const int rank = atoi(launchedRank), nranks = atoi(launchedRanks);
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1; /* the same on every rank: NCCL_COMM_ID */
    const int rc = rankMain(rank, nranks, local ? atoi(local) : rank, id);
    printf("device conformance: rank %d of %d (launched): %s (%d)\n", rank, nranks,
           rc == 0 ? "ok" : rc == SKIPPED ? "skipped" : "FAILED", rc);
    return rc;
  }
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  for (int r = 1; r < nranks; ++r)
    if (fork() == 0) _exit(rankMain(r, nranks, r, id));
  const int rc0 = rankMain(0, nranks, 0, id);
  int skipped = rc0 == SKIPPED, rc = rc0 == SKIPPED ? 0 : rc0;
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    wait(&status);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
    skipped = skipped && code == SKIPPED;
    if (code != 0 && code != SKIPPED && rc == 0) rc = 100 + code;
  }
  if (skipped) {
    printf("device conformance: no CUDA device visible: skipped\n");
    return SKIPPED;
  }
  printf("device conformance: %d ranks, cudaMalloc'd buffers on streams, NVIDIA's nccl.h, Plait's libnccl.so.2: %s (%d)\n",
         nranks, rc == 0 ? "ok" : "FAILED", rc);
  return rc;
}
