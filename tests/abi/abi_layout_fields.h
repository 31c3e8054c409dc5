// abi_layout_fields.h — the fields of the API's versioned structures, as an
// X-macro list SIZE(type) FIELD(type, member). Included by a translation
// unit against Plait's nccl.h and by one against NVIDIA's (the release Plait
// tracks, fetched by scripts/fetch_nccl_headers.sh), so the test compares
// the two layouts field by field (ncclConfig_t as of 2.32; a caller built
// against an older header passes a shorter one, which Plait reads by its size).
#pragma once

#include <stddef.h>

#define PLAIT_ABI_LAYOUT(SIZE, FIELD)                                                                      \
  SIZE(ncclCollConfig_t) FIELD(ncclCollConfig_t, size) FIELD(ncclCollConfig_t, magic)                      \
  FIELD(ncclCollConfig_t, version) FIELD(ncclCollConfig_t, ext) FIELD(ncclCollConfig_t, minCTAs)           \
  FIELD(ncclCollConfig_t, maxCTAs) FIELD(ncclCollConfig_t, nvlsCTAs) FIELD(ncclCollConfig_t, cgaClusterSize) \
  FIELD(ncclCollConfig_t, algSelection) FIELD(ncclCollConfig_t, forceAlgSelection)                          \
  FIELD(ncclCollConfig_t, CTAPolicy) FIELD(ncclCollConfig_t, userProfilerTag)                               \
  FIELD(ncclCollConfig_t, launchCompletionEvent)                                                           \
  SIZE(ncclConfigExt_t) FIELD(ncclConfigExt_t, next) FIELD(ncclConfigExt_t, key.vendorId)                   \
  FIELD(ncclConfigExt_t, key.optionId) FIELD(ncclConfigExt_t, val.i) FIELD(ncclConfigExt_t, val.s)          \
  FIELD(ncclConfig_t, size) FIELD(ncclConfig_t, magic) FIELD(ncclConfig_t, version)                         \
  FIELD(ncclConfig_t, blocking) FIELD(ncclConfig_t, cgaClusterSize) FIELD(ncclConfig_t, minCTAs)            \
  FIELD(ncclConfig_t, maxCTAs) FIELD(ncclConfig_t, netName) FIELD(ncclConfig_t, splitShare)                 \
  FIELD(ncclConfig_t, trafficClass) FIELD(ncclConfig_t, commName) FIELD(ncclConfig_t, collnetEnable)        \
  FIELD(ncclConfig_t, CTAPolicy) FIELD(ncclConfig_t, shrinkShare) FIELD(ncclConfig_t, nvlsCTAs)             \
  FIELD(ncclConfig_t, nChannelsPerNetPeer) FIELD(ncclConfig_t, nvlinkCentricSched)                          \
  FIELD(ncclConfig_t, graphUsageMode) FIELD(ncclConfig_t, numRmaCtx) FIELD(ncclConfig_t, maxP2pPeers)        \
  FIELD(ncclConfig_t, graphStreamOrdering) FIELD(ncclConfig_t, launchOrderImplicit)                          \
  FIELD(ncclConfig_t, numRmaSig) FIELD(ncclConfig_t, rmaEagerInit) FIELD(ncclConfig_t, hostCftMode)          \
  FIELD(ncclConfig_t, nvlsHostMode) SIZE(ncclConfig_t)                                                       \
  SIZE(ncclSimInfo_t) FIELD(ncclSimInfo_t, estimatedTime) SIZE(ncclUniqueId)                             \
  SIZE(ncclEncryptionConfig_t) FIELD(ncclEncryptionConfig_t, size) FIELD(ncclEncryptionConfig_t, magic)     \
  FIELD(ncclEncryptionConfig_t, version) FIELD(ncclEncryptionConfig_t, mode) FIELD(ncclEncryptionConfig_t, psk)      \
  SIZE(ncclWaitSignalDesc_t) FIELD(ncclWaitSignalDesc_t, opCnt) FIELD(ncclWaitSignalDesc_t, peer)                     \
  FIELD(ncclWaitSignalDesc_t, sigIdx) FIELD(ncclWaitSignalDesc_t, ctx)

// Fills `out` with the sizes and offsets in list order (at most `max`);
// returns how many. `names` (if not null) gets "type" / "type.member".
#define PLAIT_ABI_LAYOUT_FUNCTION(fn)                      \
  int fn(size_t* out, const char** names, int max) {       \
    int n = 0;                                             \
    PLAIT_ABI_LAYOUT(PLAIT_ABI_SIZE, PLAIT_ABI_FIELD)      \
    return n;                                              \
  }
#define PLAIT_ABI_PUT(v, name)    \
  do {                            \
    if (n < max) {                \
      out[n] = (v);               \
      if (names) names[n] = name; \
    }                             \
    ++n;                          \
  } while (0);
#define PLAIT_ABI_SIZE(t) PLAIT_ABI_PUT(sizeof(t), #t)
#define PLAIT_ABI_FIELD(t, m) PLAIT_ABI_PUT(offsetof(t, m), #t "." #m)
