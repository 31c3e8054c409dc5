// tools/perf/launch_env.cc — process rank, size and the shared unique id,
// through the library's public launch helpers (plait/launch.hpp), so the
// tools understand exactly the launchers the library does.
#include "launch_env.h"

#include "plait/launch.hpp"

namespace plait::perf {

bool detectProcessLayout(ProcessLayout* layout, std::string* error) {
  auto info = plait::detectLaunch();
  if (!info.isOk()) {
    *error = info.status().message();
    return false;
  }
  layout->procRank = info->rank;
  layout->nProcs = info->nranks;
  layout->launcher = info->launcher == "none" ? "standalone" : info->launcher;
  return true;
}

ncclResult_t sharedUniqueId(ProcessLayout* layout, int timeoutSec, ncclUniqueId* id, std::string* error) {
  if (layout->nProcs == 1) return ncclGetUniqueId(id);
  plait::LaunchInfo info;
  info.rank = layout->procRank;
  info.nranks = layout->nProcs;
  info.launcher = layout->launcher;
  auto shared = plait::launchUniqueId(info, plait::Deadline::afterMs(1000LL * (timeoutSec > 0 ? timeoutSec : 60)));
  if (!shared.isOk()) {
    *error = shared.status().message();
    return static_cast<ncclResult_t>(shared.status().code());
  }
  *id = *shared;
  return ncclSuccess;
}

// launchUniqueId removes its mpirun rendezvous file itself.
void removeRendezvousFile(const ProcessLayout&) {}

}  // namespace plait::perf
