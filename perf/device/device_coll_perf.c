/* device_coll_perf — one collective on CUDA device buffers through the NCCL C
 * API, over a range of sizes, in nccl-tests' columns (size, count, time,
 * algbw, busbw): the library-level figure on a real GPU. C against the NCCL
 * API and the toolkit's runtime only, so it links Plait's libnccl.so.2 or
 * NVIDIA's alike.
 * N ranks are threads, each on device `rank` modulo the devices there are
 * (a one-GPU machine needs PLAIT_ALLOW_SHARED_DEVICE=1): threads share one
 * CUDA context, so ranks on one GPU run their kernels at once, where separate
 * processes would be time-sliced without MPS. Each rank times `iters`
 * back-to-back calls on its stream after 5 warm-up calls; the slowest rank's
 * time is reported. Results are checked once per size (AllReduce: the sum).
 * Built in CUDA builds only: the emulator's timings are not GPU performance.
 *
 * Usage: device_coll_perf NRANKS allreduce|allgather|reducescatter|broadcast|alltoall MIN MAX [ITERS]
 * Sizes in bytes (K, M, G suffixes), doubling by 4. Exit 77: no CUDA device.
 * DEVICE_COLL_PERF_WINDOWS=1: the buffers come from ncclMemAlloc and are
 * registered as NCCL_WIN_COLL_SYMMETRIC windows (Plait then runs AllReduce,
 * AllGather and ReduceScatter as symmetric kernels unless
 * PLAIT_SYMMETRIC_ENABLE=0: the same binary times both). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAlltoAll };
static const char* kNames[] = {"allreduce", "allgather", "reducescatter", "broadcast", "alltoall"};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t parseSize(const char* text) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

/* Per size: elements per rank's send buffer, given nccl-tests' "size" (the larger buffer). */
static size_t countFor(enum Coll c, size_t bytes, int n) {
  size_t elems = bytes / sizeof(float);
  return (c == kAllGather || c == kReduceScatter || c == kAlltoAll) ? elems / (size_t)n : elems;
}

static double busFactor(enum Coll c, int n) {
  switch (c) {
    case kAllReduce: return 2.0 * (n - 1) / n;
    case kBroadcast: return 1.0;
    default: return (double)(n - 1) / n;
  }
}

static ncclResult_t call(enum Coll c, const float* in, float* out, size_t count, ncclComm_t comm, cudaStream_t s) {
  switch (c) {
    case kAllReduce: return ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, s);
    case kAllGather: return ncclAllGather(in, out, count, ncclFloat, comm, s);
    case kReduceScatter: return ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comm, s);
    case kBroadcast: return ncclBroadcast(in, out, count, ncclFloat, 0, comm, s);
    case kAlltoAll: return ncclAlltoAll(in, out, count, ncclFloat, comm, s);
  }
  return ncclInvalidArgument;
}

#define CHECK(cond, what)                                              \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "rank %d: %s failed\n", rank, what);             \
      return 1;                                                        \
    }                                                                  \
  } while (0)

static pthread_barrier_t gReady;
static int gWindows; /* DEVICE_COLL_PERF_WINDOWS=1 */

/* A buffer of `bytes`: cudaMalloc'd, or with gWindows ncclMemAlloc'd and
   registered as a symmetric window (collective: every rank calls it alike). */
static int allocate(ncclComm_t comm, float** p, size_t bytes, ncclWindow_t* win) {
  *win = NULL;
  if (!gWindows) return cudaMalloc((void**)p, bytes) == cudaSuccess;
  return ncclMemAlloc((void**)p, bytes) == ncclSuccess &&
         ncclCommWindowRegister(comm, *p, bytes, win, NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess;
}

static void release(ncclComm_t comm, float* p, ncclWindow_t win) {
  if (!gWindows) {
    cudaFree(p);
    return;
  }
  if (win != NULL) ncclCommWindowDeregister(comm, win);
  ncclMemFree(p);
}

/* times[size index * nranks + rank]: seconds per call; wrong[...]: mismatches. */
static int rankMain(int rank, int n, ncclUniqueId id, enum Coll c, size_t minB, size_t maxB, int iters, double* times,
                    long* wrong) {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0, "cudaGetDeviceCount");
  CHECK(cudaSetDevice(rank % devices) == cudaSuccess, "cudaSetDevice");
  ncclComm_t comm;
  CHECK(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess, "ncclCommInitRank");
  /* Buffers are allocated by every rank before any rank's first call: an
     allocation may wait for the device's running kernels. */
  pthread_barrier_wait(&gReady);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
  const size_t maxElems = maxB / sizeof(float) + 64;
  float *in = NULL, *out = NULL;
  ncclWindow_t inWin = NULL, outWin = NULL;
  CHECK(allocate(comm, &in, maxElems * sizeof(float), &inWin), "allocating the input");
  CHECK(allocate(comm, &out, maxElems * sizeof(float), &outWin), "allocating the output");
  float* host = (float*)malloc(maxElems * sizeof(float));
  CHECK(host != NULL, "malloc");
  for (size_t i = 0; i < maxElems; ++i) host[i] = (float)(rank + 1);
  CHECK(cudaMemcpy(in, host, maxElems * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy");
  pthread_barrier_wait(&gReady);
  int k = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= 4, ++k) {
    const size_t count = countFor(c, bytes, n);
    if (count == 0) continue;
    for (int w = 0; w < 5; ++w) CHECK(call(c, in, out, count, comm, s) == ncclSuccess, kNames[c]);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "warm-up");
    if (c == kAllReduce) {  /* every element is 1 + 2 + ... + n */
      CHECK(cudaMemcpy(host, out, count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy");
      long bad = 0;
      for (size_t i = 0; i < count; ++i) bad += host[i] != (float)(n * (n + 1) / 2);
      wrong[k * n + rank] = bad;
    }
    /* Line up the ranks before timing: a one-element AllReduce. */
    CHECK(ncclAllReduce(in, out, 1, ncclFloat, ncclSum, comm, s) == ncclSuccess, "barrier");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "barrier");
    const double t0 = now();
    for (int i = 0; i < iters; ++i) CHECK(call(c, in, out, count, comm, s) == ncclSuccess, kNames[c]);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "timed calls");
    times[k * n + rank] = (now() - t0) / iters;
  }
  pthread_barrier_wait(&gReady);  /* no cudaFree while a peer's kernel may run */
  release(comm, in, inWin);
  release(comm, out, outWin);
  ncclCommDestroy(comm);
  free(host);
  return 0;
}

