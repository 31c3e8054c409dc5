// config.h — the one registry of Plait's tunables.
//
// Each tunable has a name, a type, a default and a help line. Its value is
// read from the environment once, on first use: PLAIT_<NAME> first, then
// NCCL_<NAME> as an alias so NCCL users' knobs work. `plait-info` prints them
// all. Declare tunables at namespace scope in the .cc that uses them:
//
//   PLAIT_PARAM_INT(kChunkBytes, "CHUNK_BYTES", 128 << 10, "bytes per FIFO step");
//   ... kChunkBytes.get() ...
//
// Integers accept K/M/G suffixes (powers of 1024). An unparsable value is
// reported once at WARN and the default is used. get() is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace plait::config {

enum class ParamType { kInt, kString };

class ParamBase {
 public:
  ParamBase(const char* name, ParamType type, const char* help);
  ParamBase(const ParamBase&) = delete;
  ParamBase& operator=(const ParamBase&) = delete;

  const char* name() const { return name_; }
  ParamType type() const { return type_; }
  const char* help() const { return help_; }
  virtual std::string defaultText() const = 0;
  virtual std::string valueText() const = 0;
  // Where the value came from: "default", "PLAIT_X" or "NCCL_X" (loads the
  // value first). Any thread.
  std::string source() const;
  // Forgets the cached value so the next get() reads the environment again
  // (tests and ncclResetDebugInit).
  virtual void reset() = 0;

 protected:
  // The raw environment text, or nullptr if unset; fills source_.
  const char* lookup() const;

  const char* name_;
  ParamType type_;
  const char* help_;
  mutable std::string source_ = "default";
};

class IntParam final : public ParamBase {
 public:
  IntParam(const char* name, int64_t defaultValue, const char* help)
      : ParamBase(name, ParamType::kInt, help), default_(defaultValue) {}
  int64_t get() const;
  std::string defaultText() const override { return std::to_string(default_); }
  std::string valueText() const override { return std::to_string(get()); }
  void reset() override;

 private:
  int64_t default_;
  mutable std::atomic<bool> loaded_{false};
  mutable int64_t value_ = 0;
  mutable std::mutex mu_;
};

class StringParam final : public ParamBase {
 public:
  // A secret's value is never shown (plait-info prints "(hidden)").
  StringParam(const char* name, const char* defaultValue, const char* help, bool secret = false)
      : ParamBase(name, ParamType::kString, help), default_(defaultValue), secret_(secret) {}
  const std::string& get() const;
  std::string defaultText() const override { return default_; }
  std::string valueText() const override { return secret_ && !get().empty() ? "(hidden)" : get(); }
  void reset() override;

 private:
  std::string default_;
  bool secret_;
  mutable std::atomic<bool> loaded_{false};
  mutable std::string value_;
  mutable std::mutex mu_;
};

// All registered tunables, sorted by name.
std::vector<const ParamBase*> allParams();
// Resets every cached value.
void resetAll();

// Parses "123", "64K", "4M", "1G"; false if malformed.
bool parseInt(const std::string& text, int64_t* out);

}  // namespace plait::config

#define PLAIT_PARAM_INT(var, name, def, help) static ::plait::config::IntParam var(name, def, help)
#define PLAIT_PARAM_STRING(var, name, def, help) static ::plait::config::StringParam var(name, def, help)
#define PLAIT_PARAM_SECRET(var, name, help) static ::plait::config::StringParam var(name, "", help, true)
