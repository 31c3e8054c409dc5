#include "base/cma.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

namespace plait {

int cmaRead(int pid, void* dst, uint64_t remote, size_t bytes) {
  // The pid and address come from a peer: never read this process itself
  // (that would be a plain memcpy from any address the peer names), and
  // refuse ranges that wrap around or start at the null page.
  if (pid <= 0 || pid == static_cast<int>(getpid())) return EINVAL;  // getpid not cached: forked ranks
  if (bytes == 0) return 0;
  if (remote < 4096 || remote + bytes < remote || bytes > static_cast<size_t>(SSIZE_MAX)) return EFAULT;
  char* out = static_cast<char*>(dst);
  while (bytes > 0) {
    iovec local{out, bytes};
    iovec far{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    out += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return 0;
}

const uint64_t* cmaProbeWord() {
  static const uint64_t word = std::random_device{}() * 0x9e3779b97f4a7c15ULL + 1;
  return &word;
}

std::string cmaErrorText(int pid, int err) {
  if (err == EINVAL && (pid <= 0 || pid == static_cast<int>(getpid())))
    return "cross-memory read from pid " + std::to_string(pid) + " refused: " +
           (pid <= 0 ? "not a process id" : "that is this process itself");
  return "process_vm_readv from pid " + std::to_string(pid) + " failed: " + std::strerror(err);
}

}  // namespace plait
