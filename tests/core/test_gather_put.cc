// Gather's blocks written into the root's buffer by their senders (core/
// p2p_batch.cc: a write request, the root's answer, process_vm_writev, the report).
// Two forked ranks; the root's block for rank 1 lies in a page it may only
// read. Through the FIFOs the root's own copy would fault there; by the
// write, the sender's system call fails, it reports the errno, and both
// ranks fail with errors naming the other, nothing written. And a root that
// comes late: the sender withdraws its request and sends the block through
// the FIFO, so it returns without waiting for the root, as before writes.
// And groups whose sends fill the FIFO exactly: a withdrawn request's step
// would overfill it while the root runs its group's AllReduce first, so the
// block goes through the FIFO (P2pBatch::mayPut).
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/cma.h"
#include "base/config.h"
#include "forged_peer.h"

using namespace plait;

namespace {

constexpr size_t kBlock = 128 << 10;  // within PLAIT_P2P_PUT_MIN/MAX_BYTES' defaults

Task gatherTask(const void* in, void* out) {
  Task t;
  t.coll = CollType::kGather;
  t.sendbuff = in;
  t.recvbuff = out;
  t.count = kBlock;
  t.type = ncclInt8;
  t.root = 0;
  return t;
}

// Rank 0, the root: its output's second block (rank 1's) is read-only.
int root(const ncclUniqueId& id, int out) {
  Communicator comm(0, 2);
  Status s = comm.init(id, CommOptions{});
  if (s.isOk()) {
    void* mem = mmap(nullptr, 2 * kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 3;
    char* recv = static_cast<char*>(mem);
    std::memset(recv, 0x5a, 2 * kBlock);
    if (mprotect(recv + kBlock, kBlock, PROT_READ) != 0) return 4;
    std::string in(kBlock, 'r');
    s = comm.runGroup({gatherTask(in.data(), recv)});
    for (size_t i = kBlock; i < 2 * kBlock && !s.isOk(); ++i)
      if (recv[i] != 0x5a) return 5;  // nothing of rank 1's got in
  }
  const std::string text = s.toString();
  (void)!write(out, text.c_str(), text.size());
  return 0;
}

// Rank 1: exits 0 when its Gather failed naming the write into rank 0.
int sender(const ncclUniqueId& id, pid_t) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  std::string in(kBlock, 's');
  const Status s = comm.runGroup({gatherTask(in.data(), nullptr)});
  return !s.isOk() && s.toString().find("writing into rank 0's receive buffer") != std::string::npos ? 0 : 2;
}

// Rank 0, the root, 2 s late: checks every byte of both blocks.
int lateRoot(const ncclUniqueId& id, int out) {
  Communicator comm(0, 2);
  Status s = comm.init(id, CommOptions{});
  if (s.isOk()) {
    usleep(2000 * 1000);
    std::string in(kBlock, 'r'), recv(2 * kBlock, 0);
    s = comm.runGroup({gatherTask(in.data(), recv.data())});
    if (s.isOk() && recv != std::string(kBlock, 'r') + std::string(kBlock, 's'))
      s = internalError("the gathered blocks differ from the inputs");
  }
  const std::string text = s.toString();
  (void)!write(out, text.c_str(), text.size());
  return 0;
}

// Rank 1: exits 0 when its Gather succeeded well before the root came (the
// root waits 2 s after its init, which ends about when this one's does).
int earlySender(const ncclUniqueId& id, pid_t) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  std::string in(kBlock, 's');
  const Deadline soon = Deadline::afterMs(1000);
  if (!comm.runGroup({gatherTask(in.data(), nullptr)}).isOk()) return 2;
  return soon.expired() ? 3 : 0;
}

