// cpu_mask.h — which CPUs the local ranks may run on, and what that means for
// how they wait (DESIGN.md §4, issue 13 item 3).
//
// Every rank sends its thread's affinity in the bootstrap's peer table. From
// the masks of the ranks on one host the communicator decides:
//   - oversubscribed: more local ranks than CPUs in the union of their masks
//     (ranks bound one per core by mpirun or plait-run are not: the union
//     counts, not each process's own single CPU);
//   - dedicated: no two local ranks may share a CPU (the masks are pairwise
//     disjoint). A waiting rank then keeps its core by spinning instead of
//     yielding it: a yield hands a competing process a whole scheduler slice,
//     and a futex sleep costs a wake-up, while the peer it waits for runs on
//     a CPU of its own.
#pragma once

#include <cstdint>
#include <vector>

namespace plait {

// An affinity mask of up to 1024 CPUs (glibc's CPU_SETSIZE); CPUs beyond
// that are not represented. Plain data: it travels in bootstrap messages.
struct CpuMask {
  static constexpr int kWords = 16;
  uint64_t bits[kWords] = {};

  void set(int cpu);
  int count() const;
  bool empty() const { return count() == 0; }
  bool intersects(const CpuMask& other) const;
  CpuMask& operator|=(const CpuMask& other);
};

// The calling thread's affinity (sched_getaffinity); empty if unreadable.
CpuMask currentCpuMask();

struct LocalCpus {
  int cpus = 0;                 // CPUs in the union of the masks (0: unknown)
  bool oversubscribed = false;  // more ranks than cpus
  bool dedicated = false;       // masks pairwise disjoint, none empty, not oversubscribed
  int minCpusPerRank = 0;       // the smallest mask's size
};

// What the masks of one host's ranks allow. An empty mask (a rank that could
// not read its affinity) makes the answer "unknown": cpus 0, not
// oversubscribed, not dedicated.
LocalCpus assessLocalCpus(const std::vector<CpuMask>& masks);

}  // namespace plait
