// NCCL 2.32's one-sided operations on host memory: ncclPutSignal,
// ncclSignal, ncclWaitSignal, and Plait's plaitGet and plaitTestSignal.
// Checked: a put's bytes are in the window
// before its signal counts (every signal is checked against the slot its put
// wrote), concurrent puts from several ranks into disjoint ranges of one
// window (puts larger than one message included), signals counted and
// consumed as NCCL's counters, an any-of wait (plaitWaitAnySignal), puts to
// self, puts inside a group, a put the owner cannot land (its window
// deregistered) failing the owner's wait with the writer's name, a killed
// writer ending the wait with its name, and every argument NCCL 2.32
// refuses. Ranks are threads, except the killed writer (processes: their
// puts go through process_vm_writev). ctest runs the thread cases twice:
// local peers through their pages (the default), and everything over the
// network connections (PLAIT_RMA_SHM=0).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "plait/rma.h"

using namespace plait_test;

namespace {

std::string lastError(ncclComm_t comm) { return ncclGetLastError(comm); }

// Element i of the k-th put of rank r.
float valueOf(int r, int k, size_t i) { return static_cast<float>(r * 1000000 + k * 1000 + static_cast<int>(i % 997)); }

ncclWaitSignalDesc_t desc(int peer, int opCnt) { return ncclWaitSignalDesc_t{opCnt, peer, 0, 0}; }

}  // namespace

TEST_CASE("puts land before their signals; puts from several ranks into one window", "[rma]") {
  constexpr int kRanks = 3;
  constexpr int kPuts = 12;
  // Slot sizes vary, and two exceed one message (PLAIT_RMA_CHUNK_BYTES is
  // 64 KiB in ctest), so puts are split and the signal rides on the last part.
  auto slotCount = [](int k) -> size_t { return k == 3 ? 40000 : k == 7 ? 70001 : 100 + 37 * k; };
  size_t perWriter = 0;
  for (int k = 0; k < kPuts; ++k) perWriter += slotCount(k);
  auto failed = runThreads(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<float> window(perWriter * (kRanks - 1), -1.0f);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, window.data(), window.size() * sizeof(float), &win, NCCL_WIN_DEFAULT) !=
        ncclSuccess)
      return "ncclCommWindowRegister: " + lastError(comm);
    std::string e;
    if (r == 0) {
      // Signal by signal: after the k-th from writer w, its k-th slot is whole.
      size_t base[kRanks] = {0, 0, perWriter};
      size_t at[kRanks] = {0, 0, 0};
      for (int k = 0; k < kPuts && e.empty(); ++k)
        for (int w = 1; w < kRanks && e.empty(); ++w) {
          ncclWaitSignalDesc_t d = desc(w, 1);
          if (ncclWaitSignal(1, &d, comm, nullptr) != ncclSuccess) return "ncclWaitSignal: " + lastError(comm);
          for (size_t i = 0; i < slotCount(k); ++i)
            if (window[base[w] + at[w] + i] != valueOf(w, k, i)) {
              e = "after signal " + std::to_string(k + 1) + " of rank " + std::to_string(w) + ", element " +
                  std::to_string(i) + " of its slot is " + std::to_string(window[base[w] + at[w] + i]);
              break;
            }
          at[w] += slotCount(k);
        }
    } else {
      size_t offset = (r - 1) * perWriter * sizeof(float);
      for (int k = 0; k < kPuts; ++k) {
        std::vector<float> data(slotCount(k));
        for (size_t i = 0; i < data.size(); ++i) data[i] = valueOf(r, k, i);
        if (ncclPutSignal(data.data(), data.size(), ncclFloat32, 0, win, offset, 0, 0, 0, comm, nullptr) !=
            ncclSuccess)
          return "ncclPutSignal " + std::to_string(k) + ": " + lastError(comm);
        offset += data.size() * sizeof(float);
      }
    }
    if (ncclCommWindowDeregister(comm, win) != ncclSuccess) return "deregister: " + lastError(comm);
    return e;
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("signals are counters: waits consume them, several descriptors at once, to self too", "[rma]") {
  constexpr int kRanks = 3;
  auto failed = runThreads(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<int32_t> window(16, 0);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, window.data(), window.size() * sizeof(int32_t), &win, NCCL_WIN_DEFAULT) !=
        ncclSuccess)
      return "register: " + lastError(comm);
    if (r == 0) {
      // 3 signals from rank 1 and 2 from rank 2 in any interleaving, then one more from each.
      ncclWaitSignalDesc_t first[3] = {desc(1, 2), desc(2, 2), desc(1, 1)};
      if (ncclWaitSignal(3, first, comm, nullptr) != ncclSuccess) return "wait 1: " + lastError(comm);
      ncclWaitSignalDesc_t second[2] = {desc(2, 1), desc(1, 1)};
      if (ncclWaitSignal(2, second, comm, nullptr) != ncclSuccess) return "wait 2: " + lastError(comm);
      // Rank 1's data came with its last signal.
      for (int i = 0; i < 4; ++i)
        if (window[i] != 40 + i) return "window[" + std::to_string(i) + "] is " + std::to_string(window[i]);
      // To self: a put and a bare signal.
      int32_t mine[2] = {7, 8};
      if (ncclPutSignal(mine, 2, ncclInt32, 0, win, 8 * sizeof(int32_t), 0, 0, 0, comm, nullptr) != ncclSuccess ||
          ncclSignal(0, 0, 0, 0, comm, nullptr) != ncclSuccess)
        return "to self: " + lastError(comm);
      ncclWaitSignalDesc_t self = desc(0, 2);
      if (ncclWaitSignal(1, &self, comm, nullptr) != ncclSuccess) return "wait for self: " + lastError(comm);
      if (window[8] != 7 || window[9] != 8) return "put to self did not land";
    } else {
      const int n = r == 1 ? 3 : 2;
      for (int i = 0; i < n; ++i)
        if (ncclSignal(0, 0, 0, 0, comm, nullptr) != ncclSuccess) return "ncclSignal: " + lastError(comm);
      // The last one in a group, a put with it.
      int32_t data[4] = {40, 41, 42, 43};
      if (ncclGroupStart() != ncclSuccess) return "group start";
      ncclResult_t put = r == 1 ? ncclPutSignal(data, 4, ncclInt32, 0, win, 0, 0, 0, 0, comm, nullptr)
                                : ncclSignal(0, 0, 0, 0, comm, nullptr);
      if (put != ncclSuccess || ncclGroupEnd() != ncclSuccess) return "in a group: " + lastError(comm);
    }
    return ncclCommWindowDeregister(comm, win) == ncclSuccess ? "" : "deregister: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

