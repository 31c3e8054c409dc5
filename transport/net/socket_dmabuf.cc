// socket_dmabuf.cc — see socket_dmabuf.h.
#include "transport/net/socket_dmabuf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace plait::socket_dmabuf {
namespace {

struct Region {
  char* device;  // the range as the caller addresses it
  size_t size;
  void* mapping;  // the dmabuf pages mapped here
  size_t mappingSize;
  size_t skew;  // offset of the range's first byte inside mapping (page rounding)
};

std::mutex gMu;
std::set<void*>& regions() {
  static auto* live = new std::set<void*>();  // leaked: comms may close after static destruction
  return *live;
}

}  // namespace

bool enabled() {
  const char* text = std::getenv("PLAIT_NET_SOCKET_DMABUF");
  return text != nullptr && std::strcmp(text, "1") == 0;
}

Status registerDmaBuf(void* data, size_t size, uint64_t offset, int fd, void** mhandle) {
  *mhandle = nullptr;
  if (data == nullptr || size == 0 || fd < 0)
    return invalidArgument("dmabuf registration of " + std::to_string(size) + " bytes at fd " + std::to_string(fd) +
                           ": a null range or no fd");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t skew = static_cast<size_t>(offset - start);
  const size_t length = (skew + size + page - 1) / page * page;
  void* m = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (m == MAP_FAILED)
    return systemError("mapping dmabuf fd " + std::to_string(fd) + " (" + std::to_string(size) + " bytes at offset " +
                       std::to_string(offset) + ")");
  auto* r = new Region{static_cast<char*>(data), size, m, length, skew};
  std::lock_guard<std::mutex> lock(gMu);
  regions().insert(r);
  *mhandle = r;
  return Status::ok();
}

void deregister(void* mhandle) {
  {
    std::lock_guard<std::mutex> lock(gMu);
    if (regions().erase(mhandle) == 0) return;
  }
  auto* r = static_cast<Region*>(mhandle);
  ::munmap(r->mapping, r->mappingSize);
  delete r;
}

char* translate(void* mhandle, void* data, size_t bytes) {
  auto* r = static_cast<Region*>(mhandle);
  char* p = static_cast<char*>(data);
  if (p < r->device || bytes > r->size || static_cast<size_t>(p - r->device) > r->size - bytes) return nullptr;
  return static_cast<char*>(r->mapping) + r->skew + (p - r->device);
}

}  // namespace plait::socket_dmabuf