// A group whose sends fill rank 1's point-to-point FIFO to rank 0 exactly,
// its Gather block included: 4 sends of 96 KiB (6 steps each: under
// P2P_CMA_MIN_BYTES, so through the FIFO) and the 128 KiB block (8 steps) in
// 32 steps of 16 KiB. Rank 0 runs its group's AllReduce before its receives,
// and rank 1 calls that AllReduce after its group. A write request withdrawn
// while rank 0 is in the AllReduce would take a 33rd step: rank 1 would wait
// for rank 0, and rank 0 for rank 1, until the timeout. Round after round:
// after each AllReduce rank 1 runs ahead into its next group while rank 0
// still takes the last round's steps, so it finds fewer steps free than its
// group will have (rank 0 takes those before its next AllReduce).
constexpr int kFillSends = 4;
constexpr size_t kFillBytes = 96 << 10;
constexpr int kFillRounds = 40;

Task allReduceTask(int* value) {
  Task t;
  t.coll = CollType::kAllReduce;
  t.sendbuff = value;
  t.recvbuff = value;
  t.count = 1;
  t.type = ncclInt32;
  t.op = RedOp{RedOpKind::kSum};
  return t;
}

// Rank 0, the root: checks every byte it received and the sum, every round.
// It receives into memory it never touched (a page fault every 4 KiB), so it
// takes each round's steps slower than rank 1 posts the next round's.
int fullRoot(const ncclUniqueId& id, int out) {
  Communicator comm(0, 2);
  Status s = comm.init(id, CommOptions{});
  const size_t bytes = kFillSends * kFillBytes + 2 * kBlock;
  for (int round = 0; round < kFillRounds && s.isOk(); ++round) {
    const char tag = static_cast<char>('a' + round % 20);
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 3;
    char* got = static_cast<char*>(mem);
    char* recv = got + kFillSends * kFillBytes;
    std::string in(kBlock, 'r');
    int sum = 1;
    std::vector<Task> group;
    for (int i = 0; i < kFillSends; ++i)
      group.push_back(test::p2pTask(CollType::kRecv, got + i * kFillBytes, kFillBytes, 1));
    group.push_back(gatherTask(in.data(), recv));
    group.push_back(allReduceTask(&sum));
    s = comm.runGroup(group);
    for (int i = 0; i < kFillSends && s.isOk(); ++i)
      if (std::string(got + i * kFillBytes, kFillBytes) != std::string(kFillBytes, static_cast<char>(tag + i)))
        s = internalError("a send's bytes differ");
    if (s.isOk() && std::string(recv, 2 * kBlock) != std::string(kBlock, 'r') + std::string(kBlock, tag))
      s = internalError("the gathered blocks differ from the inputs");
    munmap(mem, bytes);
    if (s.isOk() && sum != 3) s = internalError("the AllReduce's sum is " + std::to_string(sum) + ", not 3");
    if (!s.isOk()) s.withContext("round " + std::to_string(round));
  }
  const std::string text = s.toString();
  (void)!write(out, text.c_str(), text.size());
  return 0;
}

// Rank 1: each round its group's sends and Gather block, then the AllReduce.
int fillingSender(const ncclUniqueId& id, pid_t) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  for (int round = 0; round < kFillRounds; ++round) {
    const char tag = static_cast<char>('a' + round % 20);
    std::vector<std::string> data;
    for (int i = 0; i < kFillSends; ++i) data.emplace_back(kFillBytes, static_cast<char>(tag + i));
    std::string in(kBlock, tag);
    std::vector<Task> group;
    for (auto& d : data) group.push_back(test::p2pTask(CollType::kSend, d.data(), kFillBytes, 0));
    group.push_back(gatherTask(in.data(), nullptr));
    if (!comm.runGroup(group).isOk()) return 2;
    int two = 2;
    if (!comm.runGroup({allReduceTask(&two)}).isOk() || two != 3) return 3;
  }
  return 0;
}

