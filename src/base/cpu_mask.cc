#include "base/cpu_mask.h"

#include <sched.h>

#include <algorithm>
#include <bit>

namespace plait {

void CpuMask::set(int cpu) {
  if (cpu >= 0 && cpu < 64 * kWords) bits[cpu / 64] |= uint64_t{1} << (cpu % 64);
}

int CpuMask::count() const {
  int n = 0;
  for (uint64_t w : bits) n += std::popcount(w);
  return n;
}

bool CpuMask::intersects(const CpuMask& other) const {
  for (int i = 0; i < kWords; ++i)
    if (bits[i] & other.bits[i]) return true;
  return false;
}

CpuMask& CpuMask::operator|=(const CpuMask& other) {
  for (int i = 0; i < kWords; ++i) bits[i] |= other.bits[i];
  return *this;
}

CpuMask currentCpuMask() {
  CpuMask m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return m;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpu < 64 * CpuMask::kWords; ++cpu)
    if (CPU_ISSET(cpu, &set)) m.set(cpu);
  return m;
}

LocalCpus assessLocalCpus(const std::vector<CpuMask>& masks) {
  LocalCpus out;
  if (masks.empty()) return out;
  CpuMask all;
  bool disjoint = true;
  out.minCpusPerRank = masks.front().count();
  for (const CpuMask& m : masks) {
    if (m.empty()) return LocalCpus{};
    if (all.intersects(m)) disjoint = false;
    all |= m;
    out.minCpusPerRank = std::min(out.minCpusPerRank, m.count());
  }
  out.cpus = all.count();
  out.oversubscribed = static_cast<int>(masks.size()) > out.cpus;
  out.dedicated = disjoint && !out.oversubscribed;
  return out;
}

}  // namespace plait