// A server taking whichever client signals next (plaitWaitAnySignal): every
// signal is taken exactly once, each index names a client that did signal,
// and a slow client does not hold the fast one back.
TEST_CASE("plaitWaitAnySignal serves whichever writer signals next", "[rma]") {
  constexpr int kRanks = 3;
  constexpr int kEach = 6;
  auto failed = runThreads(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<int32_t> window(kRanks * kEach, 0);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, window.data(), window.size() * sizeof(int32_t), &win, NCCL_WIN_DEFAULT) !=
        ncclSuccess)
      return "register: " + lastError(comm);
    if (r == 0) {
      const ncclWaitSignalDesc_t from[2] = {desc(1, 1), desc(2, 1)};
      int count[2] = {0, 0};
      std::string order;
      for (int k = 0; k < 2 * kEach; ++k) {
        int which = -1;
        if (plaitWaitAnySignal(2, from, &which, comm) != ncclSuccess) return "plaitWaitAnySignal: " + lastError(comm);
        if (which != 0 && which != 1) return "index " + std::to_string(which);
        // The put that came with the signal is in place.
        const int writer = which + 1, n = count[which]++;
        if (n >= kEach || window[writer * kEach + n] != writer * 100 + n)
          return "signal " + std::to_string(n + 1) + " of rank " + std::to_string(writer) + " without its data";
        order += static_cast<char>('0' + writer);
      }
      // Rank 1 is slow (60 ms per put): rank 2's signals are not held back
      // behind its later ones (rank 2 would have to stall for 360 ms).
      if (order.rfind('2') > order.rfind('1')) return "rank 2 was held back behind rank 1: " + order;
      int bad = 0;
      if (plaitWaitAnySignal(2, from, nullptr, comm) != ncclInvalidArgument) return "which = NULL not refused";
      if (plaitWaitAnySignal(0, from, &bad, comm) != ncclInvalidArgument) return "nDesc 0 not refused";
    } else {
      for (int k = 0; k < kEach; ++k) {
        if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(60));
        const int32_t v = r * 100 + k;
        if (ncclPutSignal(&v, 1, ncclInt32, 0, win, (r * kEach + k) * sizeof(int32_t), 0, 0, 0, comm, nullptr) !=
            ncclSuccess)
          return "put: " + lastError(comm);
      }
    }
    return ncclCommWindowDeregister(comm, win) == ncclSuccess ? "" : "deregister: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("a put the owner cannot land fails the owner's wait, naming the writer", "[rma]") {
  auto failed = runThreads(2, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<float> a(64, 0.0f), b(64, 0.0f);
    ncclWindow_t wa = nullptr, wb = nullptr;
    if (ncclCommWindowRegister(comm, a.data(), a.size() * sizeof(float), &wa, NCCL_WIN_DEFAULT) != ncclSuccess ||
        ncclCommWindowRegister(comm, b.data(), b.size() * sizeof(float), &wb, NCCL_WIN_DEFAULT) != ncclSuccess)
      return "register: " + lastError(comm);
    if (r == 0) {
      // Rank 0 gave its second window back; rank 1 still puts into it.
      if (ncclCommWindowDeregister(comm, wb) != ncclSuccess) return "deregister: " + lastError(comm);
      ncclWaitSignalDesc_t d = desc(1, 1);
      if (ncclWaitSignal(1, &d, comm, nullptr) != ncclRemoteError) return "the wait did not fail";
      const std::string e = lastError(comm);
      for (const char* want : {"rank 1", "window #2 is not registered there"})
        if (e.find(want) == std::string::npos) return "the error does not say '" + std::string(want) + "': " + e;
    } else {
      // Through the network the writer cannot know (success); through the
      // owner's page it can, and is told too.
      const ncclResult_t put = ncclPutSignal(a.data(), 4, ncclFloat32, 0, wb, 0, 0, 0, 0, comm, nullptr);
      if (put != ncclSuccess &&
          (put != ncclInvalidUsage || lastError(comm).find("window #2 is not registered there") == std::string::npos))
        return "put: " + lastError(comm);
      if (ncclCommWindowDeregister(comm, wb) != ncclSuccess) return "deregister: " + lastError(comm);
    }
    return ncclCommWindowDeregister(comm, wa) == ncclSuccess ? "" : "deregister a: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

// Rank 0 destroys its communicator (its windows with it); rank 1's later
// put must fail cleanly, never write into freed memory or crash: locally the
// window is gone from rank 0's page (which rank 1 maps itself), over the
// network the connection is closed.
TEST_CASE("a put to a rank whose communicator is gone fails cleanly", "[rma]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::barrier gone(2);
  std::string errors[2];
  auto rank = [&](int r) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) {
      errors[r] = "init";
      gone.arrive_and_drop();
      return;
    }
    auto window = std::make_unique<std::vector<float>>(64, 0.0f);
    ncclWindow_t win = nullptr;
    const ncclWaitSignalDesc_t d = desc(1 - r, 1);
    ncclWaitSignalDesc_t wait = d;
    if (ncclCommWindowRegister(comm, window->data(), window->size() * sizeof(float), &win, NCCL_WIN_DEFAULT) !=
            ncclSuccess ||
        ncclSignal(1 - r, 0, 0, 0, comm, nullptr) != ncclSuccess || ncclWaitSignal(1, &wait, comm, nullptr) != ncclSuccess)
      errors[r] = "setup: " + lastError(comm);
    if (r == 0) {
      ncclCommWindowDeregister(comm, win);
      ncclCommDestroy(comm);
      window.reset();  // the memory rank 1 would write is freed
      gone.arrive_and_wait();
      return;
    }
    gone.arrive_and_wait();
    const float v = 1.0f;
    const ncclResult_t put = ncclPutSignal(&v, 1, ncclFloat32, 0, win, 0, 0, 0, 0, comm, nullptr);
    // Through the network (test_rma_net) a put may still be taken by the
    // kernel's socket buffer: success or an error are both right there.
    if (put == ncclSuccess && std::getenv("PLAIT_RMA_SHM") == nullptr)
      errors[r] = "a local put to a destroyed communicator succeeded";
    ncclCommWindowDeregister(comm, win);
    ncclCommAbort(comm);
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

// plaitGet: every rank reads ranges of every peer's window (and its own):
// small, several messages long (PLAIT_RMA_CHUNK_BYTES is 64 KiB in ctest),
// at offsets; a read that only the owner can refuse (its part of the window
// is smaller) fails naming why; a read after the owner's signal sees what
// the owner wrote before signalling.
TEST_CASE("gets read peers' windows; the owner refuses what it does not have", "[rma]") {
  constexpr int kRanks = 3;
  constexpr size_t kBig = 70001;
  auto failed = runThreads(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    // Rank 2's part of the window is shorter than the others'.
    std::vector<float> window(r == 2 ? kBig - 1000 : kBig);
    for (size_t i = 0; i < window.size(); ++i) window[i] = valueOf(r, 0, i);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, window.data(), window.size() * sizeof(float), &win, NCCL_WIN_DEFAULT) !=
        ncclSuccess)
      return "register: " + lastError(comm);
    struct Range {
      size_t offset, count;
    };
    for (int q = 0; q < kRanks; ++q)
      for (Range g : {Range{0, 100}, Range{12345, 20000}, Range{0, kBig - 1000}, Range{777, 1}}) {
        std::vector<float> got(g.count, -1.0f);
        if (plaitGet(got.data(), g.count, ncclFloat32, q, win, g.offset * sizeof(float), comm, nullptr) != ncclSuccess)
          return "get from rank " + std::to_string(q) + ": " + lastError(comm);
        for (size_t i = 0; i < g.count; ++i)
          if (got[i] != valueOf(q, 0, g.offset + i))
            return "get from rank " + std::to_string(q) + " at " + std::to_string(g.offset) + ": element " +
                   std::to_string(i) + " is " + std::to_string(got[i]);
      }
    if (r != 2) {
      // Within this rank's window, past rank 2's part of it.
      std::vector<float> got(2000);
      if (plaitGet(got.data(), 2000, ncclFloat32, 2, win, (kBig - 2000) * sizeof(float), comm, nullptr) !=
          ncclInvalidUsage)
        return "a get past rank 2's part was not refused: " + lastError(comm);
      const std::string e = lastError(comm);
      for (const char* want : {"rank 2", "outside window #1"})
        if (e.find(want) == std::string::npos) return "the refusal does not say '" + std::string(want) + "': " + e;
    }
    // Every rank signals every other, then waits for all of theirs.
    auto barrier = [&]() -> std::string {
      std::vector<ncclWaitSignalDesc_t> all;
      for (int q = 0; q < kRanks; ++q) {
        if (q == r) continue;
        if (ncclSignal(q, 0, 0, 0, comm, nullptr) != ncclSuccess) return "barrier signal: " + lastError(comm);
        all.push_back(desc(q, 1));
      }
      if (ncclWaitSignal(int(all.size()), all.data(), comm, nullptr) != ncclSuccess)
        return "barrier wait: " + lastError(comm);
      return "";
    };
    if (std::string e = barrier(); !e.empty()) return e;
    // Rank 0 rewrites the start of its window, then signals rank 1, which
    // reads it.
    if (r == 0) {
      for (int i = 0; i < 64; ++i) window[i] = valueOf(0, 9, i);
      if (ncclSignal(1, 0, 0, 0, comm, nullptr) != ncclSuccess) return "signal: " + lastError(comm);
    } else if (r == 1) {
      ncclWaitSignalDesc_t d = desc(0, 1);
      if (ncclWaitSignal(1, &d, comm, nullptr) != ncclSuccess) return "wait: " + lastError(comm);
      std::vector<float> got(64);
      if (plaitGet(got.data(), 64, ncclFloat32, 0, win, 0, comm, nullptr) != ncclSuccess)
        return "get after the signal: " + lastError(comm);
      for (int i = 0; i < 64; ++i)
        if (got[i] != valueOf(0, 9, i)) return "the get after the signal read an old element " + std::to_string(i);
    }
    // Nobody deregisters while another still reads.
    if (std::string e = barrier(); !e.empty()) return e;
    return ncclCommWindowDeregister(comm, win) == ncclSuccess ? "" : "deregister: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("plaitTestSignal polls without blocking and consumes only what it reports", "[rma]") {
  auto failed = runThreads(2, [&](int r, ncclComm_t comm) -> std::string {
    ncclWaitSignalDesc_t fromPeer = desc(1 - r, 1);
    if (r == 1) {
      // Nothing is sent before rank 0 has polled once and said so.
      if (ncclWaitSignal(1, &fromPeer, comm, nullptr) != ncclSuccess) return "wait for go: " + lastError(comm);
      for (int k = 0; k < 3; ++k)
        if (ncclSignal(0, 0, 0, 0, comm, nullptr) != ncclSuccess) return "signal: " + lastError(comm);
      // Rank 0 is done polling.
      return ncclWaitSignal(1, &fromPeer, comm, nullptr) == ncclSuccess ? "" : "wait: " + lastError(comm);
    }
    int done = -1;
    ncclWaitSignalDesc_t two = desc(1, 2), one = desc(1, 1);
    if (plaitTestSignal(1, &two, nullptr, comm) != ncclInvalidArgument) return "done = NULL not refused";
    if (plaitTestSignal(1, &two, &done, comm) != ncclSuccess || done != 0)
      return "a poll before any signal reported " + std::to_string(done);
    if (ncclSignal(1, 0, 0, 0, comm, nullptr) != ncclSuccess) return "go: " + lastError(comm);
    // Poll until two of the three signals are counted.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    do {
      if (plaitTestSignal(1, &two, &done, comm) != ncclSuccess) return "test: " + lastError(comm);
    } while (done == 0 && std::chrono::steady_clock::now() < until);
    if (done != 1) return "two signals never reported";
    // The third: consumed once, by the poll that reports it.
    do {
      if (plaitTestSignal(1, &one, &done, comm) != ncclSuccess) return "test: " + lastError(comm);
    } while (done == 0 && std::chrono::steady_clock::now() < until);
    if (done != 1) return "the third signal never reported";
    if (plaitTestSignal(1, &one, &done, comm) != ncclSuccess || done != 0) return "a consumed signal reported again";
    return ncclSignal(1, 0, 0, 0, comm, nullptr) == ncclSuccess ? "" : "signal: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("one-sided arguments NCCL 2.32 refuses are refused, naming them", "[rma]") {
  auto failed = runThreads(2, [&](int r, ncclComm_t comm) -> std::string {
    std::vector<float> buf(32, 0.0f);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, buf.data(), buf.size() * sizeof(float), &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return "register: " + lastError(comm);
    const int peer = 1 - r;
    struct Case {
      ncclResult_t got;
      const char* what;  // for the reader: what the refusal names
    };
    int notAWindow = 0;
    ncclWaitSignalDesc_t bad[] = {desc(peer, 0), desc(5, 1), {1, peer, 1, 0}, {1, peer, 0, 2}};
    // Every case fails before anything moves.
    const Case cases[] = {
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, win, 0, 1, 0, 0, comm, nullptr), "sigIdx is 1"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, win, 0, 0, 3, 0, comm, nullptr), "ctx is 3"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, win, 0, 0, 0, 1, comm, nullptr), "flags is 1"},
        {ncclPutSignal(nullptr, 4, ncclFloat32, peer, win, 0, 0, 0, 0, comm, nullptr), "localbuff is NULL"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, nullptr, 0, 0, 0, 0, comm, nullptr), "peerWin is NULL"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, reinterpret_cast<ncclWindow_t>(&notAWindow), 0, 0, 0, 0,
                       comm, nullptr),
         "not a window registered"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, peer, win, 200, 0, 0, 0, comm, nullptr), "past the end"},
        {ncclPutSignal(buf.data(), 30, ncclFloat32, peer, win, 16, 0, 0, 0, comm, nullptr), "runs past the window"},
        {ncclPutSignal(buf.data(), 4, static_cast<ncclDataType_t>(99), peer, win, 0, 0, 0, 0, comm, nullptr),
         "datatype"},
        {ncclPutSignal(buf.data(), 4, ncclFloat32, 2, win, 0, 0, 0, 0, comm, nullptr), "peer"},
        {ncclSignal(-1, 0, 0, 0, comm, nullptr), "peer"},
        {ncclSignal(peer, 2, 0, 0, comm, nullptr), "sigIdx is 2"},
        {ncclSignal(peer, 0, 0, 4, comm, nullptr), "flags is 4"},
        {ncclWaitSignal(0, bad, comm, nullptr), "nDesc is 0"},
        {ncclWaitSignal(1, nullptr, comm, nullptr), "signalDescs is NULL"},
        {ncclWaitSignal(1, &bad[0], comm, nullptr), "signalDescs[0].opCnt is 0"},
        {ncclWaitSignal(1, &bad[1], comm, nullptr), "signalDescs[0].peer is 5"},
        {ncclWaitSignal(1, &bad[2], comm, nullptr), "signalDescs[0].sigIdx is 1"},
        {ncclWaitSignal(1, &bad[3], comm, nullptr), "signalDescs[0].ctx is 2"},
    };
    int i = 0;
    for (const Case& c : cases) {
      ++i;
      if (c.got != ncclInvalidArgument) return "case " + std::to_string(i) + " returned " + std::to_string(c.got);
    }
    // Two of the texts (each call overwrites the last error).
    ncclPutSignal(buf.data(), 30, ncclFloat32, peer, win, 16, 0, 0, 0, comm, nullptr);
    if (lastError(comm).find("runs past the window's end (112 bytes left)") == std::string::npos)
      return "the range error says: " + lastError(comm);
    ncclWaitSignal(1, &bad[1], comm, nullptr);
    if (lastError(comm).find("not a rank of the 2-rank communicator") == std::string::npos)
      return "the peer error says: " + lastError(comm);
    // Nothing was connected or lost: a real exchange still works.
    if (r == 1) {
      if (ncclPutSignal(buf.data(), 2, ncclFloat32, 0, win, 0, 0, 0, 0, comm, nullptr) != ncclSuccess)
        return "put after refusals: " + lastError(comm);
    } else {
      ncclWaitSignalDesc_t d = desc(1, 1);
      if (ncclWaitSignal(1, &d, comm, nullptr) != ncclSuccess) return "wait after refusals: " + lastError(comm);
    }
    return ncclCommWindowDeregister(comm, win) == ncclSuccess ? "" : "deregister: " + lastError(comm);
  });
  CHECK(failed == std::vector<std::string>{});
}

