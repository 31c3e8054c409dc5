// encryption_api.cc — NCCL 2.32's ncclSetEncryption over base/tls/tls.h.
#include <cstddef>
#include <cstdio>
#include <string>

#include "api/api_util.h"
#include "base/tls/tls.h"

using namespace plait::api;

namespace {

// The struct appeared whole in 2.32: a caller must pass at least that much.
constexpr size_t kMinConfigBytes = offsetof(ncclEncryptionConfig_t, psk) + sizeof(const char*);

plait::Status setEncryption(const ncclEncryptionConfig_t* config) {
  if (config == nullptr) return plait::invalidArgument("config is NULL");
  if (config->magic != kConfigMagic) {
    char got[16];
    std::snprintf(got, sizeof got, "0x%x", config->magic);
    return plait::invalidArgument(std::string("config->magic is ") + got +
                                  ", not 0xcafebeef: start from NCCL_ENCRYPTION_CONFIG_INITIALIZER");
  }
  if (config->size < kMinConfigBytes)
    return plait::invalidArgument("config->size is " + std::to_string(config->size) + " bytes, smaller than the " +
                                  std::to_string(kMinConfigBytes) + " of NCCL 2.32's ncclEncryptionConfig_t");
  switch (config->mode) {
    case NCCL_ENCRYPTION_MODE_NONE:
      plait::tls::disable();
      return plait::Status::ok();
    case NCCL_ENCRYPTION_MODE_PSK:
      if (config->psk == nullptr) return plait::invalidArgument("config->psk is NULL in NCCL_ENCRYPTION_MODE_PSK");
      return plait::tls::enablePsk(config->psk);
    default:
      return plait::invalidArgument("config->mode is " + std::to_string(config->mode) +
                                    ", neither NCCL_ENCRYPTION_MODE_NONE (0) nor NCCL_ENCRYPTION_MODE_PSK (1)");
  }
}

}  // namespace

PLAIT_API(ncclResult_t, SetEncryption, (const ncclEncryptionConfig_t* config)) {
  if (plait::Status s = setEncryption(config); !s.isOk()) return fail(s, "ncclSetEncryption");
  return ncclSuccess;
} PLAIT_API_END
