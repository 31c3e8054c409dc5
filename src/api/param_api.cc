// param_api.cc — NCCL 2.32's parameter API (ncclParam*) over Plait's one
// registry of tunables (base/config.h). A key is NCCL's spelling
// ("NCCL_NCHANNELS"), Plait's ("PLAIT_NCHANNELS") or the bare name; a handle
// is the registry's entry itself (owned by it, never freed). Values are read
// as the library reads them (PLAIT_X, then NCCL_X, then the default).
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/api_util.h"
#include "base/config.h"
#include "base/log.h"

using plait::Status;
using plait::config::IntParam;
using plait::config::ParamBase;
using plait::config::ParamType;
using plait::config::StringParam;
using namespace plait::api;

namespace {

const ParamBase* find(const char* key) {
  if (key == nullptr) return nullptr;
  std::string name = key;
  for (const char* prefix : {"NCCL_", "PLAIT_"})
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::strlen(prefix));
  for (const ParamBase* p : plait::config::allParams())
    if (name == p->name()) return p;
  return nullptr;
}

const ParamBase* fromHandle(ncclParamHandle_t h) { return reinterpret_cast<const ParamBase*>(h); }

// A live handle: one of the registry's entries.
Status checkHandle(ncclParamHandle_t h) {
  if (h == nullptr) return plait::invalidArgument("handle is NULL");
  for (const ParamBase* p : plait::config::allParams())
    if (p == fromHandle(h)) return Status::ok();
  return plait::invalidArgument("handle was not made by ncclParamBind");
}

std::string ncclName(const ParamBase* p) { return std::string("NCCL_") + p->name(); }

// The value of an integer parameter as T, or why it does not fit.
template <class T>
ncclResult_t getInt(ncclParamHandle_t h, T* out, const char* call, const char* typeName) {
  if (out == nullptr) return fail(plait::invalidArgument("out is NULL"), call);
  if (Status s = checkHandle(h); !s.isOk()) return fail(s, call);
  const ParamBase* p = fromHandle(h);
  if (p->type() != ParamType::kInt)
    return fail(plait::invalidUsage(ncclName(p) + " is a string parameter (read it with ncclParamGetStr)"), call);
  const int64_t v = static_cast<const IntParam*>(p)->get();
  const bool fits = std::numeric_limits<T>::is_signed
                        ? v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              v <= static_cast<int64_t>(std::numeric_limits<T>::max())
                        : v >= 0 && static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
  if (!fits)
    return fail(plait::invalidArgument(ncclName(p) + " is " + std::to_string(v) + ", which does not fit " + typeName),
                call);
  *out = static_cast<T>(v);
  return ncclSuccess;
}

}  // namespace

