// machines.h — loading the described machines of tests/topology/data.
#pragma once

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "../scoped_env.h"
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

using plait::test::ScopedEnv;

}  // namespace plait::topo::test
