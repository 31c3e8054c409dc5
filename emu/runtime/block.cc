// block.cc — running a grid: one OS thread per block, the block's CUDA
// threads as fibers (ucontext) that switch only at __syncthreads.
//
// A block's scheduler runs each fiber in turn until it reaches a barrier or
// returns; once every live fiber waits, it checks that they all wait at the
// same barrier (file:line) — a divergent __syncthreads aborts the process
// naming both sites, as the hang or corruption it causes on a GPU would be
// worse — and releases them. Threads that have returned count as arrived
// (as on Volta and later). All fibers share the OS thread, so memory written
// before a barrier is seen after it.
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "internal.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define PLAIT_EMU_TSAN 1
#else
#define PLAIT_EMU_TSAN 0
#endif

namespace plait_emu {
namespace {

// Under ThreadSanitizer each CUDA thread is a TSan fiber. Switching fibers
// does not order memory (flag no_sync), so TSan sees the block's threads as
// concurrent, as they are on a GPU; a barrier orders them: every thread
// releases on the block when it arrives and acquires when it leaves. So a
// race between threads of a block that a __syncthreads does not separate is
// reported, like one between blocks or with the host.
// Macros, not functions: TSan tracks calls per fiber, so a call that
// switches fibers would enter on one fiber's shadow stack and leave on
// another's.
#if PLAIT_EMU_TSAN
#define TSAN_CURRENT() __tsan_get_current_fiber()
#define TSAN_CREATE() __tsan_create_fiber(0)
#define TSAN_DESTROY(f) __tsan_destroy_fiber(f)
#define TSAN_SWITCH(f, sync) __tsan_switch_to_fiber((f), (sync) ? 0 : __tsan_switch_to_fiber_no_sync)
#define TSAN_RELEASE(addr) __tsan_release(addr)
#define TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#else
#define TSAN_CURRENT() nullptr
#define TSAN_CREATE() nullptr
#define TSAN_DESTROY(f) ((void)(f))
#define TSAN_SWITCH(f, sync) ((void)(f), (void)(sync))
#define TSAN_RELEASE(addr) ((void)(addr))
#define TSAN_ACQUIRE(addr) ((void)(addr))
#endif

// Each CUDA thread's stack. Reserved, not committed: only touched pages cost.
constexpr size_t kFiberStackBytes = 256 << 10;

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;  // kFiberStackBytes inside the block's mapping
  uint3 threadIdx{};
  void* tsanFiber = nullptr;
  bool started = false;  // scheduler only
  // Written by the fiber, read by the scheduler on the same OS thread:
  // atomics only so that ThreadSanitizer, which sees fibers as threads,
  // does not count the emulator's own bookkeeping as the kernel's races.
  std::atomic<bool> done{false};
  std::atomic<const char*> waitingAt{nullptr};  // the barrier it waits at, if any
};

struct Block {
  const std::function<void()>* body = nullptr;
  std::unique_ptr<Fiber[]> fibers;  // not movable (atomics): allocated once
  size_t count = 0;
  ucontext_t scheduler;
  void* tsanScheduler = nullptr;
  std::atomic<size_t> current{0};
  uint3 blockIdx{};
  dim3 blockDim, gridDim;
};

thread_local Block* tBlock = nullptr;

// The stacks of finished blocks, kept mapped for the next blocks of the same
// size: a fresh mapping costs a page fault and a zeroed page for every stack
// page a thread touches, at every launch (page faults, zeroing and unmapping
// were about 15% of an emulated collective test's time, perf). A few
// mappings at most, so a process keeps a few MiB of touched stack pages.
// Not under ThreadSanitizer, whose shadow of a reused stack would carry the
// previous block's accesses.
// Out of line: inlined into runBlock, whose swapcontext returns twice, its
// locals would draw -Wclobbered.
class StackCache {
 public:
  [[gnu::noinline]] char* take(size_t bytes) {
    if (!PLAIT_EMU_TSAN) {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < kept_.size(); ++i)
        if (kept_[i].bytes == bytes) {
          char* stacks = kept_[i].stacks;
          kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
          return stacks;
        }
    }
    void* mapped =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    return static_cast<char*>(mapped);
  }
  [[gnu::noinline]] void give(char* stacks, size_t bytes) {
    if (!PLAIT_EMU_TSAN) {
      std::lock_guard<std::mutex> lock(mu_);
      if (kept_.size() < kMaxKept) {
        kept_.push_back({stacks, bytes});
        return;
      }
    }
    ::munmap(stacks, bytes);
  }

 private:
  static constexpr size_t kMaxKept = 8;
  struct Kept {
    char* stacks;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Kept> kept_;
};

StackCache& stackCache() {
  static StackCache* cache = new StackCache();  // never destroyed: blocks may end during exit
  return *cache;
}

void fiberMain() {
  Block* b = tBlock;
  (*b->body)();
  b->fibers[b->current.load(std::memory_order_relaxed)].done.store(true, std::memory_order_relaxed);
  // The block's end orders all its threads before the kernel completes (the
  // scheduler acquires once all have ended); the switch itself orders nothing,
  // or the scheduler would carry this thread's writes into the next one.
  TSAN_RELEASE(&b->fibers);
  TSAN_SWITCH(b->tsanScheduler, false);
  // Never return (a return would leave this frame on the scheduler's TSan
  // shadow stack): resume the scheduler directly.
  ::setcontext(&b->scheduler);
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "plait device emulator: %s\n", why.c_str());
  std::abort();
}