// The same exact fill, deterministic: rank 1 first sends 96 KiB alone (6
// steps, which rank 0 takes 100 ms later, alone), then runs its group. At the
// Gather block 30 steps are taken and 2 free, but rank 0 takes the first 6
// before its group, so the block's 8 steps are exactly what is left to it.
int lateRoot96(const ncclUniqueId& id, int out) {
  Communicator comm(0, 2);
  Status s = comm.init(id, CommOptions{});
  if (s.isOk()) {
    usleep(100 * 1000);
    std::string first(kFillBytes, 0);
    s = comm.runGroup({test::p2pTask(CollType::kRecv, first.data(), kFillBytes, 1)});
    if (s.isOk() && first != std::string(kFillBytes, 'z')) s = internalError("the lone send's bytes differ");
  }
  std::vector<std::string> got(kFillSends, std::string(kFillBytes, 0));
  std::string in(kBlock, 'r'), recv(2 * kBlock, 0);
  int sum = 1;
  if (s.isOk()) {
    std::vector<Task> group;
    for (auto& g : got) group.push_back(test::p2pTask(CollType::kRecv, g.data(), kFillBytes, 1));
    group.push_back(gatherTask(in.data(), recv.data()));
    group.push_back(allReduceTask(&sum));
    s = comm.runGroup(group);
  }
  for (int i = 0; i < kFillSends && s.isOk(); ++i)
    if (got[i] != std::string(kFillBytes, static_cast<char>('a' + i))) s = internalError("a send's bytes differ");
  if (s.isOk() && recv != std::string(kBlock, 'r') + std::string(kBlock, 's'))
    s = internalError("the gathered blocks differ from the inputs");
  if (s.isOk() && sum != 3) s = internalError("the AllReduce's sum is " + std::to_string(sum) + ", not 3");
  const std::string text = s.toString();
  (void)!write(out, text.c_str(), text.size());
  return 0;
}

int aheadSender96(const ncclUniqueId& id, pid_t) {
  Communicator comm(1, 2);
  if (!comm.init(id, CommOptions{}).isOk()) return 1;
  std::string first(kFillBytes, 'z');
  if (!comm.runGroup({test::p2pTask(CollType::kSend, first.data(), kFillBytes, 0)}).isOk()) return 2;
  std::vector<std::string> data;
  for (int i = 0; i < kFillSends; ++i) data.emplace_back(kFillBytes, static_cast<char>('a' + i));
  std::string in(kBlock, 's');
  std::vector<Task> group;
  for (auto& d : data) group.push_back(test::p2pTask(CollType::kSend, d.data(), kFillBytes, 0));
  group.push_back(gatherTask(in.data(), nullptr));
  if (!comm.runGroup(group).isOk()) return 3;
  int two = 2;
  return comm.runGroup({allReduceTask(&two)}).isOk() && two == 3 ? 0 : 4;
}

// The settings of a case, unset again however it ends. putWaitUs: how long
// the sender waits for the root's answer.
struct Settings {
  // `more`: further settings of this case (name, value), unset with the rest.
  explicit Settings(const char* putWaitUs, std::vector<std::pair<std::string, std::string>> more = {})
      : more_(std::move(more)) {
    setenv("PLAIT_P2P_PUT_WAIT_US", putWaitUs, 1);
    setenv("PLAIT_NCHANNELS", "1", 1);
    setenv("PLAIT_TIMEOUT", "10", 1);
    setenv("PLAIT_INIT_TIMEOUT", "20", 1);
    setenv("PLAIT_DIRECT_CMA", "0", 1);  // the point-to-point path, whatever the direct path's thresholds
    for (const auto& [name, value] : more_) setenv(name.c_str(), value.c_str(), 1);
    config::resetAll();
  }
  ~Settings() {
    for (const char* v : {"PLAIT_P2P_PUT_WAIT_US", "PLAIT_NCHANNELS", "PLAIT_TIMEOUT", "PLAIT_INIT_TIMEOUT",
                          "PLAIT_DIRECT_CMA"})
      unsetenv(v);
    for (const auto& more : more_) unsetenv(more.first.c_str());
    config::resetAll();
  }
  Settings(const Settings&) = delete;
  Settings& operator=(const Settings&) = delete;

 private:
  std::vector<std::pair<std::string, std::string>> more_;
};