// The writer is a process killed after its first put: the owner, waiting
// for two, gets ncclRemoteError naming it, long before its deadline.
TEST_CASE("a killed writer ends the owner's wait with its name", "[rma][process]") {
  auto codes = runProcesses(2, [](int r, const ncclUniqueId& id) -> int {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) return 10;
    std::vector<float> buf(256, 1.0f);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, buf.data(), buf.size() * sizeof(float), &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return 11;
    if (r == 1) {
      if (ncclPutSignal(buf.data(), 256, ncclFloat32, 0, win, 0, 0, 0, 0, comm, nullptr) != ncclSuccess) return 12;
      ::raise(SIGKILL);
    }
    ncclWaitSignalDesc_t d = desc(1, 2);
    const ncclResult_t got = ncclWaitSignal(1, &d, comm, nullptr);
    const std::string e = ncclGetLastError(comm);
    std::fprintf(stderr, "owner: %s\n", e.c_str());
    if (got != ncclRemoteError) return 13;
    if (e.find("rank 1 (host") == std::string::npos || e.find("1 came") == std::string::npos) return 14;
    ncclCommAbort(comm);
    return 0;
  });
  REQUIRE(codes.size() == 2);
  CHECK(codes[0] == 0);
  CHECK(codes[1] == -SIGKILL);
}

