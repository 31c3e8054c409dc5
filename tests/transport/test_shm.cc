// SharedSegment: create / open / unlink / destructor ownership, and removal of
// segments left behind by a dead creator.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <string>

#include "../resident.h"
#include "base/shm.h"

namespace plait {
namespace {

bool existsInDevShm(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("a created segment is named after this pid, zeroed and writable", "[shm]") {
  auto seg = SharedSegment::create(10000);
  REQUIRE(seg.isOk());
  std::string prefix = "/plait-" + std::to_string(getpid()) + "-";
  CHECK(seg->name().rfind(prefix, 0) == 0);
  CHECK(seg->size() == 10000);
  CHECK(seg->linked());
  REQUIRE(seg->data() != nullptr);
  auto* bytes = static_cast<unsigned char*>(seg->data());
  bool allZero = true;
  for (size_t i = 0; i < seg->size(); ++i) allZero = allZero && bytes[i] == 0;
  CHECK(allZero);
  bytes[9999] = 7;
  CHECK(existsInDevShm(seg->name()));

  auto other = SharedSegment::create(4096);
  REQUIRE(other.isOk());
  CHECK(other->name() != seg->name());
}

TEST_CASE("open maps the same memory; the opener never unlinks on destruction", "[shm]") {
  auto seg = SharedSegment::create(8192);
  REQUIRE(seg.isOk());
  std::string name = seg->name();
  {
    auto peer = SharedSegment::open(name, 8192);
    REQUIRE(peer.isOk());
    CHECK(peer->data() != seg->data());
    CHECK_FALSE(peer->linked());
    std::strcpy(static_cast<char*>(seg->data()), "hello");
    CHECK(std::strcmp(static_cast<const char*>(peer->data()), "hello") == 0);
    static_cast<char*>(peer->data())[100] = 'x';
    CHECK(static_cast<const char*>(seg->data())[100] == 'x');
  }
  CHECK(existsInDevShm(name));  // the opener's destructor left the name alone

  auto tooBig = SharedSegment::open(name, 8192 * 2);
  REQUIRE_FALSE(tooBig.isOk());
  CHECK(tooBig.status().code() == Code::kInvalidArgument);
  CHECK(tooBig.status().message().find(name) != std::string::npos);

  auto missing = SharedSegment::open("/plait-0-doesnotexist", 4096);
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.status().code() == Code::kSystemError);
  CHECK(missing.status().message().find("/plait-0-doesnotexist") != std::string::npos);
  CHECK(missing.status().message().find("errno") != std::string::npos);
}

TEST_CASE("unlink removes the name but keeps the mapping", "[shm]") {
  auto seg = SharedSegment::create(4096);
  REQUIRE(seg.isOk());
  std::string name = seg->name();
  auto peer = SharedSegment::open(name, 4096);
  REQUIRE(peer.isOk());
  REQUIRE(seg->unlink().isOk());
  CHECK_FALSE(seg->linked());
  CHECK_FALSE(existsInDevShm(name));
  CHECK(seg->unlink().isOk());  // idempotent
  static_cast<char*>(seg->data())[0] = 42;
  CHECK(static_cast<const char*>(peer->data())[0] == 42);
  CHECK_FALSE(SharedSegment::open(name, 4096).isOk());
  CHECK(peer->unlink().isOk());  // an opener unlinking an already-unlinked name is fine
}

TEST_CASE("the creator's destructor unlinks; moves transfer ownership", "[shm]") {
  std::string name;
  {
    auto seg = SharedSegment::create(4096);
    REQUIRE(seg.isOk());
    name = seg->name();
    SharedSegment moved = std::move(seg.value());
    CHECK(seg->data() == nullptr);
    CHECK(moved.linked());
    SharedSegment assigned;
    assigned = std::move(moved);
    CHECK(assigned.name() == name);
    CHECK(existsInDevShm(name));
  }
  CHECK_FALSE(existsInDevShm(name));
}

TEST_CASE("prefaulted segments and bad sizes", "[shm]") {
  SharedSegment::CreateOptions options;
  options.prefault = true;
  auto seg = SharedSegment::create(1 << 20, options);
  REQUIRE(seg.isOk());
  CHECK(static_cast<const char*>(seg->data())[(1 << 20) - 1] == 0);
  CHECK(SharedSegment::create(0).status().code() == Code::kInvalidArgument);
  auto huge = SharedSegment::create(size_t(1) << 50);
  REQUIRE_FALSE(huge.isOk());
  CHECK(huge.status().message().find("/plait-") != std::string::npos);
}

TEST_CASE("populate maps a range of an opened prefaulted segment at once, and only that range", "[shm]") {
  constexpr size_t kBytes = 2 << 20;
  SharedSegment::CreateOptions options;
  options.prefault = true;
  auto seg = SharedSegment::create(kBytes, options);
  REQUIRE(seg.isOk());
  CHECK(test::mappingAt(seg->data()).rssBytes == kBytes);  // MAP_POPULATE in the creator
  auto opened = SharedSegment::open(seg->name(), kBytes);
  REQUIRE(opened.isOk());
  CHECK(test::mappingAt(opened->data()).sizeBytes == kBytes);
  CHECK(test::mappingAt(opened->data()).rssBytes == 0);  // the control: nothing until first touch
  CHECK(opened->populate(100, 3 * 4096));                 // pages 0-3: the range does not start on a page
  CHECK(test::mappingAt(opened->data()).rssBytes == 4 * 4096);
  CHECK(opened->populate(kBytes - 4096, 4096));
  CHECK(test::mappingAt(opened->data()).rssBytes == 5 * 4096);
  CHECK_FALSE(opened->populate(kBytes - 4096, 8192));  // past the end: refused, nothing mapped
  CHECK(test::mappingAt(opened->data()).rssBytes == 5 * 4096);
}

TEST_CASE("cleanupStaleSegments removes a dead creator's segment and keeps live ones", "[shm]") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto seg = SharedSegment::create(4096);
    if (!seg.isOk()) _exit(1);
    std::string name = seg->name();
    ssize_t n = write(fds[1], name.c_str(), name.size() + 1);
    _exit(n > 0 ? 0 : 2);  // no destructor: the name is left behind, as after a crash
  }
  close(fds[1]);
  char buf[256] = {};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);  // reaped: the pid is gone
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(n > 0);
  std::string stale = buf;
  REQUIRE(existsInDevShm(stale));

  auto mine = SharedSegment::create(4096);
  REQUIRE(mine.isOk());
  cleanupStaleSegments();  // the count may be 0 if a concurrent process cleaned up first
  CHECK_FALSE(existsInDevShm(stale));
  CHECK(existsInDevShm(mine->name()));
  // exists() is what the operation board asks when a peer's board cannot be
  // opened: gone (its owner left) versus present but unopenable.
  CHECK_FALSE(SharedSegment::exists(stale));
  CHECK(SharedSegment::exists(mine->name()));
  REQUIRE(mine->unlink().isOk());
  CHECK_FALSE(SharedSegment::exists(mine->name()));
}

}  // namespace plait
