// The log-depth schedules (algorithms/halving_doubling.h, binomial_tree.h)
// run over in-memory links, every rank a thread, at every rank count from 2
// to 19 and every root: each result is checked element by element against
// the sum computed here. Every message must be received with the size it
// was sent with, none may be left unread, and a receive that waits 20 s
// (a schedule that deadlocks) fails. The transport and the user-facing paths are tested in
// tests/api (PLAIT_ALGO=tree); this covers the index arithmetic at the rank
// counts those do not run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/binomial_tree.h"
#include "algorithms/halving_doubling.h"

namespace plait {
namespace {

using Elem = int64_t;

// Unbounded FIFOs between every ordered pair of ranks.
class Wires {
 public:
  explicit Wires(int n) : n_(n), queues_(static_cast<size_t>(n * n)) {}
  void push(int from, int to, std::vector<Elem> v) {
    std::lock_guard<std::mutex> lock(mu_);
    queues_[static_cast<size_t>(from * n_ + to)].push_back(std::move(v));
    cv_.notify_all();
  }
  std::vector<Elem> pop(int from, int to) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = queues_[static_cast<size_t>(from * n_ + to)];
    if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return !q.empty(); })) return {};  // a hang
    std::vector<Elem> v = std::move(q.front());
    q.pop_front();
    return v;
  }
  size_t leftOver() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (auto& q : queues_) n += q.size();
    return n;
  }

 private:
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::vector<Elem>>> queues_;
};

// The primitives' verbs over Wires, summing int64 elements.
class FakePrims {
 public:
  FakePrims(Wires* w, int me, int from, int to, size_t slice, std::string* err)
      : w_(w), me_(me), from_(from), to_(to), slice_(slice), err_(err) {}
  bool send(const void* src, size_t n) { return put(static_cast<const Elem*>(src), n); }
  bool recv(void* dst, size_t n) { return get(n, nullptr, static_cast<Elem*>(dst), false); }
  bool recvReduceCopy(const void* src, void* dst, size_t n, bool) {
    return get(n, static_cast<const Elem*>(src), static_cast<Elem*>(dst), false);
  }
  bool recvReduceSend(const void* src, size_t n) { return get(n, static_cast<const Elem*>(src), nullptr, true); }
  bool recvCopySend(void* dst, size_t n) { return get(n, nullptr, static_cast<Elem*>(dst), true); }
  bool copySend(const void* src, void* dst, size_t n) {
    std::memmove(dst, src, n * sizeof(Elem));
    return put(static_cast<const Elem*>(src), n);
  }

 private:
  bool fail(const std::string& what) {
    if (err_->empty()) *err_ = "rank " + std::to_string(me_) + ": " + what;
    return false;
  }
  // Like the host primitives, a verb given more than a slice moves it one
  // FIFO step (one message here) at a time.
  bool put(const Elem* src, size_t n) {
    if (to_ < 0) return fail("sends with no peer to send to");
    for (size_t off = 0; off < n; off += slice_)
      w_->push(me_, to_, std::vector<Elem>(src + off, src + off + std::min(slice_, n - off)));
    return true;
  }
  bool get(size_t n, const Elem* add, Elem* dst, bool forward) {
    if (from_ < 0) return fail("receives with no peer to receive from");
    for (size_t off = 0; off < n; off += slice_) {
      const size_t m = std::min(slice_, n - off);
      std::vector<Elem> v = w_->pop(from_, me_);
      if (v.size() != m)
        return fail("got " + std::to_string(v.size()) + " elements from rank " + std::to_string(from_) +
                    ", expected " + std::to_string(m));
      if (add)
        for (size_t i = 0; i < m; ++i) v[i] += add[off + i];
      if (dst) std::memcpy(dst + off, v.data(), m * sizeof(Elem));
      if (forward && !put(v.data(), m)) return false;
    }
    return true;
  }
  Wires* w_;
  int me_, from_, to_;
  size_t slice_;
  std::string* err_;
};

class FakeLinks {
 public:
  FakeLinks(Wires* w, int me, size_t slice) : w_(w), me_(me), slice_(slice) {}
  FakePrims& prims(int slot, int recvFrom, int sendTo, bool) {
    auto it = slots_.find(slot);
    if (it != slots_.end()) slots_.erase(it);
    return slots_.emplace(slot, FakePrims(w_, me_, recvFrom, sendTo, slice_, &error)).first->second;
  }
  std::string error;

 private:
  Wires* w_;
  int me_;
  size_t slice_;
  std::map<int, FakePrims> slots_;
};

Elem input(int rank, size_t i) { return static_cast<Elem>(rank) * 1000003 + static_cast<Elem>(i) * 7 + 1; }

// Runs body(rank, links) on n threads; returns the first error ("" if none).
template <class Body>
std::string runRanks(int n, size_t slice, Body body) {
  Wires wires(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      FakeLinks links(&wires, r, slice);
      const std::string bad = body(r, links);
      errors[static_cast<size_t>(r)] = !links.error.empty() ? links.error : bad;
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) return e;
  if (wires.leftOver() != 0) return std::to_string(wires.leftOver()) + " message(s) never received";
  return "";
}

