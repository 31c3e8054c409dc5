// shm.h — POSIX shared-memory segments for ranks on one host.
//
// A segment is created by one process under a name
// `/plait-<pid>-<pidns>-<random>` (visible in /dev/shm; <pidns> is the inode
// of the creator's /proc/self/ns/pid), its name is sent to the peers out of
// band, and the peers open() it. The name is unlinked as soon as every peer
// has mapped it, so nothing is left behind when a process dies later; the
// mapping stays valid until each side unmaps it. Segments whose creator died
// before that are removed by cleanupStaleSegments() / cleanupSegmentsOf().
//
// Pages are not touched at creation (first touch places them on the NUMA node
// of the process that writes them first) unless CreateOptions::prefault asks.
#pragma once

#include <cstddef>
#include <string>

#include "plait/status.hpp"

namespace plait {

class SharedSegment {
 public:
  struct CreateOptions {
    // Reserve the pages in /dev/shm (posix_fallocate) and map them populated:
    // creation fails cleanly instead of a later SIGBUS when /dev/shm is full,
    // at the cost of allocating and zeroing every page now, on this process's
    // NUMA node.
    bool prefault = false;
  };

  // An empty segment: data() is null, size() 0.
  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  // Unmaps; unlinks the name if this object created it and nobody unlinked it.
  ~SharedSegment();

  // Creates and maps a new zero-filled segment of `bytes` (> 0) bytes.
  // Fails with kSystemError naming the segment and errno (including "not
  // enough space in /dev/shm" when its free space is below `bytes`).
  // Blocks only on the system calls. Thread-safe.
  static Result<SharedSegment> create(size_t bytes);
  static Result<SharedSegment> create(size_t bytes, const CreateOptions& options);

  // Maps an existing segment created by another process. `bytes` must not
  // exceed the segment's size; fails with kSystemError (no such segment,
  // permission) or kInvalidArgument (segment smaller than `bytes`). The opener
  // never unlinks the name in its destructor.
  static Result<SharedSegment> open(const std::string& name, size_t bytes);

  // Maps [offset, offset + bytes) of this mapping writable now
  // (MADV_POPULATE_WRITE) instead of at each page's first write. Meant for
  // segments whose creator used CreateOptions::prefault (every page exists;
  // elsewhere it would allocate them, or fail where /dev/shm is full). Best
  // effort: false where the kernel lacks it (before Linux 5.14) or the range
  // is outside the mapping, and the pages then fault in on first use as usual.
  bool populate(size_t offset, size_t bytes);

  // False when no segment of this name exists (its creator unlinked it or
  // exited after cleaning up); true otherwise, including when it exists but
  // cannot be opened. Blocks only on the system calls. Thread-safe.
  static bool exists(const std::string& name);

  // The name to pass to open(), with its leading '/': "/plait-1234-4026531836-9f3a...".
  const std::string& name() const { return name_; }
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // True while this object created the segment and has not unlinked it.
  bool linked() const { return linked_; }

  // Removes the name so no further process can open it; existing mappings
  // stay valid. Idempotent on this object. From an opener, unlinks the name
  // too. ENOENT (someone else unlinked it first) is success for both. Errors
  // name the segment and errno.
  Status unlink();

 private:
  SharedSegment(std::string name, void* data, size_t size, bool creator)
      : name_(std::move(name)), data_(data), size_(size), linked_(creator) {}
  void reset();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false;
};

// Removes /dev/shm/plait-<pid>-<pidns>-* whose <pid> has exited (no such
// process, or a zombie) — a crashed creator never unlinked them. Only
// segments created in this process's pid namespace are judged (elsewhere a
// live pid may look dead); older names without a namespace are left alone.
// Returns how many were removed. Best effort: errors are logged at INFO, not
// returned. The shared-memory transport calls it at every connect, and
// cleanupSegmentsOf() for its local peers when a connect fails.
int cleanupStaleSegments();
// The same for one creator pid only.
int cleanupSegmentsOf(int pid);

}  // namespace plait
