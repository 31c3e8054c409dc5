// rma_page.h — the page of shared memory through which local peers put into
// this rank's windows without its agent (rma_service.h).
//
// Each rank's page holds its signal counts (one slot per sending rank: the
// count, and a local writer's report of a put it could not land), the futex
// word its waiters sleep on, and a table of its host windows (serial, base
// address, size, and a count of local writers inside). It is a memfd that
// every local peer, process or thread, maps through /proc/<pid>/fd/<fd>.
//
// The window protocol: a writer increments the slot's `writers`, then reads
// its serial again (seq_cst both); only if it still names the window does it
// copy. The owner unpublishing a window clears the serial, then waits until
// `writers` is 0: after that no local writer touches the memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "plait/status.hpp"

namespace plait::rma {

inline constexpr uint32_t kPageMagic = 0x504c5250;  // "PLRP"
inline constexpr int kPageWindows = 512;

struct alignas(64) PageHead {
  uint32_t magic = kPageMagic;
  uint32_t nranks = 0;
  std::atomic<uint32_t> futex{0};     // bumped after every count or report
  std::atomic<uint32_t> sleepers{0};  // waiters asleep on futex (base/wait.h)
};

struct alignas(64) SignalSlot {
  std::atomic<uint64_t> count{0};  // signals received from this rank
  std::atomic<uint32_t> failed{0}; // 1: a local put from this rank could not land (fields below)
  uint32_t probe = 0;              // written by that rank's cross-memory probe
  uint64_t window = 0;             // the failed put: window serial, offset, bytes,
  uint64_t offset = 0;             // and the window's size (0: it was not there)
  uint64_t bytes = 0;
  uint64_t size = 0;
};
static_assert(sizeof(SignalSlot) == 64);

struct WindowSlot {
  std::atomic<uint64_t> serial{0};  // 0: free
  std::atomic<uint64_t> base{0};    // the window's address in the owner's process
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint32_t> writers{0};
  uint32_t pad = 0;
};

// A mapped page: this rank's own, or a local peer's.
class Page {
 public:
  // This rank's page, zeroed, for nranks senders.
  static Result<Page> create(int nranks);
  // A peer's page: `fd` in process `pid` (this process too, for a peer
  // thread), mapped here through /proc. kSystemError when it cannot be.
  static Result<Page> map(int pid, int fd, int nranks);
  Page() = default;
  Page(Page&& other) noexcept { *this = static_cast<Page&&>(other); }
  Page& operator=(Page&& other) noexcept;
  ~Page();

  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  uint64_t address() const { return reinterpret_cast<uint64_t>(base_); }
  PageHead& head() const { return *reinterpret_cast<PageHead*>(base_); }
  SignalSlot& signal(int rank) const {
    return reinterpret_cast<SignalSlot*>(base_ + sizeof(PageHead))[rank];
  }
  WindowSlot& window(int i) const {
    return reinterpret_cast<WindowSlot*>(base_ + sizeof(PageHead) + nranks_ * sizeof(SignalSlot))[i];
  }
  // The slot publishing window `serial`, or -1.
  int find(uint64_t serial) const;
  // Counts a signal from `rank` (or its report) and wakes the waiters.
  void raise(int rank);
  void wakeWaiters();

  static size_t bytesFor(int nranks) {
    return sizeof(PageHead) + static_cast<size_t>(nranks) * sizeof(SignalSlot) + kPageWindows * sizeof(WindowSlot);
  }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  int nranks_ = 0;
  int fd_ = -1;     // own page: its memfd (kept open for peers to reach)
  bool own_ = false;
  bool mapped_ = false;  // munmap on destruction (not for a peer thread's page)
};

// Why a put of [offset, offset + bytes) cannot land in window `id` of
// `size` bytes ("" when it can); and the words for a window that is not there.
std::string rangeError(uint64_t id, uint64_t offset, uint64_t bytes, uint64_t size);
std::string missingWindow(uint64_t id);

// The communicator's host windows by registration serial, and (once the
// service attached its page) their publication there for local writers.
// Thread-safe: the agent writes into windows while the owner registers and
// deregisters.
class WindowTable {
 public:
  void add(uint64_t id, char* base, size_t bytes);
  // Waits for a write in progress into the window to end (the agent's, and
  // local writers' through the page: at most 10 s, for a writer that died
  // inside its copy).
  void remove(uint64_t id);
  // Copies [src, src + bytes) to window `id` at `offset`; "" or why it cannot.
  std::string write(uint64_t id, uint64_t offset, const void* src, uint64_t bytes);
  // The other direction: `bytes` at `offset` of window `id` to dst (null
  // dst: only checks that they are there).
  std::string read(uint64_t id, uint64_t offset, void* dst, uint64_t bytes);
  // Publishes every window in `page` (null: stops publishing).
  void attach(Page* page);

 private:
  void publish(uint64_t id, char* base, size_t bytes);  // mu_ held
  void unpublish(uint64_t id);                          // mu_ held

  std::mutex mu_;
  std::map<uint64_t, std::pair<char*, size_t>> windows_;
  Page* page_ = nullptr;
};

}  // namespace plait::rma
