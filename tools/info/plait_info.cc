// plait-info — what this Plait build is: version, build options, transports
// available on this machine, and every tunable with its value and help.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "base/config.h"
#include "nccl.h"

namespace {

bool loadable(const char* lib) {
  void* h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

const char* onOff(bool v) { return v ? "on" : "off"; }

}  // namespace

int main(int argc, char** argv) {
  int version = 0;
  ncclGetVersion(&version);
  printf("Plait %s, NCCL API %d.%d.%d (version code %d)\n\n", PLAIT_VERSION_STRING, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
         version);
  printf("Build options\n");
  printf("  PLAIT_WITH_CUDA   %s\n", onOff(PLAIT_INFO_WITH_CUDA));
  printf("  PLAIT_WITH_UCX    %s\n", onOff(PLAIT_INFO_WITH_UCX));
  printf("  PLAIT_WITH_IB     %s\n", onOff(PLAIT_INFO_WITH_IB));
  printf("  PLAIT_WITH_HWLOC  %s\n", onOff(PLAIT_INFO_WITH_HWLOC));
  printf("  PLAIT_SANITIZE    %s\n\n", onOff(PLAIT_INFO_SANITIZE));
  printf("Transports on this machine\n");
  printf("  shm       available (host memory between processes of one host)\n");
  printf("  socket    not built yet\n");
  printf("  ucx       %s\n", loadable("libucp.so.0") ? "library found (transport not built yet)" : "library not found");
  printf("  ib        %s\n",
         loadable("libibverbs.so.1") ? "libibverbs found (transport not built yet)" : "libibverbs not found");
  printf("  cuda      %s\n\n", loadable("libcuda.so.1") ? "driver found" : "no CUDA driver (host memory only)");
  printf("Tunables (set PLAIT_<NAME>, or NCCL_<NAME>)\n");
  for (const auto* p : plait::config::allParams()) {
    const std::string value = p->valueText();  // loads it: source() is known only after
    printf("  %-22s = %-12s (%s; default %s)\n", p->name(), value.c_str(), p->source().c_str(),
           p->defaultText().empty() ? "\"\"" : p->defaultText().c_str());
    printf("  %-22s   %s\n", "", p->help());
  }
  return 0;
}
