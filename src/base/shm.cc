#include "base/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/log.h"
#include "base/wait.h"

namespace plait {
namespace {

constexpr const char* kPrefix = "plait-";
constexpr const char* kShmDir = "/dev/shm";

// This process's pid namespace, as the inode of /proc/self/ns/pid ("0" when
// unreadable). Segment names carry it: a pid means something only inside its
// own namespace, so only segments created in ours are judged by pid.
const std::string& pidNamespace() {
  static const std::string ns = [] {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? std::to_string(static_cast<unsigned long long>(st.st_ino))
                                               : std::string("0");
  }();
  return ns;
}

// Removes /dev/shm/plait-<pid>-<our pid namespace>-* of creators that have
// exited or are exiting (processAlive: a killed creator is marked exiting
// before its sockets close, so the peers that saw them close find it so;
// it will never unlink anything again, and waiting for it to become a
// zombie left its segments behind when its exit took longer than the
// peers' clean-up); only `onlyPid`'s when it is positive.
int removeStale(long onlyPid) {
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return 0;
  int removed = 0;
  const size_t prefixLen = std::strlen(kPrefix);
  const std::string ns = "-" + pidNamespace() + "-";
  while (dirent* entry = readdir(dir)) {
    const char* n = entry->d_name;
    if (std::strncmp(n, kPrefix, prefixLen) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(n + prefixLen, &end, 10);
    if (end == n + prefixLen || pid <= 0 || (onlyPid > 0 && pid != onlyPid)) continue;
    if (std::strncmp(end, ns.c_str(), ns.size()) != 0) continue;  // another namespace (or an old name)
    if (processAlive(static_cast<int>(pid))) continue;
    std::string name = std::string("/") + n;
    if (shm_unlink(name.c_str()) == 0) {
      ++removed;
      PLAIT_INFO(kShm, "removed stale shared-memory segment %s (pid %ld is gone)", name.c_str(), pid);
    } else if (errno != ENOENT) {
      PLAIT_INFO(kShm, "could not remove stale shared-memory segment %s: %s", name.c_str(), std::strerror(errno));
    }
  }
  closedir(dir);
  return removed;
}

std::string randomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ (uint64_t(getpid()) << 32) ^
                                          reinterpret_cast<uintptr_t>(&rng));
  char buf[17];
  // The pid is mixed in at every call: a forked child inherits rng's state.
  const uint64_t v = rng() ^ (static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ULL);
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Closes a file descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// The errno-preserving "while X of segment N" failure.
Status segmentError(const char* call, const std::string& name) {
  return systemError(std::string(call) + " of shared-memory segment " + name + " failed");
}

Status noSpaceError(const std::string& name, const std::string& detail) {
  return Status(Code::kSystemError, "not enough space in " + std::string(kShmDir) + " for shared-memory segment " +
                                        name + ": " + detail + " (enlarge it, e.g. docker --shm-size)");
}

Status checkSpace(const std::string& name, size_t bytes) {
  struct statvfs fs;
  if (statvfs(kShmDir, &fs) != 0) return Status::ok();  // cannot tell; let ftruncate/fallocate decide
  uint64_t avail = uint64_t(fs.f_bavail) * fs.f_frsize;
  if (avail >= bytes) return Status::ok();
  return noSpaceError(name, "need " + std::to_string(bytes) + " bytes, " + std::to_string(avail) + " free");
}

Result<void*> mapShared(int fd, const std::string& name, size_t bytes, bool populate) {
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) return segmentError("mmap", name);
  return p;
}

}  // namespace

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)), data_(other.data_), size_(other.size_), linked_(other.linked_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.linked_ = false;
  other.name_.clear();
}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    linked_ = other.linked_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.linked_ = false;
    other.name_.clear();
  }
  return *this;
}

SharedSegment::~SharedSegment() { reset(); }

void SharedSegment::reset() {
  if (data_ != nullptr && munmap(data_, size_) != 0)
    PLAIT_WARN(kShm, "munmap of shared-memory segment %s failed: %s", name_.c_str(), std::strerror(errno));
  if (linked_) {
    Status s = unlink();
    if (!s.isOk()) PLAIT_WARN(kShm, "%s", s.toString().c_str());
  }
  data_ = nullptr;
  size_ = 0;
  linked_ = false;
}

Result<SharedSegment> SharedSegment::create(size_t bytes) { return create(bytes, CreateOptions{}); }

Result<SharedSegment> SharedSegment::create(size_t bytes, const CreateOptions& options) {
  if (bytes == 0) return invalidArgument("shared-memory segment size must be positive");
  std::string name;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    name = "/" + std::string(kPrefix) + std::to_string(getpid()) + "-" + pidNamespace() + "-" + randomSuffix();
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno != EEXIST) return segmentError("shm_open (create)", name);
  }
  if (fd < 0) return segmentError("shm_open (create)", name);
  FdCloser closer{fd};
  // From here on the name exists: the segment object owns it, so any failure unlinks it.
  SharedSegment segment(name, nullptr, 0, /*creator=*/true);
  PLAIT_RETURN_IF_ERROR(checkSpace(name, bytes));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) return segmentError("ftruncate", name);
  if (options.prefault) {
    int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err == ENOSPC)  // other segments, reserved since checkSpace looked, took the rest
      return noSpaceError(name, "posix_fallocate of " + std::to_string(bytes) +
                                    " bytes found no space left (other processes' segments, such as the other local "
                                    "ranks', take as much each)");
    if (err != 0) {
      errno = err;
      return segmentError("posix_fallocate", name);
    }
  }
  PLAIT_ASSIGN_OR_RETURN(void* data, mapShared(fd, name, bytes, options.prefault));
  segment.data_ = data;
  segment.size_ = bytes;
  PLAIT_TRACE(kShm, "created shared-memory segment %s (%zu bytes)", name.c_str(), bytes);
  return segment;
}

Result<SharedSegment> SharedSegment::open(const std::string& name, size_t bytes) {
  if (bytes == 0) return invalidArgument("shared-memory segment size must be positive");
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return segmentError("shm_open", name);
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return segmentError("fstat", name);
  if (static_cast<uint64_t>(st.st_size) < bytes)
    return invalidArgument("shared-memory segment " + name + " has " + std::to_string(st.st_size) +
                           " bytes, fewer than the " + std::to_string(bytes) + " requested");
  PLAIT_ASSIGN_OR_RETURN(void* data, mapShared(fd, name, bytes, false));
  PLAIT_TRACE(kShm, "opened shared-memory segment %s (%zu bytes)", name.c_str(), bytes);
  return SharedSegment(name, data, bytes, /*creator=*/false);
}

bool SharedSegment::populate(size_t offset, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name
#endif
  if (data_ == nullptr || offset > size_ || bytes > size_ - offset) return false;
  const uintptr_t page = 4096;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_) + offset) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_) + offset + bytes;
  return bytes == 0 || ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
}

bool SharedSegment::exists(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  return errno != ENOENT;
}

Status SharedSegment::unlink() {
  if (name_.empty()) return Status::ok();
  linked_ = false;
  // ENOENT: a peer that mapped it unlinked it first (ShmTransport lets every
  // rank unlink every segment once all have mapped them).
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) return segmentError("shm_unlink", name_);
  return Status::ok();
}

int cleanupStaleSegments() { return removeStale(0); }

int cleanupSegmentsOf(int pid) { return pid > 0 ? removeStale(pid) : 0; }

}  // namespace plait
