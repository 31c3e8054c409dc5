// perf/micro/cma_vs_memcpy.cc — process_vm_readv (cross-memory attach) versus memcpy
// bandwidth on this machine, which decides PLAIT_P2P_CMA's default.
// Build and run: g++ -O2 -o /tmp/cma perf/micro/cma_vs_memcpy.cc && /tmp/cma
#include <sys/uio.h>
#include <unistd.h>
#include <sys/wait.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <signal.h>
int main() {
  for (size_t sz : {size_t(256<<10), size_t(1<<20), size_t(4<<20), size_t(64<<20)}) {
    std::vector<char> src(sz, 1), dst(sz, 0);
    int p[2]; pipe(p);
    pid_t pid = fork();
    if (pid == 0) { char c; read(p[0], &c, 1); _exit(0); }
    auto t0 = std::chrono::steady_clock::now();
    int reps = int((256<<20) / sz);
    for (int i = 0; i < reps; ++i) { iovec l{dst.data(), sz}, r{src.data(), sz}; process_vm_readv(pid, &l, 1, &r, 1, 0); }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) memcpy(dst.data(), src.data(), sz);
    auto t2 = std::chrono::steady_clock::now();
    double a = std::chrono::duration<double>(t1-t0).count(), b = std::chrono::duration<double>(t2-t1).count();
    printf("%zu: cma %.2f GB/s memcpy %.2f GB/s\n", sz, reps*sz/a/1e9, reps*sz/b/1e9);
    write(p[1], "x", 1); waitpid(pid, nullptr, 0);
  }
}
