// fuzz_net_plugin — what the net-plugin loader (transport/net/net_plugin.h)
// takes from a plugin: its table (name, which functions are present), what
// init() and devices() answer, what it says through the logger it is
// given, and the properties of the device Plait picks (as
// NetTransport::connect uses them). The input describes up to three such
// networks and an NCCL_NET choice; they are offered to chooseNetAmong in
// order. A plugin may be built for another NCCL or simply be wrong: the
// loader must refuse what it cannot use with a message, never call a null
// function or read a name it cannot bound.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/net/net_plugin.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace plait;

using Input = FuzzInput;

// One fuzzed network; the table's functions find theirs through `current`.
struct FakeNet {
  std::string name;
  bool nullName = false;
  int initRc = 0, devicesRc = 0, ndev = 0, propsRc = 0;
  int logLevel = 0, logLine = 0;
  bool logNullFile = false;
  std::string logText, logFile;
  PlaitNetProperties props{};
  std::string propsName;
  PlaitNetV8 table{};
};
std::vector<FakeNet> nets;

// Each network gets its own copies of these functions through a template on
// its index, so the table a call came through is known.
template <int I>
struct Fns {
  static int init(PlaitNetLogger logger) {
    FakeNet& n = nets[I];
    if (!n.logText.empty()) logger(n.logLevel, 0, n.logNullFile ? nullptr : n.logFile.c_str(), n.logLine, "%s",
                                   n.logText.c_str());
    return n.initRc;
  }
  static int devices(int* ndev) {
    *ndev = nets[I].ndev;
    return nets[I].devicesRc;
  }
  static int getProperties(int dev, PlaitNetProperties* props) {
    PLAIT_FUZZ_CHECK(dev >= 0 && dev < nets[I].ndev);
    *props = nets[I].props;
    return nets[I].propsRc;
  }
};
// The data path: choosing a network must never call these.
int listenFn(int, void*, void**) { std::abort(); }
int connectFn(int, void*, void**, PlaitNetDeviceHandle**) { std::abort(); }
int acceptFn(void*, void**, PlaitNetDeviceHandle**) { std::abort(); }
int regMrFn(void*, void*, size_t, int, void**) { std::abort(); }
int deregMrFn(void*, void*) { std::abort(); }
int isendFn(void*, void*, int, int, void*, void**) { std::abort(); }
int irecvFn(void*, int, void**, int*, int*, void**, void**) { std::abort(); }
int testFn(void*, int*, int*) { std::abort(); }
int closeFn(void*) { std::abort(); }

template <int I>
void fill(FakeNet& n, uint16_t nullMask) {
  PlaitNetV8& t = n.table;
  t.name = n.nullName ? nullptr : n.name.c_str();
  // Bit k set: function k is missing (only the ones a plugin can get wrong).
  auto keep = [&](int k) { return (nullMask >> k & 1) == 0; };
  t.init = keep(0) ? Fns<I>::init : nullptr;
  t.devices = keep(1) ? Fns<I>::devices : nullptr;
  t.getProperties = keep(2) ? Fns<I>::getProperties : nullptr;
  t.listen = keep(3) ? listenFn : nullptr;
  t.connect = keep(4) ? connectFn : nullptr;
  t.accept = keep(5) ? acceptFn : nullptr;
  t.regMr = keep(6) ? regMrFn : nullptr;
  t.deregMr = keep(7) ? deregMrFn : nullptr;
  t.isend = keep(8) ? isendFn : nullptr;
  t.irecv = keep(9) ? irecvFn : nullptr;
  t.test = keep(10) ? testFn : nullptr;
  t.closeSend = keep(11) ? closeFn : nullptr;
  t.closeRecv = keep(12) ? closeFn : nullptr;
  t.closeListen = keep(13) ? closeFn : nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Log everything (the plugin's own lines included) into nowhere: the
  // logger's formatting runs, the output does not slow the fuzzer.
  ::setenv("PLAIT_DEBUG", "TRACE", 1);
  ::setenv("PLAIT_DEBUG_SUBSYS", "ALL", 1);
  ::setenv("PLAIT_DEBUG_FILE", "/dev/null", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const int count = 1 + in.byte() % 3;
  const std::string wanted = in.text();
  nets.assign(static_cast<size_t>(count), FakeNet{});
  for (int i = 0; i < count; ++i) {
    FakeNet& n = nets[static_cast<size_t>(i)];
    const uint8_t flags = in.byte();
    n.nullName = (flags & 1) != 0;
    n.name = in.text();
    n.initRc = flags & 2 ? in.int32() : 0;
    n.devicesRc = flags & 4 ? in.int32() : 0;
    n.ndev = in.int32();
    n.propsRc = flags & 8 ? in.int32() : 0;
    if (flags & 16) {
      n.logLevel = in.int32();
      n.logLine = in.int32();
      n.logNullFile = (flags & 32) != 0;
      n.logFile = in.text();
      n.logText = in.text();
      if (n.logText.empty()) n.logText = "x";
    }
    n.propsName = in.text();
    n.props.name = flags & 64 ? nullptr : n.propsName.data();
    n.props.ptrSupport = in.int32();
    n.props.speed = in.int32();
    n.props.maxRecvs = in.int32();
    n.props.netDeviceType = in.int32();
    const uint16_t nullMask = static_cast<uint16_t>(in.byte() | (flags & 128 ? in.byte() << 8 : 0));
    if (i == 0) fill<0>(n, nullMask);
    if (i == 1) fill<1>(n, nullMask);
    if (i == 2) fill<2>(n, nullMask);
  }
  std::vector<NetCandidate> candidates;
  for (int i = 0; i < count; ++i)
    candidates.push_back({&nets[static_cast<size_t>(i)].table, "fuzz-plugin-" + std::to_string(i)});

  auto choice = chooseNetAmong(candidates, wanted);
  (void)takeNetError();
  if (!choice.isOk()) {
    PLAIT_FUZZ_CHECK(!choice.status().message().empty());
    return 0;
  }
  // What NetTransport::connect does next with the chosen network.
  const PlaitNetV8& api = *choice->api;
  PLAIT_FUZZ_CHECK(checkNetTable(api, choice->from).isOk() && choice->nDevices >= 1);
  const int dev = 7 % choice->nDevices;  // localRank % nDevices
  PlaitNetProperties props{};
  if (api.getProperties(dev, &props) != 0) return 0;
  Status st = checkNetProperties(props, dev, api.name);
  if (!st.isOk()) {
    PLAIT_FUZZ_CHECK(!st.message().empty());
    return 0;
  }
  const std::string description = std::string("NET/") + api.name + "/" + (props.name ? props.name : "?");
  PLAIT_FUZZ_CHECK(description.size() > 4);
  return 0;
}
