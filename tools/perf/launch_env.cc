// tools/perf/launch_env.cc — process rank, size and the shared unique id.
#include "launch_env.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace plait::perf {
namespace {

bool readIntVar(const char* name, int* out, std::string* error) {
  const char* text = std::getenv(name);
  if (text == nullptr) {
    *error = std::string(name) + " is not set";
    return false;
  }
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 0) {
    *error = std::string(name) + "='" + text + "' is not a non-negative integer";
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

std::string mpiJobKey() {
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}) {
    if (const char* v = std::getenv(name)) {
      std::string key;
      for (const char* p = v; *p; ++p) key += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
      return key;
    }
  }
  return "";
}

ncclResult_t exchangeThroughFile(ProcessLayout* layout, int timeoutSec, ncclUniqueId* id, std::string* error) {
  std::string key = mpiJobKey();
  if (key.empty()) {
    *error = "mpirun launch without NCCL_COMM_ID and without a job id (PMIX_NAMESPACE)";
    return ncclInvalidUsage;
  }
  std::string path = "/tmp/plait-perf-" + key + "-" + std::to_string(getuid()) + ".id";
  if (layout->procRank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) return r;
    std::string tmp = path + ".tmp" + std::to_string(getpid());
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(id), sizeof *id);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      *error = "cannot publish the unique id in " + path + ": " + std::strerror(errno);
      return ncclSystemError;
    }
    layout->idFile = path;
    return ncclSuccess;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec > 0 ? timeoutSec : 60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(id), sizeof *id)) return ncclSuccess;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  *error = "timed out waiting for process 0 to publish the unique id in " + path;
  return ncclSystemError;
}

}  // namespace

bool detectProcessLayout(ProcessLayout* layout, std::string* error) {
  struct Launcher {
    const char* name;
    const char* rankVar;
    const char* sizeVar;
  };
  const Launcher launchers[] = {{"plait-run", "PLAIT_RANK", "PLAIT_NRANKS"},
                                {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                {"slurm", "SLURM_PROCID", "SLURM_NTASKS"}};
  for (const Launcher& l : launchers) {
    if (std::getenv(l.rankVar) == nullptr) continue;
    layout->launcher = l.name;
    if (!readIntVar(l.rankVar, &layout->procRank, error) || !readIntVar(l.sizeVar, &layout->nProcs, error)) {
      return false;
    }
    if (layout->nProcs < 1 || layout->procRank >= layout->nProcs) {
      *error = std::string(l.rankVar) + " must be below " + l.sizeVar;
      return false;
    }
    return true;
  }
  return true;
}

ncclResult_t sharedUniqueId(ProcessLayout* layout, int timeoutSec, ncclUniqueId* id, std::string* error) {
  bool haveCommId = std::getenv("NCCL_COMM_ID") != nullptr || std::getenv("PLAIT_COMM_ID") != nullptr;
  if (layout->nProcs == 1 || haveCommId) return ncclGetUniqueId(id);
  if (layout->launcher == "mpirun") return exchangeThroughFile(layout, timeoutSec, id, error);
  *error = layout->launcher + " launch of " + std::to_string(layout->nProcs) +
           " processes needs NCCL_COMM_ID=<host>:<port> for the rendezvous";
  return ncclInvalidUsage;
}

void removeRendezvousFile(const ProcessLayout& layout) {
  if (!layout.idFile.empty()) std::remove(layout.idFile.c_str());
}

}  // namespace plait::perf
