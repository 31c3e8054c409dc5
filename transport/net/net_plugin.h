// net_plugin.h — finding, loading and choosing the network (net.h tables).
//
// Candidates, in priority order:
//   1. an external NCCL net plugin: NCCL_NET_PLUGIN=<name> loads
//      libnccl-net-<name>.so (or <name> itself when it is a file name or
//      path); unset, libnccl-net.so is tried quietly; "none" skips it;
//   2. InfiniBand verbs (module libplait-net-ib.so, when it was built and
//      finds an active port);
//   3. the built-in TCP socket transport;
//   and UCX (module libplait-net-ucx.so) only when asked for by name.
// NCCL_NET=<name> (case-insensitive: Socket, IB, UCX, or a plugin's name)
// picks one by name and fails if it is missing or has no device. Modules are
// looked for beside the library this code is in, then in PLAIT_NET_MODULE_DIR,
// then by the dynamic loader's search path. The choice is made once per
// process and logged (NET subsystem).
#pragma once

#include <string>

#include "plait/status.hpp"
#include "transport/net/net.h"

namespace plait {

// The built-in socket transport (socket_net.cc).
const PlaitNetV8* socketNet();

// The chosen network, initialised, with at least one device. Thread-safe;
// the same answer for the life of the process.
struct NetChoice {
  const PlaitNetV8* api = nullptr;
  std::string from;  // "built-in" or the module's path
  int nDevices = 0;
};
Result<NetChoice> chooseNet();

// Loads a module and returns its table (not yet initialised). `nameOrPath`
// is given to dlopen as is. Fails with kSystemError naming dlerror().
Result<const PlaitNetV8*> loadNetModule(const std::string& nameOrPath, std::string* loadedFrom);

// The logger handed to every network's init(): forwards to Plait's log
// (plugin WARN lines at INFO: whether they matter is decided by whoever sees
// the failure) and remembers the calling thread's last WARN line.
void netLogger(int level, unsigned long flags, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// The calling thread's last WARN line from a network, then forgets it.
std::string takeNetError();

}  // namespace plait
