// machines.h — loading the described machines of tests/topology/data.
#pragma once

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "base/config.h"
#include "topology/cluster.h"
#include "topology/paths.h"
#include "topology/system.h"

namespace plait::topo::test {

inline std::string dataPath(const std::string& name) { return std::string(PLAIT_TOPO_TEST_DATA) + "/" + name; }

inline TopoSystem loadMachine(const std::string& name) {
  auto xml = readXmlFile(dataPath(name));
  REQUIRE(xml.isOk());
  auto sys = buildSystem(*xml);
  INFO(sys.status().toString());
  REQUIRE(sys.isOk());
  return std::move(sys).value();
}

inline TopoSystem systemFromText(const std::string& text) {
  auto xml = parseXml(text);
  REQUIRE(xml.isOk());
  auto sys = buildSystem(*xml);
  INFO(sys.status().toString());
  REQUIRE(sys.isOk());
  return std::move(sys).value();
}

// Sets (or clears, with nullptr) an environment knob and makes the registry
// read it again; restores the old value at scope exit.
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

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace plait::topo::test
