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

#include <cstddef>
#include <string>
#include <vector>

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

// ---- What the loader checks of a network (a plugin is code from elsewhere,
// often built against another NCCL; its table and answers are input) -------

// The longest network name accepted (NCCL_NET matches it; it is printed).
inline constexpr size_t kMaxNetNameBytes = 64;
// A table Plait can use: a name of 1..kMaxNetNameBytes printable characters
// and every function Plait calls on every path (regMrDmaBuf, iflush,
// getDeviceMr and irecvConsumed may be null: GPUDirect RDMA then counts as
// unsupported). InvalidArgument naming `from` and the first thing missing.
Status checkNetTable(const PlaitNetV8& api, const std::string& from);
// What device `dev` of network `netName` reported: host memory among its
// pointer kinds (Plait's FIFOs are host memory), at least one receive per
// irecv, and a host device type (Plait never runs a plugin's device-side
// unpacking). InvalidArgument naming the network, device and field.
Status checkNetProperties(const PlaitNetProperties& props, int dev, const std::string& netName);

// A network that may be chosen, and where its table came from.
struct NetCandidate {
  const PlaitNetV8* api = nullptr;
  std::string from;  // "built-in" or the module's path
};
// chooseNet's rule over an explicit list in priority order: the first
// candidate whose table passes checkNetTable (others are skipped with a
// WARN), whose init() succeeds and that reports at least one device; with
// `wanted` (NCCL_NET) non-empty only a candidate of that name
// (case-insensitive). Calls init() and devices() of the candidates it tries.
// InvalidArgument when `wanted` finds nothing usable, SystemError otherwise.
Result<NetChoice> chooseNetAmong(const std::vector<NetCandidate>& candidates, const std::string& wanted);

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
