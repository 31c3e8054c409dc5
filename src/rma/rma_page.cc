// rma_page.cc — see rma_page.h.
#include "rma/rma_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstring>
#include <new>

#include "base/wait.h"

namespace plait::rma {

Result<Page> Page::create(int nranks) {
  Page p;
  p.nranks_ = nranks;
  p.bytes_ = bytesFor(nranks);
  p.fd_ = static_cast<int>(::memfd_create("plait-rma-page", MFD_CLOEXEC));
  if (p.fd_ < 0) return systemError("memfd_create for the one-sided page");
  if (::ftruncate(p.fd_, static_cast<off_t>(p.bytes_)) != 0) return systemError("sizing the one-sided page");
  void* base = ::mmap(nullptr, p.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd_, 0);
  if (base == MAP_FAILED) return systemError("mapping the one-sided page");
  p.base_ = static_cast<char*>(base);
  p.own_ = p.mapped_ = true;
  // Zero-filled by the kernel; the atomics are constructed in place over it.
  new (p.base_) PageHead();
  p.head().nranks = static_cast<uint32_t>(nranks);
  for (int r = 0; r < nranks; ++r) new (&p.signal(r)) SignalSlot();
  for (int i = 0; i < kPageWindows; ++i) new (&p.window(i)) WindowSlot();
  return p;
}

Result<Page> Page::map(int pid, int fd, int nranks) {
  Page p;
  p.nranks_ = nranks;
  p.bytes_ = bytesFor(nranks);
  // A mapping of our own, a peer thread's page too: it stays valid after the
  // owner's service unmapped and closed its page (a late writer then finds
  // no window there instead of touching unmapped memory).
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int local = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (local < 0) return systemError("opening " + path);
  void* base = ::mmap(nullptr, p.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, local, 0);
  ::close(local);
  if (base == MAP_FAILED) return systemError("mapping " + path);
  p.base_ = static_cast<char*>(base);
  p.mapped_ = true;
  if (p.head().magic != kPageMagic || p.head().nranks != static_cast<uint32_t>(nranks))
    return internalError("the one-sided page of pid " + std::to_string(pid) + " is not one (magic or size)");
  return p;
}

Page& Page::operator=(Page&& other) noexcept {
  if (this != &other) {
    this->~Page();
    base_ = other.base_;
    bytes_ = other.bytes_;
    nranks_ = other.nranks_;
    fd_ = other.fd_;
    own_ = other.own_;
    mapped_ = other.mapped_;
    other.base_ = nullptr;
    other.fd_ = -1;
    other.own_ = other.mapped_ = false;
  }
  return *this;
}

Page::~Page() {
  if (mapped_ && base_ != nullptr) ::munmap(base_, bytes_);
  if (own_ && fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

int Page::find(uint64_t serial) const {
  for (int i = 0; i < kPageWindows; ++i)
    if (window(i).serial.load(std::memory_order_acquire) == serial) return i;
  return -1;
}

void Page::wakeWaiters() {
  head().futex.fetch_add(1, std::memory_order_release);
  wake(&head().futex, &head().sleepers);
}

void Page::raise(int rank) {
  signal(rank).count.fetch_add(1, std::memory_order_release);
  wakeWaiters();
}

std::string missingWindow(uint64_t id) {
  return "window #" + std::to_string(id) + " is not registered there (never, or deregistered)";
}

std::string rangeError(uint64_t id, uint64_t offset, uint64_t bytes, uint64_t size) {
  if (offset <= size && bytes <= size - offset) return std::string();
  return "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) + ") are outside window #" +
         std::to_string(id) + " (" + std::to_string(size) + " bytes there)";
}

void WindowTable::add(uint64_t id, char* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  windows_[id] = {base, bytes};
  publish(id, base, bytes);
}

void WindowTable::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  unpublish(id);
  windows_.erase(id);
}

std::string WindowTable::write(uint64_t id, uint64_t offset, const void* src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  if (it == windows_.end()) return missingWindow(id);
  if (std::string why = rangeError(id, offset, bytes, it->second.second); !why.empty()) return why;
  if (bytes > 0) std::memcpy(it->second.first + offset, src, bytes);
  return std::string();
}

std::string WindowTable::read(uint64_t id, uint64_t offset, void* dst, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  if (it == windows_.end()) return missingWindow(id);
  if (std::string why = rangeError(id, offset, bytes, it->second.second); !why.empty()) return why;
  if (bytes > 0 && dst != nullptr) std::memcpy(dst, it->second.first + offset, bytes);
  return std::string();
}

void WindowTable::attach(Page* page) {
  std::lock_guard<std::mutex> lock(mu_);
  if (page_ != nullptr && page == nullptr)
    for (const auto& [id, w] : windows_) unpublish(id);
  page_ = page;
  if (page_ != nullptr)
    for (const auto& [id, w] : windows_) publish(id, w.first, w.second);
}

void WindowTable::publish(uint64_t id, char* base, size_t bytes) {
  if (page_ == nullptr) return;
  for (int i = 0; i < kPageWindows; ++i) {
    WindowSlot& w = page_->window(i);
    if (w.serial.load(std::memory_order_acquire) != 0) continue;
    w.base.store(reinterpret_cast<uint64_t>(base), std::memory_order_relaxed);
    w.bytes.store(bytes, std::memory_order_relaxed);
    w.serial.store(id, std::memory_order_seq_cst);  // last: a writer that finds it sees the rest
    return;
  }
  // Full: local writers do not find it and say so (the put fails, naming it).
}

void WindowTable::unpublish(uint64_t id) {
  if (page_ == nullptr) return;
  const int i = page_->find(id);
  if (i < 0) return;
  WindowSlot& w = page_->window(i);
  w.serial.store(0, std::memory_order_seq_cst);
  // A writer that saw the serial before it was cleared is inside its copy.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.writers.load(std::memory_order_seq_cst) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  w.writers.store(0, std::memory_order_relaxed);
}

}  // namespace plait::rma
