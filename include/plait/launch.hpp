// plait/launch.hpp — who am I, and where do we meet: rank, size and
// rendezvous from the launcher that started this process.
//
// Plait meets launchers where they are (DESIGN.md §5). A program started by
// plait-run, Open MPI's mpirun, torchrun or Slurm's srun can call
//
//   PLAIT_ASSIGN_OR_RETURN(plait::LaunchInfo info, plait::detectLaunch());
//   PLAIT_ASSIGN_OR_RETURN(ncclUniqueId id,
//                          plait::launchUniqueId(info, plait::Deadline::afterMs(60000)));
//   ncclCommInitRank(&comm, info.nranks, id, info.rank);
//
// and needs no out-of-band channel of its own to agree on the unique id.
//
// Both functions only read the process environment (and, for mpirun without
// NCCL_COMM_ID, a file in /tmp). Neither is thread-safe with a concurrent
// setenv()/putenv() in another thread; launchUniqueId may itself setenv
// NCCL_COMM_ID (see below), so call it before starting threads that read the
// environment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nccl.h"
#include "plait/status.hpp"
#include "plait/clock.hpp"

namespace plait {

// This process's place in the launch.
struct LaunchInfo {
  int rank = 0;         // 0 <= rank < nranks
  int nranks = 1;       // ranks in the whole job
  int localRank = 0;    // 0 <= localRank < localNranks: index among ranks on this host
  int localNranks = 1;  // ranks on this host
  // Which launcher's variables were used: "plait-run", "mpirun", "torchrun",
  // "slurm", or "none" (no launcher: rank 0 of 1).
  std::string launcher = "none";
};

// Reads rank and size from the first launcher whose variables are present:
//   plait-run: PLAIT_RANK, PLAIT_NRANKS, PLAIT_LOCAL_RANK, PLAIT_LOCAL_NRANKS
//   mpirun:    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   torchrun:  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   slurm:     SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
//              SLURM_LOCALID, and the local size from SLURM_STEP_TASKS_PER_NODE
//              (else SLURM_TASKS_PER_NODE, e.g. "4(x2),3") at index SLURM_NODEID,
//              else SLURM_NTASKS_PER_NODE
//   none:      rank 0 of 1.
// A launcher is chosen by its rank variable alone; once chosen, its size
// variable is required. Local rank and size default to rank and size when
// missing (every supported launcher sets them).
// Returns InvalidArgument naming the variable that is missing or malformed,
// or when the values are inconsistent (rank >= size). Does not block.
Result<LaunchInfo> detectLaunch();

// Returns the ncclUniqueId that every rank of this launch computes alike:
//   NCCL_COMM_ID / PLAIT_COMM_ID set (plait-run always sets it): ncclGetUniqueId,
//     which encodes that address; rank 0's ncclCommInitRank hosts the root there.
//   torchrun: MASTER_ADDR:(MASTER_PORT+1) becomes NCCL_COMM_ID (torchrun's own
//     store owns MASTER_PORT).
//   slurm: the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), and
//     a port in [20000, 30000) derived from SLURM_JOB_ID and SLURM_STEP_ID,
//     become NCCL_COMM_ID.
//   mpirun without NCCL_COMM_ID: rank 0 calls ncclGetUniqueId and publishes the
//     id in /tmp/plait-<jobid>-<uid>.id (written atomically, mode 0600); the
//     others poll for it until `deadline`; rank 0 removes the file when its
//     process exits normally. The job id is OMPI_MCA_ess_base_jobid
//     or PMIX_NAMESPACE. This works on a single host only: multi-host mpirun
//     jobs must export NCCL_COMM_ID=<host of rank 0>:<port> (mpirun -x).
//   none: ncclGetUniqueId (a single rank needs no rendezvous).
// For torchrun and Slurm the derived address is exported as NCCL_COMM_ID in
// this process's environment (unless already set), because that is how rank
// 0's ncclCommInitRank learns to host the root at the agreed address.
// Blocks only in the mpirun file rendezvous, at most until `deadline`.
// Returns InvalidArgument naming a missing or malformed variable, RemoteError
// if the deadline passes before rank 0 publishes the id, SystemError on a file
// error, InvalidUsage if ncclGetUniqueId is not linked into this program, or
// the Status mapped from ncclGetUniqueId's failure.
Result<ncclUniqueId> launchUniqueId(const LaunchInfo& info, Deadline deadline);

// How a launched program usually starts: detectLaunch, launchUniqueId
// (within `deadline`), then ncclCommInitRank for this process's rank. The
// communicator is the caller's to destroy. Errors as those three say them.
struct LaunchedComm {
  LaunchInfo info;
  ncclComm_t comm = nullptr;
};
inline Result<LaunchedComm> initLaunchedComm(Deadline deadline) {
  Result<LaunchInfo> info = detectLaunch();
  if (!info.isOk()) return info.status();
  Result<ncclUniqueId> id = launchUniqueId(*info, deadline);
  if (!id.isOk()) return id.status();
  LaunchedComm out;
  out.info = *info;
  const ncclResult_t r = ncclCommInitRank(&out.comm, info->nranks, *id, info->rank);
  if (r != ncclSuccess)
    return Status(static_cast<Code>(r), "rank " + std::to_string(info->rank) + ": ncclCommInitRank: " +
                                            ncclGetLastError(nullptr));
  return out;
}

}  // namespace plait

// ---- Internals exposed for tests; not a stable API ---------------------------
namespace plait::launch_detail {

// Expands a Slurm hostlist: "node[01-04,07],gpu3" -> node01 node02 node03
// node04 node07 gpu3. Zero padding of the lower bound is kept; several bracket
// groups in one name multiply ("r[1-2]n[1-2]"). InvalidArgument on unbalanced
// brackets, a reversed or malformed range, or more than 1,000,000 names.
Result<std::vector<std::string>> expandHostlist(std::string_view hostlist);

// Tasks on node `nodeIndex` from a Slurm tasks-per-node spec like
// "2(x3),1" (= 2,2,2,1). InvalidArgument if malformed or out of range.
Result<int> tasksOnNode(std::string_view spec, int nodeIndex);

// The comm-id port for a Slurm step: in [20000, 30000), a function of both ids.
int slurmCommPort(uint64_t jobId, uint64_t stepId);

// "host:port", with an IPv6 literal bracketed ("[::1]:port").
std::string formatCommId(std::string_view host, int port);

// /tmp/plait-<jobid>-<uid>.id with characters outside [A-Za-z0-9._-] of the
// job id replaced by '_'.
std::string idFilePath(std::string_view jobId);

// Writes `id` to `path` atomically (a temporary file beside it, then rename),
// mode 0600. Does not block.
Status publishIdFile(const std::string& path, const ncclUniqueId& id);

// Polls `path` (every few ms) until it holds an id written by this user no
// earlier than `notBeforeUnixNs` (older files are stale leftovers of an
// earlier job), then returns it. RemoteError naming the file if `deadline`
// passes first.
Result<ncclUniqueId> awaitIdFile(const std::string& path, int64_t notBeforeUnixNs, Deadline deadline);

}  // namespace plait::launch_detail
