// emu_fault_check — the emulator catches kernels that are wrong on a GPU:
//   - threads of a block that reach different __syncthreads (on a GPU a hang
//     or silent corruption): the process must die by SIGABRT naming both
//     barriers (two different emu_kernels.cu lines);
//   - under ThreadSanitizer (PLAIT_SANITIZE_THREAD), a __shared__ value read
//     by one thread and written by another with no barrier between: TSan
//     must report a data race in emu_kernels.cu.
// Each kernel runs in a child process. Exit 0 when every fault is caught, 1
// otherwise (with the reason).
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <regex>
#include <string>

#include "emu_kernels.h"

namespace {

struct Child {
  int status = 0;
  std::string err;  // what it wrote to stderr
};

Child runInChild(const std::function<void()>& body) {
  Child c;
  int fds[2];
  if (pipe(fds) != 0) return c;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    body();
    _exit(0);
  }
  close(fds[1]);
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) c.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, &c.status, 0);
  return c;
}

void launch(const void* kernel, unsigned threads) {
  int* x = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int));
  void* args[] = {&x};
  cudaLaunchKernel(kernel, dim3(1), dim3(threads), args, 0, nullptr);
  cudaDeviceSynchronize();
}

bool divergentBarrierCaught() {
  Child c = runInChild([] { launch(plait_emu_test::divergentKernel(), 64); });
  std::fprintf(stderr, "divergent kernel: %s", c.err.c_str());
  if (!WIFSIGNALED(c.status) || WTERMSIG(c.status) != SIGABRT) {
    std::fprintf(stderr, "FAIL: the child was not aborted (status %d)\n", c.status);
    return false;
  }
  std::smatch m;
  const std::regex sites("thread (\\d+) at .*emu_kernels\\.cu:(\\d+), thread (\\d+) at .*emu_kernels\\.cu:(\\d+)");
  if (!std::regex_search(c.err, m, sites) || m[2] == m[4]) {
    std::fprintf(stderr, "FAIL: the message does not name two different barriers\n");
    return false;
  }
  std::printf("divergent barriers caught: lines %s and %s\n", m[2].str().c_str(), m[4].str().c_str());
  return true;
}

bool raceCaught() {
#if defined(__SANITIZE_THREAD__)
  Child c = runInChild([] { launch(plait_emu_test::racyKernel(), 32); });
  const bool reported = c.err.find("WARNING: ThreadSanitizer: data race") != std::string::npos &&
                        c.err.find("emu_kernels.cu") != std::string::npos;
  if (!reported) {
    std::fprintf(stderr, "racy kernel: %s\nFAIL: ThreadSanitizer did not report the race\n", c.err.c_str());
    return false;
  }
  std::printf("unsynchronised __shared__ access caught by ThreadSanitizer\n");
#endif
  return true;
}

}  // namespace

int main() {
  const bool barrier = divergentBarrierCaught();
  const bool race = raceCaught();
  return barrier && race ? 0 : 1;
}
