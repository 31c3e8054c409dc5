// tools/perf/launch_env.h — which process of the job this is, and the unique
// id every process shares.
//
// A thin adapter over plait::detectLaunch()/launchUniqueId() (plait/launch.hpp),
// which read these variables:
//   plait-run: PLAIT_RANK, PLAIT_NRANKS (NCCL_COMM_ID is set: every process's
//              ncclGetUniqueId returns the same id);
//   mpirun:    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; without NCCL_COMM_ID
//              process 0 publishes its id in a file in /tmp named after the
//              job (PMIX_NAMESPACE / OMPI_MCA_ess_base_jobid), single host only;
//   Slurm:     SLURM_PROCID, SLURM_NTASKS (NCCL_COMM_ID must be set);
//   none:      process 0 of 1.
#pragma once

#include <string>

#include "nccl.h"

namespace plait::perf {

struct ProcessLayout {
  int procRank = 0;
  int nProcs = 1;
  std::string launcher = "standalone";
};

// Reads the launcher's variables. False (with *error set) when a variable is
// malformed or missing. Does not block.
bool detectProcessLayout(ProcessLayout* layout, std::string* error);

// Obtains the id every process of the layout shares. Blocks at most
// timeoutSec seconds waiting for process 0's file (mpirun without
// NCCL_COMM_ID). Returns the NCCL error or ncclSystemError with *error set.
ncclResult_t sharedUniqueId(ProcessLayout* layout, int timeoutSec, ncclUniqueId* id, std::string* error);

// Removes the rendezvous file once every process has used it (after init).
void removeRendezvousFile(const ProcessLayout& layout);

}  // namespace plait::perf
