#include "base/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>

#include "base/log.h"

namespace plait::config {
namespace {

std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<ParamBase*>& registry() {
  static std::vector<ParamBase*> params;
  return params;
}

}  // namespace

ParamBase::ParamBase(const char* name, ParamType type, const char* help) : name_(name), type_(type), help_(help) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().push_back(this);
}

// Loads the value first (under its lock, published by the release store of
// loaded_): source_ is written only while loading, so reading it after a
// load races with no other thread's first get().
std::string ParamBase::source() const {
  (void)valueText();
  return source_;
}

const char* ParamBase::lookup() const {
  std::string plaitName = std::string("PLAIT_") + name_;
  if (const char* v = std::getenv(plaitName.c_str()); v && *v) {
    source_ = plaitName;
    return v;
  }
  std::string ncclName = std::string("NCCL_") + name_;
  if (const char* v = std::getenv(ncclName.c_str()); v && *v) {
    source_ = ncclName;
    return v;
  }
  source_ = "default";
  return nullptr;
}

bool parseInt(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str()) return false;
  int64_t scale = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': scale = int64_t(1) << 10; break;
      case 'm': case 'M': scale = int64_t(1) << 20; break;
      case 'g': case 'G': scale = int64_t(1) << 30; break;
      default: return false;
    }
    ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return false;
  }
  int64_t scaled = 0;
  if (__builtin_mul_overflow(static_cast<int64_t>(v), scale, &scaled)) return false;  // "9000000000G"
  *out = scaled;
  return true;
}

int64_t IntParam::get() const {
  if (loaded_.load(std::memory_order_acquire)) return value_;
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_.load(std::memory_order_relaxed)) {
    value_ = default_;
    if (const char* text = lookup()) {
      int64_t parsed = 0;
      if (parseInt(text, &parsed)) {
        value_ = parsed;
      } else {
        PLAIT_WARN(kEnv, "%s=\"%s\" is not an integer in range; using the default %lld", source_.c_str(), text,
                   static_cast<long long>(default_));
        source_ = "default";
      }
    }
    loaded_.store(true, std::memory_order_release);
  }
  return value_;
}

void IntParam::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  loaded_.store(false, std::memory_order_release);
}

const std::string& StringParam::get() const {
  if (loaded_.load(std::memory_order_acquire)) return value_;
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_.load(std::memory_order_relaxed)) {
    const char* text = lookup();
    value_ = text ? text : default_;
    loaded_.store(true, std::memory_order_release);
  }
  return value_;
}

void StringParam::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  loaded_.store(false, std::memory_order_release);
}

std::vector<const ParamBase*> allParams() {
  std::lock_guard<std::mutex> lock(registryMutex());
  std::vector<const ParamBase*> out(registry().begin(), registry().end());
  std::sort(out.begin(), out.end(),
            [](const ParamBase* a, const ParamBase* b) { return std::string(a->name()) < b->name(); });
  return out;
}

void resetAll() {
  std::vector<ParamBase*> params;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    params = registry();
  }
  for (ParamBase* p : params) p->reset();
}

}  // namespace plait::config
