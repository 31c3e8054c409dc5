/* Compiled against NVIDIA's nccl.h (CUDA toolkit) as C, linked against
 * Plait's libnccl.so.2: the drop-in check. Forks N ranks, each runs
 * AllReduce (sum of floats, avg of ints, in place) and queries, and checks
 * the results; built against NCCL 2.32's header, also a per-call
 * configuration and one-sided puts. Usage: conformance N */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* The version the library reports: the header's own, unless the build says
 * the header is newer than the API the library provides (tests/abi). */
#ifndef LIBRARY_NCCL_VERSION
#define LIBRARY_NCCL_VERSION NCCL_VERSION_CODE
#endif

#define COUNT 100003

static int rankMain(int rank, int nranks, ncclUniqueId id) {
  ncclComm_t comm;
  int n = 0, r = -1, version = 0;
  float* buf = malloc(COUNT * sizeof(float));
  int* ints = malloc(COUNT * sizeof(int));
  if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) return 10;
  if (ncclCommCount(comm, &n) != ncclSuccess || n != nranks) return 11;
  if (ncclCommUserRank(comm, &r) != ncclSuccess || r != rank) return 12;
  if (ncclGetVersion(&version) != ncclSuccess || version != LIBRARY_NCCL_VERSION) return 13;
  for (int i = 0; i < COUNT; ++i) {
    buf[i] = (float)(rank + 1) * (float)(i % 13);
    ints[i] = rank * 4 + i % 5;
  }
  if (ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL) != ncclSuccess) return 14;
  if (ncclAllReduce(ints, ints, COUNT, ncclInt32, ncclAvg, comm, NULL) != ncclSuccess) return 15;
  for (int i = 0; i < COUNT; ++i) {
    if (buf[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 13)) return 16;
    if (ints[i] != (4 * nranks * (nranks - 1) / 2 + nranks * (i % 5)) / nranks) return 17;
  }
#if NCCL_VERSION_CODE >= 23200
  /* Built against NCCL 2.32 or later: a per-call configuration (the ring,
   * one channel, a profiler tag) gives the same sums. */
  {
    ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
    config.algSelection = "ring";
    config.maxCTAs = 1;
    config.userProfilerTag = 42;
    for (int i = 0; i < COUNT; ++i) buf[i] = (float)(rank + 1);
    if (ncclAllReduceConfig(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL, &config) != ncclSuccess) return 19;
    for (int i = 0; i < COUNT; ++i)
      if (buf[i] != (float)(nranks * (nranks + 1) / 2)) return 20;
  }
  /* One-sided: every rank puts its number into its slot of every rank's
   * window (its own too) with a signal, then waits for one signal from each. */
  {
    int* slots = calloc((size_t)nranks, sizeof(int));
    ncclWindow_t win = NULL;
    ncclWaitSignalDesc_t* descs = calloc((size_t)nranks, sizeof(ncclWaitSignalDesc_t));
    int mine = rank * 7 + 1;
    if (ncclCommWindowRegister(comm, slots, (size_t)nranks * sizeof(int), &win, NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess)
      return 21;
    for (int q = 0; q < nranks; ++q)
      if (ncclPutSignal(&mine, 1, ncclInt32, q, win, (size_t)rank * sizeof(int), 0, 0, 0, comm, NULL) != ncclSuccess)
        return 22;
    for (int q = 0; q < nranks; ++q) {
      descs[q].opCnt = 1;
      descs[q].peer = q;
    }
    if (ncclWaitSignal(nranks, descs, comm, NULL) != ncclSuccess) return 23;
    for (int q = 0; q < nranks; ++q)
      if (slots[q] != q * 7 + 1) return 24;
    if (ncclCommWindowDeregister(comm, win) != ncclSuccess) return 25;
    free(slots);
    free(descs);
  }
#endif
  if (ncclCommDestroy(comm) != ncclSuccess) return 18;
  free(buf);
  free(ints);
  return 0;
}

/* The ranks are forked before ncclGetUniqueId starts the bootstrap root's
 * thread, and learn the id through a pipe: a child forked from a process
 * with threads may inherit a lock one of them held (and wait on it forever:
 * seen once in CI, a rank that never joined). */
int main(int argc, char** argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 2;
  ncclUniqueId id;
  int pipes[64][2];
  if (nranks < 1 || nranks > 64) return 1;
  for (int r = 1; r < nranks; ++r) {
    if (pipe(pipes[r]) != 0) return 1;
    if (fork() == 0) {
      close(pipes[r][1]);
      if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(2);
      _exit(rankMain(r, nranks, id));
    }
    close(pipes[r][0]);
  }
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  for (int r = 1; r < nranks; ++r) {
    if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
    close(pipes[r][1]);
  }
  int rc = rankMain(0, nranks, id);
  for (int r = 1; r < nranks; ++r) {
    int status = 0;
    wait(&status);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = rc ? rc : 100 + WEXITSTATUS(status);
  }
  printf("conformance: %d ranks via NVIDIA's nccl.h and Plait's libnccl.so.2: %s (%d)\n", nranks,
         rc == 0 ? "OK" : "FAILED", rc);
  return rc;
}
