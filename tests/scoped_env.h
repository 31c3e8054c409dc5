// scoped_env.h — set (or clear) one environment variable for a test scope and
// make Plait's parameter registry read it again; the old value comes back at
// scope exit.
#pragma once

#include <cstdlib>
#include <string>

#include "base/config.h"

namespace plait::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    config::resetAll();
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
    config::resetAll();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace plait::test
