// ncclMemAlloc's memfds have a sealed size (issue 11, item 12): any process
// of the same uid can open them through /proc/<pid>/fd, so none may shrink
// one under the owner's mapping (a SIGBUS there) or grow it. On b3b9f8d the
// memfds were created without MFD_ALLOW_SEALING and could be truncated.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/buffer_registry.h"
#include "core/host_memory.h"

using namespace plait;

TEST_CASE("ncclMemAlloc memfds cannot be shrunk or grown, even through /proc/<pid>/fd", "[memfd]") {
  auto p = host_memory::allocate(64 << 10);
  REQUIRE(p.isOk());
  auto a = host_memory::lookup(p.value());
  REQUIRE(a.has_value());
  REQUIRE(a->fd >= 0);  // a memfd (anonymous memory only where memfd_create fails)
  const int seals = fcntl(a->fd, F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_GROW) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);
  CHECK(ftruncate(a->fd, 0) == -1);
  CHECK(errno == EPERM);
  // What another process of this uid would do.
  const std::string path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(a->fd);
  const int other = open(path.c_str(), O_RDWR);
  REQUIRE(other >= 0);
  CHECK(ftruncate(other, 4096) == -1);
  CHECK(ftruncate(other, 1 << 20) == -1);
  close(other);
  static_cast<volatile char*>(p.value())[(64 << 10) - 1] = 1;  // still mapped in full: no SIGBUS
  CHECK(host_memory::release(p.value()).isOk());
}

// The other side: a peer names its buffer by fd, and a rank maps
// /proc/<pid>/fd/<fd> only when it is a memfd sealed against shrinking. A
// peer naming an unsealed memfd (or any other file) could truncate it under
// the mapping, and the rank would take SIGBUS mid-collective (review of
// 2026-11-30). Here this process plays the peer: PeerMappings opens through
// /proc/<our pid>, as it would a peer's.
TEST_CASE("a peer's buffer is mapped only when it is a size-sealed memfd", "[memfd]") {
  PeerMappings mappings(8);
  const int pid = static_cast<int>(getpid());
  auto p = host_memory::allocate(64 << 10);
  REQUIRE(p.isOk());
  auto a = host_memory::lookup(p.value());
  REQUIRE(a.has_value());
  REQUIRE(a->fd >= 0);
  auto sealed = mappings.map(1, pid, a->fd, a->generation, 4096, 4096);
  CHECK(sealed.isOk());

  const int unsealed = memfd_create("plait-test-unsealed", MFD_CLOEXEC);
  REQUIRE(unsealed >= 0);
  REQUIRE(ftruncate(unsealed, 64 << 10) == 0);
  auto refused = mappings.map(1, pid, unsealed, 0, 0, 4096);
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.status().message(), Catch::Contains("not a memfd sealed against shrinking"));
  close(unsealed);

  char path[] = "/tmp/plait-test-peer-file-XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  unlink(path);
  REQUIRE(ftruncate(file, 64 << 10) == 0);
  auto notMemfd = mappings.map(1, pid, file, 0, 0, 4096);
  CHECK_FALSE(notMemfd.isOk());
  close(file);
  CHECK(host_memory::release(p.value()).isOk());
}
