// fds between the ranks of one host (transport/fdpass): memfds sent by ranks
// that are threads and by ranks that are processes arrive under the right
// (rank, tag) whatever the order they are asked for in, and their pages are
// the sender's; a sender whose credentials do not match the rank it claims is
// refused (and named when the wait fails); waits end at their deadline or on
// abort.
#include "transport/fdpass/fd_passing.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using plait::Deadline;
using plait::fdpass::FdMailbox;

std::string freshToken() {
  std::random_device rd;
  return "test" + std::to_string(::getpid()) + "x" + std::to_string(rd());
}

// A memfd holding `text`, or -1. No assertion here: rank threads call it,
// and Catch2's assertions belong to the test's own thread.
int memfdWith(const std::string& text) {
  const int fd = ::memfd_create("plait-fd-test", MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What the file behind `fd` holds (read through a shared mapping: the pages,
// not a copy).
std::string contents(int fd, size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return "<mmap failed>";
  std::string s(static_cast<const char*>(p), bytes);
  ::munmap(p, bytes);
  return s;
}

std::string message(int from, int to) { return "from " + std::to_string(from) + " to " + std::to_string(to); }

}  // namespace

TEST_CASE("Ranks as threads pass fds to each other, asked for in any order", "[fdpass]") {
  const int n = 3;
  const std::string token = freshToken();
  std::vector<int> pids(n, ::getpid());
  std::vector<std::unique_ptr<FdMailbox>> boxes;
  for (int r = 0; r < n; ++r) {
    auto box = FdMailbox::open(token, r, pids);
    REQUIRE(box.isOk());
    boxes.push_back(std::move(*box));
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const Deadline d = Deadline::afterMs(10000);
      for (int p = 0; p < n; ++p) {  // two tags each, sent in one order
        for (uint64_t tag : {7u, 9u}) {
          const int fd = memfdWith(message(r, p) + " tag " + std::to_string(tag));
          if (fd < 0 || !boxes[r]->send(p, tag, fd, d).isOk()) ++wrong;
          if (fd >= 0) ::close(fd);
        }
      }
      for (int p = n - 1; p >= 0; --p) {  // and asked for in the other
        for (uint64_t tag : {9u, 7u}) {
          auto fd = boxes[r]->receive(p, tag, d);
          if (!fd.isOk()) {
            ++wrong;
            continue;
          }
          const std::string want = message(p, r) + " tag " + std::to_string(tag);
          if (contents(*fd, want.size()) != want) ++wrong;
          ::close(*fd);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("A forked rank and its parent exchange memfds whose pages they share", "[fdpass]") {
  const std::string token = freshToken();
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto box = FdMailbox::open(token, 1, {parent, ::getpid()});
    if (!box.isOk()) _exit(2);
    const Deadline d = Deadline::afterMs(10000);
    const int fd = ::memfd_create("child", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) _exit(3);
    if (!(*box)->send(0, 1, fd, d).isOk()) _exit(4);
    auto back = (*box)->receive(0, 2, d);
    if (!back.isOk()) _exit(5);
    // The parent wrote into the child's memfd through its own mapping.
    if (contents(fd, 6) != "parent") _exit(6);
    if (contents(*back, 5) != "reply") _exit(7);
    _exit(0);
  }
  auto box = FdMailbox::open(token, 0, {parent, child});
  REQUIRE(box.isOk());
  const Deadline d = Deadline::afterMs(10000);
  auto fd = (*box)->receive(1, 1, d);
  REQUIRE(fd.isOk());
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  REQUIRE(p != MAP_FAILED);
  std::memcpy(p, "parent", 6);
  ::munmap(p, 4096);
  ::close(*fd);
  const int reply = memfdWith("reply");
  REQUIRE(reply >= 0);
  CHECK((*box)->send(1, 2, reply, d).isOk());
  ::close(reply);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("A sender whose pid is not the rank it claims is refused and named", "[fdpass]") {
  const std::string token = freshToken();
  // Rank 1 announced pid 1 (init): this process sending as rank 1 is not it.
  std::vector<int> pids = {::getpid(), 1};
  auto receiver = FdMailbox::open(token, 0, pids);
  REQUIRE(receiver.isOk());
  // Listening as rank 1 requires being its pid...
  CHECK(FdMailbox::open(token, 1, pids).status().code() == plait::Code::kInvalidArgument);
  // ...so the impostor opens its box with a pid list that says it is rank 1.
  auto impostorIn = FdMailbox::open(token, 1, {1, ::getpid()});
  REQUIRE(impostorIn.isOk());
  const int fd = memfdWith("impostor");
  REQUIRE(fd >= 0);
  CHECK((*impostorIn)->send(0, 5, fd, Deadline::afterMs(5000)).isOk());
  ::close(fd);
  auto got = (*receiver)->receive(1, 5, Deadline::afterMs(300));
  REQUIRE_FALSE(got.isOk());
  CHECK(got.status().code() == plait::Code::kRemoteError);
  const std::string why = got.status().message();
  INFO(why);
  CHECK(why.find("got no fd from rank 1 (pid 1) under tag 5") != std::string::npos);
  CHECK(why.find("claims rank 1, which is pid 1") != std::string::npos);
  CHECK(why.find("pid " + std::to_string(::getpid())) != std::string::npos);
}

TEST_CASE("Waits for fds end at the deadline or on abort", "[fdpass]") {
  const std::string token = freshToken();
  std::vector<int> pids(2, ::getpid());
  auto box = FdMailbox::open(token, 0, pids);
  REQUIRE(box.isOk());
  CHECK(FdMailbox::open(token, 0, pids).status().code() == plait::Code::kInvalidUsage);  // taken
  CHECK(FdMailbox::open("", 0, pids).status().code() == plait::Code::kInvalidArgument);
  const auto start = std::chrono::steady_clock::now();
  auto got = (*box)->receive(1, 1, Deadline::afterMs(200));
  CHECK_FALSE(got.isOk());
  const int fd = memfdWith("x");
  REQUIRE(fd >= 0);
  // Rank 1 never listens.
  const plait::Status sent = (*box)->send(1, 1, fd, Deadline::afterMs(200));
  CHECK(sent.code() == plait::Code::kRemoteError);
  CHECK(sent.message().find("did not open its socket") != std::string::npos);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took < std::chrono::seconds(5));
  std::atomic<uint32_t> abort{0};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abort.store(1);
  });
  const auto before = std::chrono::steady_clock::now();
  got = (*box)->receive(1, 1, Deadline::never(), &abort);
  aborter.join();
  CHECK_FALSE(got.isOk());
  CHECK(got.status().message().find("aborted") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(5));
  CHECK((*box)->send(5, 1, fd, Deadline::afterMs(10)).code() == plait::Code::kInvalidArgument);
  ::close(fd);
}
