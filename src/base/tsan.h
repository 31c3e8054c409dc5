// tsan.h — telling ThreadSanitizer about synchronization it cannot see.
//
// Ranks that are threads of one process map each other's shared segments at
// other addresses than their owners do. A store with release through the
// sender's mapping and the owner's load with acquire at its own address are
// one synchronization to the CPU, but two unrelated addresses to TSan, which
// then reports the data they order (a peer's user buffer that the direct path
// reads after such a hand-off) as a race. A sender that knows where the owner
// maps the word names its release there, and a reader of a word the owner
// stored names its acquire there (the shared-memory transport's line FIFOs,
// the one-sided operations' pages). No-ops outside TSan builds.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define PLAIT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PLAIT_TSAN 1
#endif
#endif

#ifdef PLAIT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace plait {

// Before a store with release that a thread of this process reads with
// acquire at `ownerAddress` (the same word, mapped there).
inline void tsanRelease(const void* ownerAddress) {
#ifdef PLAIT_TSAN
  __tsan_release(const_cast<void*>(ownerAddress));
#else
  (void)ownerAddress;
#endif
}

// After a load with acquire of a word that a thread of this process stores
// with release at `ownerAddress`.
inline void tsanAcquire(const void* ownerAddress) {
#ifdef PLAIT_TSAN
  __tsan_acquire(const_cast<void*>(ownerAddress));
#else
  (void)ownerAddress;
#endif
}

}  // namespace plait
