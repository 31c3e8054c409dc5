// buffer_registry.h — what a communicator knows about user buffers: the
// ranges registered with it (ncclCommRegister, ncclCommWindowRegister) and
// its mappings of peers' registered ncclMemAlloc memory.
//
// A registration records a range and, when the whole range lies in one
// ncclMemAlloc allocation that other processes can map, that allocation's
// fd and generation (core/host_memory.h). Registering memory that is not
// from ncclMemAlloc is accepted and recorded; collectives on it can go
// direct only between ranks that are threads of one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "plait/status.hpp"

namespace plait {

// The two registration calls hand out handles of their own: a handle from
// one is refused by the other's deregistration.
enum class RegistrationKind : uint8_t { kBuffer, kWindow };

struct Registration {
  uintptr_t begin = 0;
  size_t bytes = 0;
  RegistrationKind kind = RegistrationKind::kBuffer;
  // The ncclMemAlloc allocation holding the whole range (null: none): host
  // memory (allocBase) or device memory (deviceAllocBase).
  void* allocBase = nullptr;
  void* deviceAllocBase = nullptr;
  int fd = -1;  // -1: other processes cannot map it
  uint32_t generation = 0;
};

// Thread-safe: registration calls may come from any thread while an
// operation runs on another.
class RegistrationTable {
 public:
  RegistrationTable() = default;
  RegistrationTable(const RegistrationTable&) = delete;
  RegistrationTable& operator=(const RegistrationTable&) = delete;
  // Drops what every remaining registration holds (ncclCommDestroy without
  // deregistering first is allowed, as with NCCL).
  ~RegistrationTable();

  // Records [buff, buff + bytes) and returns its handle. The caller checked
  // buff and bytes. Registering one range several times gives several handles.
  Result<void*> add(void* buff, size_t bytes, RegistrationKind kind);
  // kInvalidArgument when `handle` is not a live registration of this table
  // of that kind (never registered, already deregistered, or the other kind).
  Status remove(void* handle, RegistrationKind kind);
  // What `handle` registered; the same errors as remove().
  Result<Registration> lookup(void* handle, RegistrationKind kind) const;
  // The registration covering [ptr, ptr + bytes), preferring one that other
  // processes can map; false if none covers it.
  bool find(const void* ptr, size_t bytes, Registration* out) const;
  size_t count() const;

 private:
  Result<std::vector<std::unique_ptr<Registration>>::const_iterator> entryOf(void* handle,
                                                                            RegistrationKind kind) const;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Registration>> entries_;
  // Removed entries, their allocations dropped, kept so their addresses (the
  // handles) are not reused at once: the last kRetiredHandles of them.
  static constexpr size_t kRetiredHandles = 1024;
  std::deque<std::unique_ptr<Registration>> retired_;
  bool loggedForeign_ = false;
};

// This rank's mappings of peers' ncclMemAlloc allocations, opened through
// /proc/<pid>/fd/<fd>. One mapping per (peer, fd): a new generation of the
// same fd replaces it; beyond `maxMappings` the least recently used one not
// used by the current operation is dropped. Not thread-safe (used by the
// communicator's operation thread only).
class PeerMappings {
 public:
  explicit PeerMappings(size_t maxMappings) : maxMappings_(maxMappings) {}
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;
  ~PeerMappings();

  // Starts an operation: mappings returned from now on stay valid until the
  // next beginOperation().
  void beginOperation() { ++stamp_; }
  // The address of byte `offset` of peer `pid`'s allocation (fd, generation),
  // valid for `bytes` bytes. kSystemError naming the peer and errno when it
  // cannot be opened or mapped; kInternalError when the range exceeds it.
  Result<char*> map(int rank, int pid, int fd, uint32_t generation, uint64_t offset, size_t bytes);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int rank = -1;
    int fd = -1;
    uint32_t generation = 0;
    char* base = nullptr;
    size_t bytes = 0;
    uint64_t lastUse = 0;
  };
  Status open(Entry* e, int pid);
  void evictOne();

  size_t maxMappings_;
  uint64_t stamp_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace plait