Fiber& currentFiber() {
  if (tBlock == nullptr) die("a device builtin (threadIdx, __syncthreads, ...) used outside a kernel");
  return tBlock->fibers[tBlock->current.load(std::memory_order_relaxed)];
}

void runBlock(const std::function<void()>& body, uint3 blockIdx, dim3 blockDim, dim3 gridDim) {
  Block b;
  b.body = &body;
  b.blockIdx = blockIdx;
  b.blockDim = blockDim;
  b.gridDim = gridDim;
  const size_t n = static_cast<size_t>(blockDim.x) * blockDim.y * blockDim.z;
  b.fibers = std::make_unique<Fiber[]>(n);
  b.count = n;
  // One mapping for all the block's stacks: a mapping per thread runs into
  // vm.max_map_count with a few hundred blocks alive.
  char* stacks = stackCache().take(n * kFiberStackBytes);
  if (stacks == nullptr) die("cannot map the block's stacks: " + std::string(std::strerror(errno)));
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.threadIdx = uint3{static_cast<unsigned>(i % blockDim.x), static_cast<unsigned>((i / blockDim.x) % blockDim.y),
                        static_cast<unsigned>(i / (static_cast<size_t>(blockDim.x) * blockDim.y))};
    f.stack = stacks + i * kFiberStackBytes;
    ::getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kFiberStackBytes;
    f.context.uc_link = nullptr;  // fiberMain never returns
    ::makecontext(&f.context, fiberMain, 0);
    f.tsanFiber = TSAN_CREATE();
  }
  b.tsanScheduler = TSAN_CURRENT();
  tBlock = &b;
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      Fiber& f = b.fibers[i];
      if (f.done.load(std::memory_order_relaxed) || f.waitingAt.load(std::memory_order_relaxed) != nullptr)
        continue;
      b.current.store(i, std::memory_order_relaxed);
      const bool first = !f.started;
      f.started = true;
      // Everything after the switch is the fiber's, for TSan: touch no
      // scheduler state between it and swapcontext.
      TSAN_SWITCH(f.tsanFiber, first);  // the launch happens before every thread starts
      ::swapcontext(&b.scheduler, &f.context);
    }
    // Every fiber has returned or waits at a barrier.
    const char* site = nullptr;
    size_t siteThread = 0;
    for (size_t i = 0; i < n; ++i) {
      const Fiber& f = b.fibers[i];
      if (f.done.load(std::memory_order_relaxed)) continue;
      const char* at = f.waitingAt.load(std::memory_order_relaxed);
      if (site == nullptr) {
        site = at;
        siteThread = i;
      } else if (std::strcmp(site, at) != 0) {
        die("threads of block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
            std::to_string(blockIdx.z) + ") wait at different barriers: thread " + std::to_string(siteThread) +
            " at " + site + ", thread " + std::to_string(i) + " at " + at);
      }
    }
    if (site == nullptr) {  // all returned
      TSAN_ACQUIRE(&b.fibers);
      break;
    }
    for (size_t i = 0; i < n; ++i) b.fibers[i].waitingAt.store(nullptr, std::memory_order_relaxed);
  }
  tBlock = nullptr;
  for (size_t i = 0; i < n; ++i) TSAN_DESTROY(b.fibers[i].tsanFiber);
  stackCache().give(stacks, n * kFiberStackBytes);
}

}  // namespace

const uint3& currentThreadIdx() { return currentFiber().threadIdx; }
const uint3& currentBlockIdx() {
  currentFiber();
  return tBlock->blockIdx;
}
const dim3& currentBlockDim() {
  currentFiber();
  return tBlock->blockDim;
}
const dim3& currentGridDim() {
  currentFiber();
  return tBlock->gridDim;
}

void syncThreads(const char* site) {
  Fiber& f = currentFiber();
  Block* b = tBlock;
  f.waitingAt.store(site, std::memory_order_relaxed);
  TSAN_RELEASE(b);
  TSAN_SWITCH(b->tsanScheduler, false);
  ::swapcontext(&f.context, &b->scheduler);
  TSAN_ACQUIRE(b);
}

// The emulated clock: 1 GHz, or 1/16 of that under ThreadSanitizer, which
// runs device code about that much slower (so kernel time-outs set in
// clock64() cycles keep meaning the same amount of work).
long long clockNs() {
  constexpr long long kDivisor = PLAIT_EMU_TSAN ? 16 : 1;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() /
         kDivisor;
}

void sleepNs(unsigned ns) {
  // Short sleeps yield: nanosleep's real granularity is tens of microseconds.
  if (ns < 1000) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

// Blocks resident at once, like a GPU's limit on co-resident blocks: a
// larger grid runs in waves (a kernel that makes blocks wait for blocks of a
// later wave deadlocks here, as it may on a GPU).
constexpr size_t kResidentBlocks = 256;

void runGrid(const std::function<void()>& body, dim3 grid, dim3 block) {
  std::vector<uint3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(uint3{x, y, z});
  for (size_t first = 0; first < blocks.size(); first += kResidentBlocks) {
    std::vector<std::thread> threads;
    const size_t end = std::min(blocks.size(), first + kResidentBlocks);
    try {
      for (size_t i = first; i < end; ++i) threads.emplace_back(runBlock, std::cref(body), blocks[i], block, grid);
    } catch (const std::system_error& e) {
      die(std::string("cannot start a thread for a block: ") + e.what());
    }
    for (auto& t : threads) t.join();
  }
}

}  // namespace plait_emu
