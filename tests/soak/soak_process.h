// soak_process.h — the process side shared by the soaks (kill_soak,
// live_soak): the id server, reaping with a deadline, what a job left in
// /dev/shm, percentiles.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"

namespace soak {

// /dev/shm entries Plait made for one of `pids` (plait-<pid>-...).
std::vector<std::string> leftovers(const std::vector<pid_t>& pids);
// A process that hosts the bootstrap root (so the soak's parent stays
// single-threaded and can fork every run), writes the id and waits to be
// killed. Its pid, or -1.
pid_t startIdServer(ncclUniqueId* id);
// Waits for each of `pids` until `untilNs` (monotonicNs); one still running
// then is named in *failures, its stacks printed (gdb), and killed.
void reapAll(std::vector<pid_t>& pids, uint64_t untilNs, std::vector<std::string>* failures);
// The end of a run: kills the id server, reaps every process (reapAll, 10 s)
// and names (and removes) what they left in /dev/shm.
void endRun(const std::vector<pid_t>& ranks, pid_t idServer, std::vector<std::string>* failures);
double percentile(std::vector<double> v, double p);

}  // namespace soak
