// fuzz_env — every parser of environment text Plait reads (any user, any
// launcher, any typo can put anything there). The first input byte picks the
// parser, the rest is the text. Parsers called directly where they are
// functions; the rest through the environment itself: the variable is set,
// the tunables' cache reset (base/config.h), and the consumer asked.
// Every text must give a value or a stated refusal, never a crash, UB, a
// hang or an allocation sized by the text; what is accepted must describe
// itself consistently (an address prints as text that parses to itself).
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.h"
#include "base/cpu_mask.h"
#include "base/log.h"
#include "base/socket.h"
#include "core/alg_selection.h"
#include "core/bootstrap.h"
#include "core/host_costs.h"
#include "core/tuner.h"
#include "plait/launch.hpp"
#include "tests/fuzz/fuzz_check.h"
#include "topology/paths.h"
#include "topology/search.h"
#include "topology/system.h"
#ifdef PLAIT_FUZZ_IB
#include "transport/net/ib_logic.h"
#endif

namespace {

using namespace plait;

// A refusal must say what was wrong.
template <typename T>
void checkRefusal(const Result<T>& r) {
  if (!r.isOk()) PLAIT_FUZZ_CHECK(!r.status().message().empty());
}

// NCCL_SOCKET_IFNAME is matched against this host's list; the fuzzer uses a
// fixed one so results do not depend on the machine.
std::vector<net::InterfaceAddress> fixedInterfaces() {
  std::vector<net::InterfaceAddress> list;
  const struct {
    const char* name;
    const char* addr;
  } kList[] = {{"lo", "127.0.0.1:0"},     {"eth0", "10.0.0.1:0"},     {"eth1", "10.0.1.1:0"},
               {"ib0", "192.168.0.1:0"},  {"docker0", "172.17.0.1:0"}, {"eth0", "[fd00::1]:0"},
               {"enp1s0f1", "10.2.0.1:0"}, {"lo", "[::1]:0"}};
  for (const auto& e : kList) list.push_back({e.name, net::SocketAddress::parse(e.addr).value()});
  return list;
}

void socketIfname(const std::string& text, uint8_t familyByte) {
  static const std::vector<net::InterfaceAddress> all = fixedInterfaces();
  const int family = familyByte % 3 == 0 ? AF_UNSPEC : familyByte % 3 == 1 ? AF_INET : AF_INET6;
  const auto chosen = net::selectInterfaces(all, text, family);
  PLAIT_FUZZ_CHECK(chosen.size() <= all.size());
  for (const auto& ia : chosen) PLAIT_FUZZ_CHECK(family == AF_UNSPEC || ia.addr.family() == family);
}

// NCCL_COMM_ID: host:port. Accepted addresses print as text that parses back.
void socketAddress(const std::string& text) {
  auto addr = net::SocketAddress::parse(text);
  checkRefusal(addr);
  if (!addr.isOk()) return;
  PLAIT_FUZZ_CHECK(addr->isValid());
  auto again = net::SocketAddress::parse(addr->toString());
  PLAIT_FUZZ_CHECK(again.isOk() && again.value() == addr.value());
}

void algSelection(const std::string& text) {
  for (int c = 0; c <= static_cast<int>(CollType::kRecv); ++c) {
    auto sel = parseAlgSelection(text.c_str(), static_cast<CollType>(c));
    checkRefusal(sel);
    if (sel.isOk()) {
      PLAIT_FUZZ_CHECK(sel->restricted || sel->algos == 0);
      PLAIT_FUZZ_CHECK(!algoNames(sel->algos).empty());
    }
  }
}

void integer(const std::string& text) {
  int64_t v = 0;
  if (config::parseInt(text, &v)) {
    int64_t again = 0;
    PLAIT_FUZZ_CHECK(config::parseInt(std::to_string(v), &again) && again == v);
  }
}

void hostlist(const std::string& text) {
  auto hosts = launch_detail::expandHostlist(text);
  checkRefusal(hosts);
  if (hosts.isOk()) PLAIT_FUZZ_CHECK(hosts->size() <= 1000000);
}

void tasksPerNode(std::string text) {
  int node = 0;
  if (text.size() >= 4) {
    std::memcpy(&node, text.data(), 4);
    text.erase(0, 4);
  }
  auto tasks = launch_detail::tasksOnNode(text, node);
  checkRefusal(tasks);
  if (tasks.isOk()) PLAIT_FUZZ_CHECK(tasks.value() >= 0);
}

// CPU affinities as the peer table carries them, here from raw bytes.
void cpuMasks(const std::string& bytes) {
  std::vector<CpuMask> masks(bytes.size() / sizeof(CpuMask));
  if (!masks.empty()) std::memcpy(masks.data(), bytes.data(), masks.size() * sizeof(CpuMask));
  const LocalCpus cpus = assessLocalCpus(masks);
  PLAIT_FUZZ_CHECK(cpus.cpus >= 0 && cpus.cpus <= 64 * CpuMask::kWords && cpus.minCpusPerRank <= cpus.cpus);
  PLAIT_FUZZ_CHECK(!(cpus.dedicated && cpus.oversubscribed));
  PLAIT_FUZZ_CHECK(!cpus.oversubscribed || static_cast<int>(masks.size()) > cpus.cpus);
}

#ifdef PLAIT_FUZZ_IB
// NCCL_IB_HCA and the other NCCL_IB_* knobs: "NAME=value" lines.
void ibOptions(const std::string& text) {
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (size_t eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  ib::IbOptions o = ib::readOptions([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  PLAIT_FUZZ_CHECK(o.qp.timeout >= 1 && o.qp.timeout <= 31 && o.qp.retryCnt >= 0 && o.qp.retryCnt <= 7);
  PLAIT_FUZZ_CHECK(o.qpsPerConnection >= 1 && o.qp.pkeyIndex >= 0);
  (void)o.hca.matches("mlx5_0", 1);
  (void)o.hca.matches("mlx5_10", 2);
}
#endif

// Tunables read through the environment, each with the code that consumes it.
struct EnvParam {
  const char* name;  // without PLAIT_ / NCCL_
  void (*consume)(const std::string& value);
};

void quietLog() {
  ::setenv("PLAIT_DEBUG", "NONE", 1);
  config::resetAll();
  log::reset();
}

// A tuner built under the setting plans every collective at a few sizes.
void planUnderSetting(const std::string&) {
  TunerInputs ti;
  ti.nranks = ti.nLocalRanks = 3;
  ti.nChannels = 2;
  ti.ringStepBytes = 128 << 10;
  ti.meshStepBytes = ti.lineMaxBytes = 32 << 10;
  ti.fullMesh = true;
  const Tuner tuner(ti);
  for (int c = 0; c <= static_cast<int>(CollType::kReduceScatter); ++c)
    for (size_t bytes : {size_t(8), size_t(16) << 10, size_t(1) << 20}) {
      Task task;
      task.coll = static_cast<CollType>(c);
      const Plan plan = tuner.plan(task, bytes);
      PLAIT_FUZZ_CHECK(!plan.refused && plan.nChannels >= 1 && plan.nChannels <= 2);
    }
}

// A calibration file's text (PLAIT_HOST_COSTS): accepted values are in range
// and print as text that parses to the same values.
void hostCosts(const std::string& text) {
  auto costs = parseHostCosts(text, "fuzz");
  checkRefusal(costs);
  if (!costs.isOk()) return;
  PLAIT_FUZZ_CHECK(costs->hopUs > 0 && costs->ringBytesPerUs > 0 && costs->oneShotBytesPerUs > 0);
  auto again = parseHostCosts(formatHostCosts(*costs), "fuzz");
  PLAIT_FUZZ_CHECK(again.isOk() && again->hopUs == costs->hopUs && again->callUs == costs->callUs &&
                   again->ringBytesPerUs == costs->ringBytesPerUs && again->oneShotUs == costs->oneShotUs &&
                   again->oneShotBytesPerUs == costs->oneShotBytesPerUs);
}

// Appended only: a seed's second byte picks its entry (corpus/env/env-*).
const EnvParam kEnvParams[] = {
    {"TIMEOUT", [](const std::string&) { PLAIT_FUZZ_CHECK(bootstrapTimeoutSec() >= 1); }},
    {"P2P_LEVEL", [](const std::string&) { (void)topo::pathOptionsFromEnv(topo::TopoSystem{}); }},
    {"NET_GDR_LEVEL", [](const std::string&) { (void)topo::pathOptionsFromEnv(topo::TopoSystem{}); }},
    {"P2P_DISABLE", [](const std::string&) { (void)topo::pathOptionsFromEnv(topo::TopoSystem{}); }},
    {"MAX_CHANNELS",
     [](const std::string&) {
       const topo::SearchOptions o = topo::searchOptionsFromEnv();
       PLAIT_FUZZ_CHECK(o.maxChannels >= 1 && o.maxChannels <= 32);
     }},
    {"CROSS_NIC", [](const std::string&) { (void)topo::searchOptionsFromEnv(); }},
    {"HOSTID", [](const std::string&) { (void)hostHash(); }},
    {"COMM_ID",
     [](const std::string& value) {
       if (value.empty()) return;  // unset: ncclGetUniqueId would start a root thread
       auto id = createUniqueId();
       checkRefusal(id);
       if (id.isOk()) PLAIT_FUZZ_CHECK(decodeUniqueId(id.value()).isOk());
     }},
    {"DEBUG_SUBSYS",
     [](const std::string&) {
       log::reset();
       (void)log::enabled(log::Level::kInfo, log::kNet);
       quietLog();
     }},
    {"DEBUG",
     [](const std::string&) {
       log::reset();
       PLAIT_FUZZ_CHECK(static_cast<int>(log::level()) >= 0 && static_cast<int>(log::level()) <= 5);
       quietLog();
     }},
    {"ALGO", planUnderSetting},
    {"PROTO", planUnderSetting},
};

void throughEnvironment(uint8_t which, std::string value) {
  const EnvParam& p = kEnvParams[which % (sizeof(kEnvParams) / sizeof(kEnvParams[0]))];
  value = value.substr(0, value.find('\0'));  // what an environment can hold
  const std::string name = std::string("PLAIT_") + p.name;
  ::setenv(name.c_str(), value.c_str(), 1);
  config::resetAll();
  p.consume(value);
  ::unsetenv(name.c_str());
  config::resetAll();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("PLAIT_DEBUG", "NONE", 1);  // refusals are logged at WARN; the fuzzer checks them itself
  ::setenv("PLAIT_COMM_SECRET", "fuzz", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t parser = data[0], arg = data[1];
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (parser % 13) {
    case 0: integer(text); break;                                            // every PLAIT_PARAM_INT
    case 1: algSelection(text); break;                                       // algSelection, NCCL_ALGO syntax
    case 2: socketIfname(text, arg); break;                                  // NCCL_SOCKET_IFNAME
    case 3: socketAddress(text); break;                                      // NCCL_COMM_ID
    case 4: checkRefusal(net::parseSocketFamily(text)); break;               // NCCL_SOCKET_FAMILY
    case 5: (void)topo::parsePathType(text); break;                          // NCCL_P2P_LEVEL names
    case 6: hostlist(text); break;                                           // SLURM_JOB_NODELIST
    case 7: tasksPerNode(text); break;                                       // SLURM_TASKS_PER_NODE
    case 8: cpuMasks(text); break;                                           // peers' CPU masks
    case 9:
#ifdef PLAIT_FUZZ_IB
      ibOptions(text);  // NCCL_IB_HCA, NCCL_IB_*
#endif
      break;
    case 11: hostCosts(text); break;  // PLAIT_HOST_COSTS files
    default: throughEnvironment(arg, text); break;  // 10, 12: the tunables as the library reads them
  }
  return 0;
}