// Between processes a get reads the owner's memory with process_vm_readv
// (or its agent answers, with PLAIT_RMA_SHM=0 inherited from the caller).
TEST_CASE("a get between processes reads the owner's window", "[rma][process]") {
  auto codes = runProcesses(2, [](int r, const ncclUniqueId& id) -> int {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) return 10;
    std::vector<float> buf(5000);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = valueOf(r, 1, i);
    ncclWindow_t win = nullptr;
    if (ncclCommWindowRegister(comm, buf.data(), buf.size() * sizeof(float), &win, NCCL_WIN_DEFAULT) != ncclSuccess)
      return 11;
    std::vector<float> got(4000, -1.0f);
    if (plaitGet(got.data(), got.size(), ncclFloat32, 1 - r, win, 1000 * sizeof(float), comm, nullptr) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: %s\n", r, ncclGetLastError(comm));
      return 12;
    }
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != valueOf(1 - r, 1, 1000 + i)) return 13;
    // Both read before either deregisters.
    if (ncclSignal(1 - r, 0, 0, 0, comm, nullptr) != ncclSuccess) return 14;
    ncclWaitSignalDesc_t d = desc(1 - r, 1);
    if (ncclWaitSignal(1, &d, comm, nullptr) != ncclSuccess) return 15;
    ncclCommWindowDeregister(comm, win);
    ncclCommDestroy(comm);
    return 0;
  });
  CHECK(codes == std::vector<int>{0, 0});
}

