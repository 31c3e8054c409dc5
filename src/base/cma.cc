#include "base/cma.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

namespace plait {

namespace {

// One loop for both directions: process_vm_readv / process_vm_writev may
// move fewer bytes than asked.
int cmaCopy(int pid, char* local, uint64_t remote, size_t bytes, bool write) {
  // The pid and address come from a peer: never touch this process itself
  // (that would be a plain memcpy at any address the peer names), and
  // refuse ranges that wrap around or start at the null page.
  if (pid <= 0 || pid == static_cast<int>(getpid())) return EINVAL;  // getpid not cached: forked ranks
  if (bytes == 0) return 0;
  if (remote < 4096 || remote + bytes < remote || bytes > static_cast<size_t>(SSIZE_MAX)) return EFAULT;
  while (bytes > 0) {
    iovec near{local, bytes};
    iovec far{reinterpret_cast<void*>(remote), bytes};
    const ssize_t moved =
        write ? process_vm_writev(pid, &near, 1, &far, 1, 0) : process_vm_readv(pid, &near, 1, &far, 1, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (moved == 0) return EFAULT;
    local += moved;
    remote += static_cast<uint64_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
  return 0;
}

}  // namespace

int cmaRead(int pid, void* dst, uint64_t remote, size_t bytes) {
  return cmaCopy(pid, static_cast<char*>(dst), remote, bytes, false);
}

int cmaWrite(int pid, uint64_t remote, const void* src, size_t bytes) {
  return cmaCopy(pid, const_cast<char*>(static_cast<const char*>(src)), remote, bytes, true);
}

std::string cmaPeerPidError(int pid) {
  if (pid <= 0) return "pid " + std::to_string(pid) + " is not a process id";
  if (pid == static_cast<int>(getpid())) return "pid " + std::to_string(pid) + " is this process";
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Tgid:", 0) != 0) continue;
    const long tgid = std::strtol(line.c_str() + 5, nullptr, 10);
    if (tgid == pid) return "";
    if (tgid == static_cast<long>(getpid())) return "pid " + std::to_string(pid) + " is a thread of this process";
    return "pid " + std::to_string(pid) + " is a thread of process " + std::to_string(tgid) + ", not a process";
  }
  return "pid " + std::to_string(pid) + " has no readable /proc/" + std::to_string(pid) + "/status";
}

const uint64_t* cmaProbeWord() {
  static const uint64_t word = std::random_device{}() * 0x9e3779b97f4a7c15ULL + 1;
  return &word;
}

std::string cmaErrorText(int pid, int err, bool write) {
  if (err == EINVAL && (pid <= 0 || pid == static_cast<int>(getpid())))
    return std::string("cross-memory ") + (write ? "write to" : "read from") + " pid " + std::to_string(pid) +
           " refused: " + (pid <= 0 ? "not a process id" : "that is this process itself");
  return std::string(write ? "process_vm_writev to pid " : "process_vm_readv from pid ") + std::to_string(pid) +
         " failed: " + std::strerror(err);
}

}  // namespace plait