std::string mismatch(const char* what, int rank, size_t i, Elem got, Elem want) {
  return std::string(what) + " rank " + std::to_string(rank) + " element " + std::to_string(i) + ": " +
         std::to_string(got) + ", expected " + std::to_string(want);
}

TEST_CASE("halving-doubling AllReduce sums exactly at every rank count, in and out of place", "[log_depth]") {
  for (int n = 2; n <= 19; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(37), size_t(1000)})
      for (bool inPlace : {false, true}) {
        INFO("nranks " << n << " count " << count << (inPlace ? " in place" : ""));
        const std::string err = runRanks(n, 16, [&](int r, FakeLinks& links) -> std::string {
          std::vector<Elem> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = input(r, i);
          HalvingDoublingArgs a;
          a.input = reinterpret_cast<const char*>(in.data());
          a.output = reinterpret_cast<char*>(inPlace ? in.data() : out.data());
          a.count = count;
          a.elemSize = sizeof(Elem);
          a.nranks = n;
          a.rank = r;
          a.sliceElems = 16;
          a.alignElems = 8;
          if (!halvingDoublingAllReduce(links, a)) return "the schedule failed";
          const Elem* got = reinterpret_cast<const Elem*>(a.output);
          for (size_t i = 0; i < count; ++i) {
            Elem want = 0;
            for (int p = 0; p < n; ++p) want += input(p, i);
            if (got[i] != want) return mismatch("AllReduce", r, i, got[i], want);
          }
          return "";
        });
        CHECK(err == "");
      }
}

TEST_CASE("recursive-doubling AllGather at every power-of-two rank count", "[log_depth]") {
  for (int n : {2, 4, 8, 16})
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(37)}) {
      INFO("nranks " << n << " count " << count);
      const std::string err = runRanks(n, 16, [&](int r, FakeLinks& links) -> std::string {
        std::vector<Elem> out(count * static_cast<size_t>(n), -1);
        for (size_t i = 0; i < count; ++i) out[static_cast<size_t>(r) * count + i] = input(r, i);
        HalvingDoublingArgs a;
        a.output = reinterpret_cast<char*>(out.data());
        a.count = count;
        a.elemSize = sizeof(Elem);
        a.nranks = n;
        a.rank = r;
        a.sliceElems = 16;
        if (!recursiveDoublingAllGather(links, a)) return "the schedule failed";
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i)
            if (out[static_cast<size_t>(p) * count + i] != input(p, i))
              return mismatch("AllGather", r, static_cast<size_t>(p) * count + i, out[static_cast<size_t>(p) * count + i],
                              input(p, i));
        return "";
      });
      CHECK(err == "");
    }
}

TEST_CASE("binomial Broadcast and Reduce at every rank count and root", "[log_depth]") {
  for (int n = 2; n <= 19; ++n)
    for (int root = 0; root < n; ++root)
      for (size_t count : {size_t(1), size_t(40)}) {
        INFO("nranks " << n << " root " << root << " count " << count);
        const std::string err = runRanks(n, 16, [&](int r, FakeLinks& links) -> std::string {
          std::vector<Elem> in(count), out(count, -1), scratch(16);
          for (size_t i = 0; i < count; ++i) in[i] = input(r, i);
          BinomialTreeArgs a;
          a.input = reinterpret_cast<const char*>(in.data());
          a.output = reinterpret_cast<char*>(out.data());
          a.scratch = reinterpret_cast<char*>(scratch.data());
          a.count = count;
          a.elemSize = sizeof(Elem);
          a.nranks = n;
          a.rank = r;
          a.root = root;
          a.sliceElems = 16;
          if (!binomialBroadcast(links, a)) return "Broadcast failed";
          for (size_t i = 0; i < count; ++i)
            if (out[i] != input(root, i)) return mismatch("Broadcast", r, i, out[i], input(root, i));
          std::fill(out.begin(), out.end(), -1);
          if (!binomialReduce(links, a)) return "Reduce failed";
          for (size_t i = 0; i < count; ++i) {
            Elem want = -1;
            if (r == root) {
              want = 0;
              for (int p = 0; p < n; ++p) want += input(p, i);
            }
            if (out[i] != want) return mismatch("Reduce", r, i, out[i], want);
          }
          return "";
        });
        CHECK(err == "");
      }
}

TEST_CASE("the binomial tree: every rank but the root has one parent, within ceil(log2 n) hops", "[log_depth]") {
  for (int n = 1; n <= 70; ++n) {
    int log2up = 0;
    while ((1 << log2up) < n) ++log2up;
    std::vector<int> parents(static_cast<size_t>(n), 0);
    for (int v = 0; v < n; ++v) {
      const int k = tree::childCount(v, n);
      for (int i = 0; i < k; ++i) {
        const int c = tree::childOf(v, i);
        REQUIRE(c < n);
        CHECK(tree::parentOf(c) == v);
        ++parents[static_cast<size_t>(c)];
      }
      int depth = 0;
      for (int u = v; u != 0; u = tree::parentOf(u)) ++depth;
      CHECK(depth <= log2up);
    }
    CHECK(parents[0] == 0);
    for (int v = 1; v < n; ++v) CHECK(parents[static_cast<size_t>(v)] == 1);
    CHECK(tree::childCount(0, n) == log2up);
  }
}

}  // namespace
}  // namespace plait
