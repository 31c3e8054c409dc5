/* vmm_probe.c — can ranks map each other's GPU memory at NCCL's flat window
 * layout? The device API (nccl_device.h) addresses LSA rank p's copy of a
 * window at lsaFlatBase + p * stride, stride a multiple of 4 GiB, which needs
 * CUDA's virtual memory management: each rank creates its memory with
 * cuMemCreate (exportable as a POSIX fd), passes the fd to its peers
 * (SCM_RIGHTS over a Unix socket), and every rank maps every copy into one
 * reserved range at fixed offsets. This program checks exactly that on a
 * real GPU before Plait builds on it: N forked processes (sharing the GPU
 * when there is one), each writes its rank into its copy, then reads every
 * peer's copy through its own mapping of the range. Also prints what each
 * step costs.
 *
 * Build (links the driver API): cc vmm_probe.c -I$CUDA/include -L$CUDA/lib64/stubs -lcuda -o vmm_probe
 * Run: vmm_probe [N]   (exit 0: every rank read every peer's value; 77: no GPU) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 8
#define CHECK(call)                                                                \
  do {                                                                             \
    CUresult rc_ = (call);                                                         \
    if (rc_ != CUDA_SUCCESS) {                                                     \
      const char* s_ = "?";                                                        \
      cuGetErrorName(rc_, &s_);                                                    \
      fprintf(stderr, "rank %d: %s failed: %s (%d)\n", rank, #call, s_, (int)rc_); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

static double nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int sendFd(int sock, int fd, int from) {
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {&from, sizeof from};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &m, 0) == (ssize_t)sizeof from ? 0 : -1;
}

static int recvFd(int sock, int* from) {
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {from, sizeof *from};
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  if (recvmsg(sock, &m, 0) != (ssize_t)sizeof *from) return -1;
  struct cmsghdr* c = CMSG_FIRSTHDR(&m);
  if (c == NULL || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/* links[a][b]: the socket rank a uses to talk to rank b. */
static int links[MAXR][MAXR];

static int rankMain(int rank, int n) {
  const size_t stride = (size_t)1 << 32;
  double t0 = nowMs();
  CUdevice dev;
  CUcontext ctx;
  int vmm = 0, posix = 0, count = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return 77;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  CHECK(cuDeviceGetAttribute(&posix, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  if (!vmm || !posix) {
    fprintf(stderr, "rank %d: VMM %d, POSIX fd handles %d: unsupported\n", rank, vmm, posix);
    return 2;
  }
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  const size_t bytes = gran;
  double t1 = nowMs();
  CUmemGenericAllocationHandle mine, handles[MAXR] = {0};
  CHECK(cuMemCreate(&mine, bytes, &prop, 0));
  int fd = -1;
  CHECK(cuMemExportToShareableHandle(&fd, mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  double t2 = nowMs();
  for (int p = 0; p < n; ++p)
    if (p != rank && sendFd(links[rank][p], fd, rank) != 0) return 3;
  handles[rank] = mine;
  for (int k = 0; k < n - 1; ++k) {
    int from = -1;
    int got = -1;
    /* each peer's socket carries exactly its fd */
    for (int p = 0; p < n && got < 0; ++p) {
      if (p == rank || handles[p] != 0) continue;
      got = recvFd(links[rank][p], &from);
      if (got < 0 || from != p) return 4;
      CHECK(cuMemImportFromShareableHandle(&handles[p], (void*)(intptr_t)got, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      close(got);
    }
  }
  double t3 = nowMs();
  CUdeviceptr base = 0;
  CHECK(cuMemAddressReserve(&base, stride * n, stride, 0, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int p = 0; p < n; ++p) {
    CHECK(cuMemMap(base + p * stride, bytes, 0, handles[p], 0));
    CHECK(cuMemSetAccess(base + p * stride, bytes, &access, 1));
  }
  double t4 = nowMs();
  CHECK(cuMemsetD32(base + rank * stride, 0x1000 + (unsigned)rank, bytes / 4));
  CHECK(cuCtxSynchronize());
  char go = 1;
  for (int p = 0; p < n; ++p)  /* a barrier: everyone wrote */
    if (p != rank && write(links[rank][p], &go, 1) != 1) return 5;
  for (int p = 0; p < n; ++p)
    if (p != rank && read(links[rank][p], &go, 1) != 1) return 5;
  int bad = 0;
  for (int p = 0; p < n; ++p) {
    uint32_t first = 0, last = 0;
    CHECK(cuMemcpyDtoH(&first, base + p * stride, 4));
    CHECK(cuMemcpyDtoH(&last, base + p * stride + bytes - 4, 4));
    if (first != 0x1000u + (unsigned)p || last != 0x1000u + (unsigned)p) {
      fprintf(stderr, "rank %d: copy of rank %d reads 0x%x / 0x%x\n", rank, p, first, last);
      bad = 1;
    }
  }
  for (int p = 0; p < n; ++p)  /* nobody unmaps while a peer still reads */
    if (p != rank && write(links[rank][p], &go, 1) != 1) return 5;
  for (int p = 0; p < n; ++p)
    if (p != rank && read(links[rank][p], &go, 1) != 1) return 5;
  for (int p = 0; p < n; ++p) {
    CHECK(cuMemUnmap(base + p * stride, bytes));
    CHECK(cuMemRelease(handles[p]));
  }
  CHECK(cuMemAddressFree(base, stride * n));
  close(fd);
  printf("rank %d: granularity %zu KiB; init %.1f ms, create+export %.2f ms, fd exchange+import %.2f ms, reserve "
         "%d x 4 GiB + map %.2f ms; read every peer's copy through the flat range: %s\n",
         rank, gran >> 10, t1 - t0, t2 - t1, t3 - t2, n, t4 - t3, bad ? "WRONG" : "ok");
  fflush(stdout);
  return bad;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 2 || n > MAXR) n = 2;
  int rank = 0;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
      links[a][b] = sv[0];
      links[b][a] = sv[1];
    }
  /* Fork before any CUDA call: a child of a process that initialised the
   * driver cannot use it. */
  pid_t pids[MAXR];
  for (int r = 1; r < n; ++r)
    if ((pids[r] = fork()) == 0) _exit(rankMain(r, n));
  int rc = rankMain(rank, n);
  if (rc == 77) {
    for (int r = 1; r < n; ++r) kill(pids[r], SIGKILL);
    printf("vmm_probe: no CUDA device: skipped\n");
    return 77;
  }
  for (int r = 1; r < n; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = rc ? rc : 10 + r;
  }
  printf("vmm_probe: %d ranks: %s\n", n, rc == 0 ? "ok" : "FAILED");
  return rc;
}