PLAIT_API(ncclResult_t, ParamBind, (ncclParamHandle_t * out, const char* key)) {
  const char* call = "ncclParamBind";
  if (out == nullptr) return fail(plait::invalidArgument("out is NULL"), call);
  *out = nullptr;
  const ParamBase* p = find(key);
  if (p == nullptr)
    return fail(plait::invalidArgument(std::string("no parameter \"") + (key ? key : "(null)") +
                                       "\" (ncclParamGetAllParameterKeys lists them)"),
                call);
  *out = reinterpret_cast<ncclParamHandle_t>(const_cast<ParamBase*>(p));
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, ParamGetI8, (ncclParamHandle_t h, int8_t* out)) {
  return getInt(h, out, "ncclParamGetI8", "int8_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetI16, (ncclParamHandle_t h, int16_t* out)) {
  return getInt(h, out, "ncclParamGetI16", "int16_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetI32, (ncclParamHandle_t h, int32_t* out)) {
  return getInt(h, out, "ncclParamGetI32", "int32_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetI64, (ncclParamHandle_t h, int64_t* out)) {
  return getInt(h, out, "ncclParamGetI64", "int64_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetU8, (ncclParamHandle_t h, uint8_t* out)) {
  return getInt(h, out, "ncclParamGetU8", "uint8_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetU16, (ncclParamHandle_t h, uint16_t* out)) {
  return getInt(h, out, "ncclParamGetU16", "uint16_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetU32, (ncclParamHandle_t h, uint32_t* out)) {
  return getInt(h, out, "ncclParamGetU32", "uint32_t");
} PLAIT_API_END
PLAIT_API(ncclResult_t, ParamGetU64, (ncclParamHandle_t h, uint64_t* out)) {
  return getInt(h, out, "ncclParamGetU64", "uint64_t");
} PLAIT_API_END

// Valid until this thread's next ncclParamGetStr (as NCCL specifies).
PLAIT_API(ncclResult_t, ParamGetStr, (ncclParamHandle_t h, const char** out)) {
  const char* call = "ncclParamGetStr";
  thread_local std::string text;
  if (out == nullptr) return fail(plait::invalidArgument("out is NULL"), call);
  if (Status s = checkHandle(h); !s.isOk()) return fail(s, call);
  text = fromHandle(h)->valueText();
  *out = text.c_str();
  return ncclSuccess;
} PLAIT_API_END

// The value's bytes: an integer as 8 bytes (int64_t), a string with its NUL.
// *len gets the bytes the value needs even when maxLen is too small (an error).
PLAIT_API(ncclResult_t, ParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len)) {
  const char* call = "ncclParamGet";
  if (len == nullptr) return fail(plait::invalidArgument("len is NULL"), call);
  if (Status s = checkHandle(h); !s.isOk()) return fail(s, call);
  const ParamBase* p = fromHandle(h);
  std::string bytes;
  if (p->type() == ParamType::kInt) {
    const int64_t v = static_cast<const IntParam*>(p)->get();
    bytes.assign(reinterpret_cast<const char*>(&v), sizeof v);
  } else {
    bytes = p->valueText();
    bytes.push_back('\0');
  }
  *len = static_cast<int>(bytes.size());
  if (out == nullptr || maxLen < *len)
    return fail(plait::invalidArgument(ncclName(p) + " needs " + std::to_string(*len) + " bytes; maxLen is " +
                                       std::to_string(maxLen)),
                call);
  std::memcpy(out, bytes.data(), bytes.size());
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, ParamGetParameter, (const char* key, const char** value, int* valueLen)) {
  const char* call = "ncclParamGetParameter";
  thread_local std::string text;
  if (value == nullptr || valueLen == nullptr) return fail(plait::invalidArgument("value or valueLen is NULL"), call);
  const ParamBase* p = find(key);
  if (p == nullptr)
    return fail(plait::invalidArgument(std::string("no parameter \"") + (key ? key : "(null)") + "\""), call);
  text = p->valueText();
  *value = text.c_str();
  *valueLen = static_cast<int>(text.size());
  return ncclSuccess;
} PLAIT_API_END

// Every tunable under its NCCL spelling (each is also read as PLAIT_X).
PLAIT_API(ncclResult_t, ParamGetAllParameterKeys, (const char*** table, int* tableLen)) {
  const char* call = "ncclParamGetAllParameterKeys";
  thread_local std::vector<std::string> names;
  thread_local std::vector<const char*> pointers;
  if (table == nullptr || tableLen == nullptr) return fail(plait::invalidArgument("table or tableLen is NULL"), call);
  names.clear();
  pointers.clear();
  for (const ParamBase* p : plait::config::allParams()) names.push_back(ncclName(p));
  for (const std::string& n : names) pointers.push_back(n.c_str());
  *table = pointers.data();
  *tableLen = static_cast<int>(pointers.size());
  return ncclSuccess;
} PLAIT_API_END

// One INFO line (subsystem ENV) per tunable: value, where it came from.
extern "C" void ncclParamDumpAll(void) __attribute__((weak, alias("pncclParamDumpAll")));
extern "C" __attribute__((visibility("default"))) void pncclParamDumpAll(void) {
  try {
    for (const ParamBase* p : plait::config::allParams())
      PLAIT_INFO(kEnv, "%s=%s (%s)", ncclName(p).c_str(), p->valueText().c_str(), p->source().c_str());
  } catch (...) {
  }
}