struct Args {
  int rank, n;
  ncclUniqueId id;
  enum Coll c;
  size_t minB, maxB;
  int iters;
  double* times;
  long* wrong;
  int rc;
};

static void* rankThread(void* p) {
  struct Args* a = (struct Args*)p;
  a->rc = rankMain(a->rank, a->n, a->id, a->c, a->minB, a->maxB, a->iters, a->times, a->wrong);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s NRANKS allreduce|allgather|reducescatter|broadcast|alltoall MIN MAX [ITERS]\n", argv[0]);
    return 2;
  }
  const int n = atoi(argv[1]);
  int c = -1;
  for (int i = 0; i < 5; ++i)
    if (strcmp(argv[2], kNames[i]) == 0) c = i;
  const size_t minB = parseSize(argv[3]), maxB = parseSize(argv[4]);
  const int iters = argc > 5 ? atoi(argv[5]) : 20;
  const char* windows = getenv("DEVICE_COLL_PERF_WINDOWS");
  gWindows = windows != NULL && strcmp(windows, "1") == 0;
  if (n < 1 || c < 0 || minB < sizeof(float) || maxB < minB || iters < 1) {
    fprintf(stderr, "%s: bad arguments\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("device_coll_perf: no CUDA device visible: skipped\n");
    return 77;
  }
  int sizes = 0;
  for (size_t b = minB; b <= maxB; b *= 4) ++sizes;
  double* times = (double*)calloc((size_t)sizes * n, sizeof(double));
  long* wrong = (long*)calloc((size_t)sizes * n, sizeof(long));
  struct Args* args = (struct Args*)calloc((size_t)n, sizeof(struct Args));
  pthread_t* threads = (pthread_t*)calloc((size_t)n, sizeof(pthread_t));
  ncclUniqueId id;
  if (times == NULL || wrong == NULL || args == NULL || threads == NULL || ncclGetUniqueId(&id) != ncclSuccess) return 1;
  pthread_barrier_init(&gReady, NULL, (unsigned)n);
  for (int r = 0; r < n; ++r) {
    struct Args a = {r, n, id, (enum Coll)c, minB, maxB, iters, times, wrong, 0};
    args[r] = a;
    pthread_create(&threads[r], NULL, rankThread, &args[r]);
  }
  int failed = 0;
  for (int r = 0; r < n; ++r) {
    pthread_join(threads[r], NULL);
    failed |= args[r].rc != 0;
  }
  if (failed) return 1;
  printf("# %s, %d ranks, float, device buffers (%s), %d iterations (slowest rank)\n", kNames[c], n,
         gWindows ? "ncclMemAlloc, symmetric windows" : "cudaMalloc", iters);
  printf("%12s %12s %10s %9s %9s %7s\n", "size(B)", "count", "time(us)", "algbw", "busbw", "#wrong");
  int k = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= 4, ++k) {
    double t = 0;
    long bad = 0;
    for (int r = 0; r < n; ++r) {
      if (times[k * n + r] > t) t = times[k * n + r];
      bad += wrong[k * n + r];
    }
    const size_t count = countFor((enum Coll)c, bytes, n);
    if (count == 0 || t <= 0) continue;
    const double algbw = (double)bytes / t / 1e9;
    printf("%12zu %12zu %10.1f %9.2f %9.2f %7ld\n", bytes, count, t * 1e6, algbw, algbw * busFactor((enum Coll)c, n),
           bad);
    if (bad != 0) failed = 1;
  }
  return failed;
}
