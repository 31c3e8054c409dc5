#include "transport/net/net_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/config.h"
#include "base/log.h"

namespace plait {
namespace {

PLAIT_PARAM_STRING(kNetPlugin, "NET_PLUGIN", "", "external net plugin: libnccl-net-<name>.so, a path, or none");
PLAIT_PARAM_STRING(kNetName, "NET", "", "network to use by name: Socket, IB, UCX or a plugin's name (default: best)");

thread_local std::string tLastError;

std::string directoryOf(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// A Plait module (libplait-net-ib.so): beside this library, then
// PLAIT_NET_MODULE_DIR, then the loader's path. Null (quietly) if absent.
const PlaitNetV8* findModule(const std::string& file, std::string* from) {
  std::vector<std::string> tries;
  if (std::string dir = directoryOf(reinterpret_cast<const void*>(&chooseNet)); !dir.empty())
    tries.push_back(dir + "/" + file);
  if (const char* dir = std::getenv("PLAIT_NET_MODULE_DIR")) tries.push_back(std::string(dir) + "/" + file);
  tries.push_back(file);
  for (const std::string& t : tries) {
    auto api = loadNetModule(t, from);
    if (api.isOk()) return api.value();
    PLAIT_TRACE(kNet, "%s", api.status().message().c_str());
  }
  return nullptr;
}

std::vector<NetCandidate> candidates(const std::string& wanted) {
  std::vector<NetCandidate> list;
  std::string from;
  const std::string& plugin = kNetPlugin.get();
  if (plugin != "none") {
    const PlaitNetV8* api = nullptr;
    if (plugin.empty()) {
      api = findModule("libnccl-net.so", &from);
    } else {
      auto named = loadNetModule("libnccl-net-" + plugin + ".so", &from);
      if (!named.isOk()) named = loadNetModule(plugin, &from);
      if (named.isOk()) api = named.value();
      else PLAIT_WARN(kNet, "NCCL_NET_PLUGIN=%s: %s", plugin.c_str(), named.status().message().c_str());
    }
    if (api) list.push_back({api, from});
  }
  if (const PlaitNetV8* ib = findModule("libplait-net-ib.so", &from)) list.push_back({ib, from});
  list.push_back({socketNet(), "built-in"});
  if (strcasecmp(wanted.c_str(), "UCX") == 0)
    if (const PlaitNetV8* ucx = findModule("libplait-net-ucx.so", &from)) list.push_back({ucx, from});
  return list;
}

}  // namespace

Status checkNetTable(const PlaitNetV8& api, const std::string& from) {
  auto bad = [&](const std::string& what) {
    return invalidArgument("network table from " + from + " " + what + "; it cannot be used");
  };
  if (api.name == nullptr) return bad("has no name");
  const size_t length = strnlen(api.name, kMaxNetNameBytes + 1);
  if (length == 0 || length > kMaxNetNameBytes)
    return bad("has a name of " + std::string(length == 0 ? "no" : "more than " + std::to_string(kMaxNetNameBytes)) +
               " characters");
  for (size_t i = 0; i < length; ++i)
    if (!std::isprint(static_cast<unsigned char>(api.name[i])))
      return bad("has a name with an unprintable character (byte " + std::to_string(i) + ")");
  const struct {
    const char* name;
    bool present;
  } required[] = {{"init", api.init != nullptr},
                  {"devices", api.devices != nullptr},
                  {"getProperties", api.getProperties != nullptr},
                  {"listen", api.listen != nullptr},
                  {"connect", api.connect != nullptr},
                  {"accept", api.accept != nullptr},
                  {"regMr", api.regMr != nullptr},
                  {"deregMr", api.deregMr != nullptr},
                  {"isend", api.isend != nullptr},
                  {"irecv", api.irecv != nullptr},
                  {"test", api.test != nullptr},
                  {"closeSend", api.closeSend != nullptr},
                  {"closeRecv", api.closeRecv != nullptr},
                  {"closeListen", api.closeListen != nullptr}};
  for (const auto& f : required)
    if (!f.present) return bad("(" + std::string(api.name) + ") has no " + f.name + " function");
  return Status::ok();
}

Status checkNetProperties(const PlaitNetProperties& props, int dev, const std::string& netName) {
  const std::string who = "network " + netName + " device " + std::to_string(dev);
  if ((props.ptrSupport & kNetPtrHost) == 0)
    return invalidArgument(who + " reports no support for host memory (ptrSupport " +
                           std::to_string(props.ptrSupport) + "); Plait's buffers are host memory");
  if (props.maxRecvs < 1)
    return invalidArgument(who + " reports maxRecvs " + std::to_string(props.maxRecvs) + "; at least 1 is needed");
  if (props.netDeviceType != kNetDeviceHost)
    return invalidArgument(who + " reports device type " + std::to_string(props.netDeviceType) +
                           "; Plait drives only host-side networks (type 0)");
  return Status::ok();
}

Result<NetChoice> chooseNetAmong(const std::vector<NetCandidate>& candidates, const std::string& wanted) {
  std::string seen;
  for (const NetCandidate& c : candidates) {
    if (Status bad = checkNetTable(*c.api, c.from); !bad.isOk()) {
      PLAIT_WARN(kNet, "%s", bad.message().c_str());
      seen += std::string(seen.empty() ? "" : ", ") + c.from + " (unusable table)";
      continue;
    }
    if (!wanted.empty() && strcasecmp(wanted.c_str(), c.api->name) != 0) continue;
    int ndev = 0;
    if (c.api->init(netLogger) != 0 || c.api->devices(&ndev) != 0 || ndev <= 0) {
      PLAIT_INFO(kNet, "network %s (%s): no usable device%s%s", c.api->name, c.from.c_str(),
                 tLastError.empty() ? "" : ": ", tLastError.c_str());
      seen += std::string(seen.empty() ? "" : ", ") + c.api->name + " (no device)";
      continue;
    }
    PLAIT_INFO(kNet, "network %s (%s), %d device(s)", c.api->name, c.from.c_str(), ndev);
    return NetChoice{c.api, c.from, ndev};
  }
  if (!wanted.empty())
    return invalidArgument("NCCL_NET=" + wanted + ": no such network with a usable device" +
                           (seen.empty() ? std::string() : " (found: " + seen + ")"));
  return systemError("no network transport has a usable device (" + seen + ")");
}

Result<const PlaitNetV8*> loadNetModule(const std::string& nameOrPath, std::string* loadedFrom) {
  void* lib = dlopen(nameOrPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status(Code::kSystemError, "cannot load " + nameOrPath + ": " + (why ? why : "?"));
  }
  auto* api = static_cast<const PlaitNetV8*>(dlsym(lib, PLAIT_NET_PLUGIN_SYMBOL));
  if (api == nullptr) {
    dlclose(lib);
    return Status(Code::kSystemError, nameOrPath + " has no " PLAIT_NET_PLUGIN_SYMBOL " (only net API v8 is loaded)");
  }
  // Kept loaded for the life of the process: comms may outlive any one user.
  if (loadedFrom) *loadedFrom = nameOrPath;
  return api;
}

Result<NetChoice> chooseNet() {
  static std::mutex mu;
  static bool done = false;
  static Result<NetChoice> answer = internalError("unset");
  std::lock_guard<std::mutex> lock(mu);
  if (!done) {
    answer = chooseNetAmong(candidates(kNetName.get()), kNetName.get());
    done = true;
  }
  if (!answer.isOk()) return answer.status();
  return answer.value();
}

void netLogger(int level, unsigned long /*flags*/, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  const auto lvl = static_cast<log::Level>(level);
  if (lvl == log::Level::kWarn) {
    tLastError = buf;
    if (log::enabled(log::Level::kInfo, log::kNet)) log::write(log::Level::kInfo, log::kNet, file, line, "%s", buf);
  } else if (log::enabled(lvl, log::kNet)) {
    log::write(lvl, log::kNet, file, line, "%s", buf);
  }
}

std::string takeNetError() { return std::exchange(tLastError, std::string()); }

}  // namespace plait
