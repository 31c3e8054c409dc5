// buffer_registry.cc — registrations and peer mappings.
#include "core/buffer_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "base/log.h"
#include "core/device_memory.h"
#include "core/host_memory.h"

namespace plait {

// ---- RegistrationTable --------------------------------------------------------

namespace {

void dropAllocation(const Registration& r) {
  if (r.allocBase != nullptr) host_memory::dropRegistration(r.allocBase);
  if (r.deviceAllocBase != nullptr) device_memory::dropRegistration(r.deviceAllocBase);
}

}  // namespace

RegistrationTable::~RegistrationTable() {
  for (auto& e : entries_) dropAllocation(*e);
}

Result<void*> RegistrationTable::add(void* buff, size_t bytes, RegistrationKind kind) {
  auto reg = std::make_unique<Registration>();
  reg->begin = reinterpret_cast<uintptr_t>(buff);
  reg->bytes = bytes;
  reg->kind = kind;
  if (std::optional<host_memory::Allocation> a = host_memory::lookup(buff)) {
    const uintptr_t allocBegin = reinterpret_cast<uintptr_t>(a->base);
    if (reg->begin - allocBegin + bytes <= a->bytes && host_memory::addRegistration(a->base)) {
      reg->allocBase = a->base;
      reg->fd = a->fd;
      reg->generation = a->generation;
    }
  } else if (void* base = device_memory::baseOf(buff, bytes); base != nullptr && device_memory::addRegistration(base)) {
    reg->deviceAllocBase = base;  // ncclMemFree refuses it until deregistered
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (reg->fd < 0 && reg->deviceAllocBase == nullptr && !loggedForeign_) {
    loggedForeign_ = true;
    PLAIT_INFO(kAlloc, "registered buffer %p (%zu bytes) is not %s: ranks in other processes cannot map it, so "
               "collectives on it take the FIFO path unless every rank is a thread of this process",
               buff, bytes, reg->allocBase ? "shareable ncclMemAlloc memory" : "from ncclMemAlloc");
  }
  entries_.push_back(std::move(reg));
  return static_cast<void*>(entries_.back().get());
}

// The live entry `handle` names, of `kind` (mu_ held); else why not.
Result<std::vector<std::unique_ptr<Registration>>::const_iterator> RegistrationTable::entryOf(
    void* handle, RegistrationKind kind) const {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const auto& e) { return e.get() == handle; });
  if (it != entries_.end() && (*it)->kind == kind) return it;
  char text[64];
  std::snprintf(text, sizeof text, "%p", handle);
  if (it != entries_.end())
    return invalidArgument(std::string("handle ") + text + " is a " +
                           (kind == RegistrationKind::kBuffer ? "window (use ncclCommWindowDeregister)"
                                                              : "buffer registration (use ncclCommDeregister)"));
  return invalidArgument(std::string("handle ") + text +
                         " is not a live registration of this communicator (never registered here, or "
                         "already deregistered)");
}

Result<Registration> RegistrationTable::lookup(void* handle, RegistrationKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  PLAIT_ASSIGN_OR_RETURN(auto it, entryOf(handle, kind));
  return **it;
}

Status RegistrationTable::remove(void* handle, RegistrationKind kind) {
  std::unique_ptr<Registration> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PLAIT_ASSIGN_OR_RETURN(auto found, entryOf(handle, kind));
    auto it = entries_.begin() + (found - entries_.cbegin());
    gone = std::move(*it);
    entries_.erase(it);
  }
  dropAllocation(*gone);
  // The handle is the entry's address: kept a while, so that the allocator
  // does not hand it straight to the next registration and a stale second
  // deregistration (or a stale window handle) finds no live entry instead
  // of removing someone else's.
  std::lock_guard<std::mutex> lock(mu_);
  retired_.push_back(std::move(gone));
  if (retired_.size() > kRetiredHandles) retired_.pop_front();
  return Status::ok();
}

bool RegistrationTable::find(const void* ptr, size_t bytes, Registration* out) const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  bool found = false;
  for (const auto& e : entries_) {
    if (p < e->begin || p - e->begin > e->bytes || e->bytes - (p - e->begin) < bytes) continue;
    if (!found || (out->fd < 0 && e->fd >= 0)) *out = *e;
    found = true;
    if (out->fd >= 0) break;
  }
  return found;
}

size_t RegistrationTable::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

// ---- PeerMappings ---------------------------------------------------------------

PeerMappings::~PeerMappings() {
  for (Entry& e : entries_) munmap(e.base, e.bytes);
}

Status PeerMappings::open(Entry* e, int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, e->fd);
  const int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return systemError("opening rank " + std::to_string(e->rank) + "'s buffer " + path);
  // Only an allocation of ncclMemAlloc's kind: a memfd sealed against
  // shrinking (host_memory.cc). A peer naming another file, or a memfd it
  // could truncate under the mapping, would leave this rank to take SIGBUS
  // in the middle of a collective.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    ::close(fd);
    return invalidUsage("rank " + std::to_string(e->rank) + "'s buffer " + path +
                        " is not a memfd sealed against shrinking (not an ncclMemAlloc allocation)");
  }
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    p = host_memory::mapShared(fd, static_cast<size_t>(st.st_size));
  Status s = p == MAP_FAILED ? systemError("mapping rank " + std::to_string(e->rank) + "'s buffer " + path) : Status();
  ::close(fd);
  if (!s.isOk()) return s;
  e->base = static_cast<char*>(p);
  e->bytes = static_cast<size_t>(st.st_size);
  PLAIT_TRACE(kAlloc, "mapped rank %d's allocation (fd %d, generation %u): %zu bytes at %p", e->rank, e->fd,
              e->generation, e->bytes, p);
  return Status::ok();
}

void PeerMappings::evictOne() {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->lastUse != stamp_ && (victim == entries_.end() || it->lastUse < victim->lastUse)) victim = it;
  if (victim == entries_.end()) return;  // all in use by this operation: grow instead
  munmap(victim->base, victim->bytes);
  entries_.erase(victim);
}

Result<char*> PeerMappings::map(int rank, int pid, int fd, uint32_t generation, uint64_t offset, size_t bytes) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.rank == rank && e.fd == fd; });
  if (it != entries_.end() && it->generation != generation) {  // the fd now names another allocation
    munmap(it->base, it->bytes);
    entries_.erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    if (entries_.size() >= maxMappings_) evictOne();
    Entry e;
    e.rank = rank;
    e.fd = fd;
    e.generation = generation;
    PLAIT_RETURN_IF_ERROR(open(&e, pid));
    entries_.push_back(e);
    it = entries_.end() - 1;
  }
  it->lastUse = stamp_;
  if (offset > it->bytes || it->bytes - offset < bytes)
    return internalError("rank " + std::to_string(rank) + " described " + std::to_string(bytes) + " bytes at offset " +
                         std::to_string(offset) + " of an allocation of " + std::to_string(it->bytes) + " bytes");
  return it->base + offset;
}

}  // namespace plait
