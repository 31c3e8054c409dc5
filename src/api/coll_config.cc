// coll_config.cc — NCCL 2.32's per-call configuration (ncclCollConfig_t),
// read as far as the caller's header made it, checked field by field, and
// applied to the call's Task.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "api/api_util.h"
#include "base/log.h"
#include "core/alg_selection.h"

namespace plait::api {
namespace {

constexpr unsigned kFirstCollConfigVersion = 23200;  // NCCL 2.32.0
constexpr int kMaxExtOptions = 1024;                 // a longer list is taken for a circular one

// The caller's struct over the defaults, no further than its `size`.
Result<ncclCollConfig_t> readConfig(const ncclCollConfig_t* given) {
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  if (given->magic != kConfigMagic) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", given->magic);
    return invalidArgument(std::string("config was not initialised with NCCL_COLLCONFIG_INITIALIZER (magic ") + hex +
                           ")");
  }
  if (given->size < offsetof(ncclCollConfig_t, ext) || given->version < kFirstCollConfigVersion)
    return invalidArgument("config has size " + std::to_string(given->size) + " and version " +
                           std::to_string(given->version) + ": not an ncclCollConfig_t of NCCL 2.32 or later");
  std::memcpy(static_cast<void*>(&c), given, std::min(given->size, sizeof c));
  c.size = sizeof c;
  return c;
}

Status checkCtas(const ncclCollConfig_t& c, Task* task) {
  auto set = [](int v) { return v != NCCL_CONFIG_UNDEF_INT; };
  if (set(c.minCTAs) && c.minCTAs < 1)
    return invalidArgument("config minCTAs " + std::to_string(c.minCTAs) + " is below 1");
  if (set(c.maxCTAs) && c.maxCTAs < 1)
    return invalidArgument("config maxCTAs " + std::to_string(c.maxCTAs) + " is below 1");
  if (set(c.minCTAs) && set(c.maxCTAs) && c.minCTAs > c.maxCTAs)
    return invalidArgument("config minCTAs " + std::to_string(c.minCTAs) + " exceeds maxCTAs " +
                           std::to_string(c.maxCTAs));
  if (set(c.CTAPolicy) && (c.CTAPolicy & ~(NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO)) != 0)
    return invalidArgument("config CTAPolicy " + std::to_string(c.CTAPolicy) + " has unknown bits");
  task->minChannels = set(c.minCTAs) ? c.minCTAs : 0;
  task->maxChannels = set(c.maxCTAs) ? c.maxCTAs : 0;
  return Status::ok();
}

// Vendor options: Plait defines none, so all are ignored (as NCCL ignores
// every one); said once per process at INFO.
Status checkExt(const ncclConfigExt_t* ext) {
  int n = 0;
  for (const ncclConfigExt_t* e = ext; e != nullptr; e = e->next)
    if (++n > kMaxExtOptions)
      return invalidArgument("config ext lists more than " + std::to_string(kMaxExtOptions) +
                             " vendor options (a circular list?)");
  if (n > 0) {
    static std::once_flag said;
    std::call_once(said, [&] {
      PLAIT_INFO(kColl, "ncclCollConfig_t: %d vendor option(s) (first vendorId %d, optionId %d) ignored: Plait "
                        "defines none", n, ext->key.vendorId, ext->key.optionId);
    });
  }
  return Status::ok();
}

}  // namespace

Status applyCollConfig(const ncclCollConfig_t* given, Task* task) {
  if (given == nullptr) return Status::ok();
  PLAIT_ASSIGN_OR_RETURN(ncclCollConfig_t c, readConfig(given));
  PLAIT_RETURN_IF_ERROR(checkCtas(c, task));
  PLAIT_RETURN_IF_ERROR(checkExt(c.ext));
  PLAIT_ASSIGN_OR_RETURN(AlgSelection sel, parseAlgSelection(c.algSelection, task->coll));
  task->forceAlgos = c.forceAlgSelection != 0;  // 1 by default (UNDEF counts as set)
  if (sel.restricted && sel.algos == 0) {
    if (task->forceAlgos)
      return invalidUsage(std::string("config algSelection \"") + c.algSelection + "\" allows " +
                          collName(task->coll) + " no algorithm Plait runs (ring, oneshot, tree, direct, symmetric)");
    PLAIT_INFO(kColl, "algSelection \"%s\" allows %s no algorithm Plait runs; forceAlgSelection=0: the tuner chooses",
               c.algSelection, collName(task->coll));
  } else if (sel.restricted) {
    task->algos = sel.algos;
  }
  task->profilerTag = c.userProfilerTag;
  if (c.launchCompletionEvent != nullptr) {
    if (!task->onDevice)
      return invalidArgument("config launchCompletionEvent is set but the buffers are host memory: Plait launches "
                             "no kernel for them, so there is no launch to record");
    task->launchEvent = static_cast<void*>(c.launchCompletionEvent);
  }
  return Status::ok();
}

}  // namespace plait::api
