/* The device drop-in check: C, compiled against NVIDIA's nccl.h and the CUDA
 * toolkit's runtime header only, linked against Plait's libnccl.so.2 and the
 * emulated CUDA runtime (in place of libcudart). Forks N ranks; each takes
 * CUDA device `rank`, allocates with cudaMalloc, runs the collectives on its
 * own stream and checks the results it copies back.
 * Usage: device_conformance N */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT 10007

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

static int rankMain(int rank, int nranks, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  cudaStream_t stream;
  float *fsend, *frecv;
  int32_t *isend, *irecv;
  size_t n = COUNT;
  int dev = -1;
  float* fhost = malloc(n * nranks * sizeof(float));
  int32_t* ihost = malloc(n * nranks * sizeof(int32_t));
  CHECK_CUDA(cudaSetDevice(rank), 20);
  CHECK_CUDA(cudaStreamCreate(&stream), 21);
  CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank), 22);
  CHECK_NCCL(ncclCommCuDevice(comm, &dev), 23);
  if (dev != rank) return 24;
  CHECK_CUDA(cudaMalloc((void**)&fsend, n * nranks * sizeof(float)), 25);
  CHECK_CUDA(cudaMalloc((void**)&frecv, n * nranks * sizeof(float)), 26);
  CHECK_CUDA(cudaMalloc((void**)&isend, n * nranks * sizeof(int32_t)), 27);
  CHECK_CUDA(cudaMalloc((void**)&irecv, n * nranks * sizeof(int32_t)), 28);
  for (size_t i = 0; i < n * nranks; ++i) {
    fhost[i] = (float)(rank + 1) * (float)(i % 17);
    ihost[i] = (int32_t)(rank * 1000 + i % 101);
  }
  CHECK_CUDA(cudaMemcpyAsync(fsend, fhost, n * nranks * sizeof(float), cudaMemcpyHostToDevice, stream), 29);
  CHECK_CUDA(cudaMemcpyAsync(isend, ihost, n * nranks * sizeof(int32_t), cudaMemcpyHostToDevice, stream), 30);

  /* AllReduce: sum of floats. */
  CHECK_NCCL(ncclAllReduce(fsend, frecv, n, ncclFloat, ncclSum, comm, stream), 31);
  CHECK_CUDA(cudaMemcpyAsync(fhost, frecv, n * sizeof(float), cudaMemcpyDeviceToHost, stream), 32);
  CHECK_CUDA(cudaStreamSynchronize(stream), 33);
  for (size_t i = 0; i < n; ++i)
    if (fhost[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 17)) return 34;

  /* AllGather of int32 blocks. */
  CHECK_NCCL(ncclAllGather(isend, irecv, n, ncclInt32, comm, stream), 35);
  CHECK_CUDA(cudaMemcpyAsync(ihost, irecv, n * nranks * sizeof(int32_t), cudaMemcpyDeviceToHost, stream), 36);
  CHECK_CUDA(cudaStreamSynchronize(stream), 37);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (ihost[r * n + i] != (int32_t)(r * 1000 + i % 101)) return 38;

  /* ReduceScatter: max of int32. Block `rank` of every rank's input. */
  CHECK_NCCL(ncclReduceScatter(isend, irecv, n, ncclInt32, ncclMax, comm, stream), 39);
  CHECK_CUDA(cudaMemcpyAsync(ihost, irecv, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream), 40);
  CHECK_CUDA(cudaStreamSynchronize(stream), 41);
  for (size_t i = 0; i < n; ++i)
    if (ihost[i] != (int32_t)((nranks - 1) * 1000 + (rank * n + i) % 101)) return 42;

  /* Broadcast from the last rank, in place. */
  CHECK_CUDA(cudaMemcpyAsync(frecv, fsend, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), 43);
  CHECK_NCCL(ncclBroadcast(frecv, frecv, n, ncclFloat, nranks - 1, comm, stream), 44);
  CHECK_CUDA(cudaMemcpyAsync(fhost, frecv, n * sizeof(float), cudaMemcpyDeviceToHost, stream), 45);
  CHECK_CUDA(cudaStreamSynchronize(stream), 46);
  for (size_t i = 0; i < n; ++i)
    if (fhost[i] != (float)nranks * (float)(i % 17)) return 47;

  /* Reduce (sum of int32) to rank 0, on CUDA's default stream. */
  CHECK_NCCL(ncclReduce(isend, irecv, n, ncclInt32, ncclSum, 0, comm, NULL), 48);
  CHECK_CUDA(cudaMemcpy(ihost, irecv, n * sizeof(int32_t), cudaMemcpyDeviceToHost), 49);
  if (rank == 0)
    for (size_t i = 0; i < n; ++i)
      if (ihost[i] != (int32_t)(1000 * nranks * (nranks - 1) / 2 + nranks * (int)(i % 101))) return 50;

  CHECK_NCCL(ncclCommDestroy(comm), 60);
  cudaFree(fsend);
  cudaFree(frecv);
  cudaFree(isend);
  cudaFree(irecv);
  cudaStreamDestroy(stream);
  free(fhost);
  free(ihost);
  return 0;
}

int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  for (int r = 1; r < nranks; ++r)
    if (fork() == 0) _exit(rankMain(r, nranks, id));
  int rc = rankMain(0, nranks, id);
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = rc ? rc : 100 + WEXITSTATUS(status);
  }
  printf("device conformance: %d ranks, cudaMalloc'd buffers on streams, NVIDIA's nccl.h, Plait's libnccl.so.2: %s (%d)\n",
         nranks, rc == 0 ? "ok" : "FAILED", rc);
  return rc;
}
