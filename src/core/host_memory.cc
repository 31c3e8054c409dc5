// host_memory.cc — memfd-backed allocations and their process-wide table.
#include "core/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "base/log.h"

namespace plait::host_memory {
namespace {

struct Entry {
  Allocation allocation;
  int registrations = 0;
};

// Keyed by base address. Leaked on purpose: allocations may be freed from
// static destructors of other libraries.
struct Table {
  std::mutex mu;
  std::map<uintptr_t, Entry> entries;
  uint32_t nextGeneration = 1;
};

Table& table() {
  static Table* t = new Table();
  return *t;
}

size_t pageRound(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// The entry whose range holds ptr; t.mu held.
Entry* find(Table& t, const void* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  auto it = t.entries.upper_bound(p);
  if (it == t.entries.begin()) return nullptr;
  --it;
  if (p - it->first >= it->second.allocation.bytes) return nullptr;
  return &it->second;
}

// Successive mappings get successive colours: offsets that are not
// multiples of each other's spacing. 37 is coprime with the colour count, so
// consecutive mappings never share a colour.
size_t nextColour(size_t granule, size_t colours) {
  static std::atomic<uint32_t> counter{0};
  return (counter.fetch_add(1, std::memory_order_relaxed) * 37u % colours) * granule;
}

}  // namespace

void* mapShared(int fd, size_t bytes) {
  constexpr size_t kHuge = 2u << 20;
  const size_t granule = bytes >= kHuge ? kHuge : 4096;
  const size_t colours = bytes >= kHuge ? 16 : 64;
  const size_t colour = nextColour(granule, colours);
  // Reserve room for the colour and for aligning to the granule, then place
  // the mapping inside the reservation and give the rest back.
  const size_t span = bytes + granule * colours + granule;
  void* r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  const uintptr_t start = reinterpret_cast<uintptr_t>(r);
  char* at = reinterpret_cast<char*>((start + granule - 1) / granule * granule + colour);
  const int flags = MAP_SHARED | MAP_FIXED | (fd < 0 ? MAP_ANONYMOUS : 0);
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) {
    const int saved = errno;
    munmap(r, span);
    errno = saved;
    return MAP_FAILED;
  }
  if (at > static_cast<char*>(r)) munmap(r, static_cast<size_t>(at - static_cast<char*>(r)));
  const size_t tail = start + span - (reinterpret_cast<uintptr_t>(at) + bytes);
  if (tail > 0) munmap(at + bytes, tail);
  return p;
}

namespace {

// A memfd of `bytes`, mapped shared; fd -1 and MAP_FAILED on failure (errno
// set). Its size is sealed: any process of our uid can open it through
// /proc/<pid>/fd (uid is the trust boundary, docs/ARCHITECTURE.md), but none
// can shrink it under our mapping (SIGBUS here) or grow it.
void* mapMemfd(size_t bytes, int* fd) {
  *fd = memfd_create("plait-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0) return MAP_FAILED;
  void* p = MAP_FAILED;
  // Unsealed, peers refuse to map it (PeerMappings::open): fail, and the
  // caller takes anonymous memory instead.
  if (ftruncate(*fd, static_cast<off_t>(bytes)) == 0 &&
      fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    p = mapShared(*fd, bytes);
  if (p == MAP_FAILED) {
    const int saved = errno;
    close(*fd);
    *fd = -1;
    errno = saved;
  }
  return p;
}

}  // namespace

Result<void*> allocate(size_t bytes) {
  if (bytes == 0) return invalidArgument("size is 0");
  const size_t rounded = pageRound(bytes);
  if (rounded < bytes) return invalidArgument("size " + std::to_string(bytes) + " is too large");
  int fd = -1;
  void* p = mapMemfd(rounded, &fd);
  if (p == MAP_FAILED) {
    PLAIT_INFO(kAlloc, "ncclMemAlloc: memfd_create/seal/mmap of %zu bytes failed (%s): anonymous memory instead, "
               "which local peers cannot map", rounded, strerror(errno));
    p = mapShared(-1, rounded);
    if (p == MAP_FAILED) return systemError("mmap of " + std::to_string(rounded) + " bytes");
  }
  // Where shmem may use transparent huge pages on request, ask: large
  // buffers are read through peers' mappings and TLB misses add up.
  if (rounded >= (2u << 20)) (void)madvise(p, rounded, MADV_HUGEPAGE);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Entry e;
  e.allocation = Allocation{p, rounded, fd, t.nextGeneration++};
  if (t.nextGeneration == 0) t.nextGeneration = 1;
  t.entries[reinterpret_cast<uintptr_t>(p)] = e;
  PLAIT_TRACE(kAlloc, "ncclMemAlloc: %zu bytes at %p (fd %d, generation %u)", rounded, p, fd,
              e.allocation.generation);
  return p;
}

Status release(void* base) {
  Allocation a;
  {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.entries.find(reinterpret_cast<uintptr_t>(base));
    if (it == t.entries.end()) {
      if (find(t, base) != nullptr) return invalidArgument("ptr points inside an allocation, not at its start");
      return invalidArgument("ptr was not allocated by ncclMemAlloc (or was already freed)");
    }
    if (it->second.registrations > 0)
      return invalidArgument("ptr is still registered with a communicator (" +
                             std::to_string(it->second.registrations) +
                             " registration(s)); call ncclCommDeregister first");
    a = it->second.allocation;
    t.entries.erase(it);
  }
  munmap(a.base, a.bytes);
  if (a.fd >= 0) close(a.fd);
  return Status::ok();
}

std::optional<Allocation> lookup(const void* ptr) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const Entry* e = find(t, ptr);
  if (e == nullptr) return std::nullopt;
  return e->allocation;
}

void* baseOf(int fd, uint32_t generation, size_t* bytes) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& [base, e] : t.entries)
    if (e.allocation.fd == fd && e.allocation.generation == generation) {
      if (bytes != nullptr) *bytes = e.allocation.bytes;
      return e.allocation.base;
    }
  return nullptr;
}

bool addRegistration(void* base) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.entries.find(reinterpret_cast<uintptr_t>(base));
  if (it == t.entries.end()) return false;
  ++it->second.registrations;
  return true;
}

void dropRegistration(void* base) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.entries.find(reinterpret_cast<uintptr_t>(base));
  if (it != t.entries.end() && it->second.registrations > 0) --it->second.registrations;
}

uint64_t processIdentity() {
  static std::mutex mu;
  static pid_t owner = 0;
  static uint64_t identity = 0;
  std::lock_guard<std::mutex> lock(mu);
  const pid_t pid = getpid();
  if (pid != owner) {
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce))
      nonce = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    identity = (nonce << 32) ^ nonce ^ static_cast<uint64_t>(pid);
    owner = pid;
  }
  return identity;
}

}  // namespace plait::host_memory
