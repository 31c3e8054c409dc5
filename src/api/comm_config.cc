// comm_config.cc — ncclConfig_t as ncclCommInitRankConfig and ncclCommSplit
// read it: no further than the caller's `size` (a program built against an
// older nccl.h passes a shorter structure), every field set to something
// other than NCCL_CONFIG_UNDEF_* checked against the values NCCL accepts,
// a bad one ncclInvalidArgument naming the field and its value.
//
// What Plait acts on: blocking, maxCTAs (at most that many channels),
// commName (logs). The rest describe machinery Plait does not have (CGA
// clusters, CollNet, NVLS, RMA contexts, CUDA-graph mixing modes, shared
// resources between split communicators): checked, then said once at INFO.
#include <climits>
#include <cstddef>
#include <string>

#include "api/api_util.h"
#include "base/log.h"

namespace plait::api {
namespace {

constexpr int kUndef = NCCL_CONFIG_UNDEF_INT;
constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS, nChannelsPerNetPeer's bound

// One int field of ncclConfig_t: where it is, what NCCL accepts.
struct IntField {
  const char* name;
  size_t offset;
  bool (*valid)(int v);
  const char* accepted;  // for the error: "0 or 1"
};

bool zeroOrOne(int v) { return v == 0 || v == 1; }
bool positive(int v) { return v > 0; }
bool nonNegative(int v) { return v >= 0; }

#define PLAIT_CONFIG_FIELD(member, valid, accepted) IntField{#member, offsetof(ncclConfig_t, member), valid, accepted}
const IntField kIntFields[] = {
    PLAIT_CONFIG_FIELD(blocking, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(cgaClusterSize, nonNegative, "≥ 0"),
    PLAIT_CONFIG_FIELD(minCTAs, positive, "≥ 1"),
    PLAIT_CONFIG_FIELD(maxCTAs, positive, "≥ 1"),
    PLAIT_CONFIG_FIELD(splitShare, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(trafficClass, nonNegative, "≥ 0"),
    PLAIT_CONFIG_FIELD(collnetEnable, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(CTAPolicy, [](int v) { return v >= 0 && v <= (NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO); },
                       "a combination of NCCL_CTA_POLICY_* (0..3)"),
    PLAIT_CONFIG_FIELD(shrinkShare, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(nvlsCTAs, positive, "≥ 1"),
    PLAIT_CONFIG_FIELD(nChannelsPerNetPeer, [](int v) { return v > 0 && v <= kMaxChannels; }, "1..64"),
    PLAIT_CONFIG_FIELD(nvlinkCentricSched, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(graphUsageMode, [](int v) { return v >= 0 && v <= 2; }, "0, 1 or 2"),
    PLAIT_CONFIG_FIELD(numRmaCtx, nonNegative, "≥ 0"),
    PLAIT_CONFIG_FIELD(maxP2pPeers, positive, "≥ 1"),
    PLAIT_CONFIG_FIELD(graphStreamOrdering, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(launchOrderImplicit, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(numRmaSig, nonNegative, "≥ 0"),
    PLAIT_CONFIG_FIELD(rmaEagerInit, zeroOrOne, "0 or 1"),
    PLAIT_CONFIG_FIELD(hostCftMode, [](int v) { return v >= ncclHostCftEnable && v <= ncclHostCftFallback; },
                       "ncclHostCftEnable, ncclHostCftDisable or ncclHostCftFallback (1..3)"),
    PLAIT_CONFIG_FIELD(nvlsHostMode, nonNegative, "ncclNvlsHostModeEnable or a combination of its disable flags (≥ 0)"),
};
#undef PLAIT_CONFIG_FIELD

// The fields Plait acts on; any other one set is reported as accepted only.
bool actedOn(const char* name) {
  return std::string(name) == "blocking" || std::string(name) == "maxCTAs";
}

}  // namespace

Status readCommConfig(const ncclConfig_t* config, CommOptions* out) {
  if (config == nullptr) return Status::ok();
  if (config->magic != kConfigMagic)
    return invalidArgument("config->magic is not NCCL_CONFIG_INITIALIZER's (was the config initialised?)");
  // Every release's structure reaches nvlinkCentricSched's predecessors;
  // no nccl.h ever had one ending before maxCTAs.
  if (config->size < offsetof(ncclConfig_t, maxCTAs) + sizeof(int))
    return invalidArgument("config->size " + std::to_string(config->size) + " is too small for an ncclConfig_t");
  const auto* bytes = reinterpret_cast<const char*>(config);
  std::string ignored;
  int minCTAs = kUndef, maxCTAs = kUndef;
  for (const IntField& f : kIntFields) {
    if (f.offset + sizeof(int) > config->size) break;  // the caller's header predates it
    const int v = *reinterpret_cast<const int*>(bytes + f.offset);
    if (v == kUndef) continue;
    if (!f.valid(v))
      return invalidArgument("config->" + std::string(f.name) + " is " + std::to_string(v) + "; must be " + f.accepted);
    if (f.offset == offsetof(ncclConfig_t, minCTAs)) minCTAs = v;
    if (f.offset == offsetof(ncclConfig_t, maxCTAs)) maxCTAs = v;
    if (!actedOn(f.name)) ignored += (ignored.empty() ? "" : ", ") + std::string(f.name) + "=" + std::to_string(v);
  }
  if (minCTAs != kUndef && maxCTAs != kUndef && minCTAs > maxCTAs)
    return invalidArgument("config->minCTAs " + std::to_string(minCTAs) + " exceeds config->maxCTAs " +
                           std::to_string(maxCTAs));
  if (config->blocking != kUndef) out->blocking = config->blocking == 1;
  if (maxCTAs != kUndef) out->maxChannels = maxCTAs;
  // The pointer fields too only where the caller's structure has them: an
  // older header's ends before commName (and a size of 32, before netName).
  auto has = [&](size_t offset) { return offset + sizeof(const char*) <= config->size; };
  if (has(offsetof(ncclConfig_t, commName)) && config->commName != nullptr) out->name = config->commName;
  if (has(offsetof(ncclConfig_t, netName)) && config->netName != nullptr)
    ignored += (ignored.empty() ? "" : ", ") + std::string("netName=") + config->netName;
  if (!ignored.empty()) PLAIT_INFO(kInit, "ncclConfig_t: accepted with no effect in Plait: %s", ignored.c_str());
  return Status::ok();
}

}  // namespace plait::api
