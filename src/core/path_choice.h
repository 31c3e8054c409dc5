// path_choice.h — for unregistered buffers between local processes, whether a
// call goes through the FIFOs (copy in, copy out: the ring, the chains, the
// point-to-point steps) or is copied once by cross-memory attach (the direct
// path, core/direct.h), chosen call by call from what each has recently cost
// here.
//
// Why measure rather than rule: on a quiet core pair the FIFOs win most of
// these calls (a 1 MiB AllReduce at 2 ranks: 50-60 us against 130-150 by
// cross-memory attach), but in the windows in which a VM's two cores copy
// each other's freshly written lines slowly (perf/results/host/windows.md)
// the FIFO path takes 5-10x longer while a single copy by the kernel does
// not move (the same call: 600-850 us against 130-150). Which kind of window
// a machine is in is not known in advance and changes within seconds.
//
// How: per collective (in place and out of place apart) and power-of-two
// size class, an estimate of each path's time per byte, from this rank's own
// calls (the wall time of the whole call, agreement included: the cheapest
// of its last three calls in a row, so the path in use looks slow once it was
// slow three times running, not for one call whose rank was descheduled; a
// path tried once per interval is judged by that call, which leans the
// choice towards the path in use).
// The cheaper estimate wins; once per
// exploration interval (PLAIT_DIRECT_CMA_EXPLORE_MS, or 50 times the other
// path's estimated call where that is longer, up to 20 intervals) the other
// path runs one call, so a path that got slow is left within three calls and
// a path that recovered is found again within that interval. Classes with no
// estimate yet start with the static rule's choice and then try the other,
// three calls each: a path's first call of a class is not counted, and its
// estimate starts as the cheaper of the next two (a 1 MiB Gather's second
// call by cross-memory attach took 42 us where later ones took 18, still
// touching its buffers' pages for the first time, and a single such figure
// kept the slower path for the whole 100 ms).
//
// Only one rank's choice counts (the rank whose call spans the whole
// operation on both paths: rank 0's; the root's of a Reduce, a Gather or an
// out-of-place Broadcast or Scatter; the last receiver's of an in-place one;
// DirectPath::deciderOf); it travels in the direct path's descriptor, so
// every rank follows it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace plait {

class PathChooser {
 public:
  // What a figure is kept apart by, besides its size class: the collective
  // (CollType's values) and whether the call runs in place (kinds kColls and
  // up): an in-place Broadcast's, Scatter's or Gather's root copies a share
  // of the others' blocks (direct.h) and an in-place AllGather copies nothing
  // locally, so the two forms cost differently on the same path. kindOf()
  // makes the key.
  static constexpr int kColls = 10;
  static constexpr int kKinds = 2 * kColls;
  static int kindOf(int coll, bool inPlace) { return (coll < 0 ? 0 : coll) % kColls + (inPlace ? kColls : 0); }
  // Size classes: bit_width(bytes), from 2^14 (nothing smaller reaches the
  // choice: the direct path starts at 16 KiB) up; larger sizes share the top one.
  static constexpr int kClasses = 32;
  static constexpr int kFirstClassBits = 15;

  explicit PathChooser(uint64_t exploreNs = 100'000'000) : exploreNs_(exploreNs) {}

  // true: cross-memory attach. `rule` is what the static thresholds say.
  bool choose(int kind, size_t bytes, bool rule, uint64_t now) const {
    const Class& c = classOf(kind, bytes);
    const Estimate& fifo = c.path[0];
    const Estimate& cma = c.path[1];
    if (!fifo.valid && !cma.valid) return rule;
    if (!fifo.valid || !cma.valid) return !cma.valid;  // try the one not seen yet
    const bool best = cma.nsPerByte < fifo.nsPerByte;
    // Once per interval, the other path for one call (with an interval of 0,
    // the two in turn); for calls so long that one such call would cost more
    // than about 2% of the interval's time, the interval grows to keep it
    // there, up to 20 intervals.
    const double otherNs = c.path[!best].nsPerByte * static_cast<double>(bytes);
    const double longest = 20.0 * static_cast<double>(exploreNs_);
    const double shortest = static_cast<double>(exploreNs_);
    const uint64_t interval = static_cast<uint64_t>(std::clamp(50.0 * otherNs, shortest, longest));
    return now - c.exploredAt >= interval && c.path[!best].at <= c.path[best].at ? !best : best;
  }

  // What a call of `bytes` on path `cma` took, `elapsedNs` wall time.
  void record(int kind, size_t bytes, bool cma, uint64_t elapsedNs, uint64_t now) {
    Class& c = classOf(kind, bytes);
    Estimate& e = c.path[cma];
    // A call on the path that is not the cheaper (or not yet known) was a
    // try; the next one is due an interval after it. (choose() does not mark
    // it: a call it is asked about may still fall back for other reasons.)
    if (!c.path[0].valid || !c.path[1].valid || cma != (c.path[1].nsPerByte < c.path[0].nsPerByte)) c.exploredAt = now;
    if (!e.warm) {  // a path's first call of a class pays for cold caches, page faults, buffers: not counted
      e.warm = true;
      return;
    }
    const double sample = static_cast<double>(elapsedNs) / static_cast<double>(bytes == 0 ? 1 : bytes);
    // A fresh look after a pause replaces the old figures; calls in a row
    // keep the last kRecent, and the estimate is the cheapest of them: a
    // path looks slow only once it was slow kRecent calls in a row. Ranks
    // that share cores see single calls take many times their usual time
    // (the rank or a peer was descheduled); the windows last seconds.
    if (e.count > 0 && (!e.valid || now - e.at < exploreNs_)) {
      e.recent[e.next] = sample;
      e.next = (e.next + 1) % kRecent;
      e.count = std::min(e.count + 1, kRecent);
    } else {
      e.recent[0] = sample;
      e.next = 1 % kRecent;
      e.count = 1;
    }
    e.nsPerByte = *std::min_element(e.recent, e.recent + e.count);
    e.valid = e.valid || e.count >= kFirstCalls;
    e.at = now;
  }

  // The estimates, for tests and the log: ns per byte, or a negative value
  // where there is none.
  double estimate(int kind, size_t bytes, bool cma) const {
    const Estimate& e = classOf(kind, bytes).path[cma];
    return e.valid ? e.nsPerByte : -1.0;
  }

 private:
  static constexpr int kRecent = 3;      // calls in a row an estimate keeps
  static constexpr int kFirstCalls = 2;  // counted calls before a path's first estimate
  struct Estimate {
    double nsPerByte = 0;
    double recent[kRecent] = {};  // the last calls' ns per byte, `count` of them, the next to go at `next`
    int count = 0;
    int next = 0;
    uint64_t at = 0;
    bool warm = false;   // its first call was seen
    bool valid = false;  // and kFirstCalls later ones
  };
  struct Class {
    Estimate path[2];  // [0] the FIFOs, [1] cross-memory attach
    uint64_t exploredAt = 0;
  };
  static int classIndex(size_t bytes) {
    const int bits = static_cast<int>(std::bit_width(bytes));
    return std::clamp(bits - kFirstClassBits, 0, kClasses - 1);
  }
  Class& classOf(int kind, size_t bytes) { return classes_[(kind < 0 ? 0 : kind) % kKinds][classIndex(bytes)]; }
  const Class& classOf(int kind, size_t bytes) const {
    return classes_[(kind < 0 ? 0 : kind) % kKinds][classIndex(bytes)];
  }

  uint64_t exploreNs_;
  Class classes_[kKinds][kClasses];
};

}  // namespace plait