// Whether one forked process may write into another's memory, as the ranks
// (siblings) would: the ranks' probe at init decides the same way, and
// without it every block goes through the FIFOs. (A parent may write into its
// child where siblings may not: Yama's ptrace_scope 1.)
bool crossMemoryAttachPermitted() {
  static uint64_t word = 0;
  const pid_t target = fork();
  if (target == 0) {
    const Deadline until = Deadline::afterMs(5000);
    while (AtomicRef<uint64_t>(word).load(mo::acquire) != 7 && !until.expired()) usleep(1000);
    _exit(AtomicRef<uint64_t>(word).load(mo::acquire) == 7 ? 0 : 1);
  }
  const pid_t writer = fork();
  if (writer == 0) {
    const uint64_t seven = 7;
    _exit(cmaWrite(target, reinterpret_cast<uint64_t>(&word), &seven, sizeof seven) == 0 ? 0 : 1);
  }
  int wrote = 0, got = 0;
  waitpid(writer, &wrote, 0);
  if (!WIFEXITED(wrote) || WEXITSTATUS(wrote) != 0) kill(target, SIGKILL);
  waitpid(target, &got, 0);
  return WIFEXITED(wrote) && WEXITSTATUS(wrote) == 0 && WIFEXITED(got) && WEXITSTATUS(got) == 0;
}

}  // namespace

TEST_CASE("a Gather block's sender does not wait for a late root", "[p2p][forks]") {
  Settings settings("50");
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const test::ForgedPair r = test::runForgedPair(id.value(), lateRoot, earlySender);
  INFO("rank 0 status " << r.status0 << ", rank 1 status " << r.status1 << ": " << r.text);
  REQUIRE(WIFEXITED(r.status1));
  CHECK(WEXITSTATUS(r.status1) == 0);  // 3: it waited for the root
  CHECK(r.text == "Success");
}

// The exact-fill cases: 32 steps of 16 KiB, blocks of kBlock and up written,
// a 5 s timeout; both ranks must succeed with every byte right.
static void checkExactFill(const std::function<int(const ncclUniqueId&, int)>& root,
                           const std::function<int(const ncclUniqueId&, pid_t)>& sender) {
  if (!crossMemoryAttachPermitted()) {
    WARN("cross-memory attach is not permitted here: Gather's blocks go through the FIFOs; not tested");
    return;
  }
  Settings settings("50", {{"PLAIT_TIMEOUT", "5"},
                           {"PLAIT_SHM_P2P_STEPS", "32"},
                           {"PLAIT_SHM_P2P_STEP_BYTES", "16384"},
                           {"PLAIT_P2P_CMA_MIN_BYTES", std::to_string(kBlock)}});
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const test::ForgedPair r = test::runForgedPair(id.value(), root, sender);
  INFO("rank 0 status " << r.status0 << ", rank 1 status " << r.status1 << ": " << r.text);
  REQUIRE(WIFEXITED(r.status1));
  CHECK(WEXITSTATUS(r.status1) == 0);
  CHECK(r.text == "Success");
}

TEST_CASE("a withdrawn write request does not overfill a FIFO that the group's sends fill exactly, round after round",
          "[p2p][forks]") {
  checkExactFill(fullRoot, fillingSender);
}

TEST_CASE("a withdrawn write request does not overfill the steps a sender ahead of its root has left",
          "[p2p][forks]") {
  checkExactFill(lateRoot96, aheadSender96);
}

TEST_CASE("a Gather block the root cannot take fails both ranks, naming the write", "[p2p][forks]") {
  if (!crossMemoryAttachPermitted()) {
    WARN("cross-memory attach is not permitted here: Gather's blocks go through the FIFOs; not tested");
    return;
  }
  Settings settings("5000000");  // whichever rank comes first, the block goes by the write
  auto id = createUniqueId();
  REQUIRE(id.isOk());
  const test::ForgedPair r = test::runForgedPair(id.value(), root, sender);
  INFO("rank 0 status " << r.status0 << ", rank 1 status " << r.status1 << ": " << r.text);
  REQUIRE(WIFEXITED(r.status0));  // through the FIFOs: SIGSEGV in the root's copy
  CHECK(WEXITSTATUS(r.status0) == 0);
  REQUIRE(WIFEXITED(r.status1));
  CHECK(WEXITSTATUS(r.status1) == 0);
  CHECK_THAT(r.text, Catch::StartsWith("RemoteError") &&
                         Catch::Contains("rank 1 could not write its message into rank 0's receive buffer"));
}
