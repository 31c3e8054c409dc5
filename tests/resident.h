// How much of a mapping is in this process's page tables, from
// /proc/self/smaps (Size and Rss of each mapping): what MAP_POPULATE and page
// faults change, independently of the code under test.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace plait::test {

struct Mapping {
  uintptr_t start = 0;
  std::string path;
  uint64_t sizeBytes = 0;
  uint64_t rssBytes = 0;
};

// Every mapping of this process whose path starts with `pathPrefix` (all of
// them for "").
inline std::vector<Mapping> mappings(const std::string& pathPrefix) {
  std::vector<Mapping> out;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  Mapping* current = nullptr;
  while (std::getline(smaps, line)) {
    std::istringstream in(line);
    std::string first;
    in >> first;
    if (first.find('-') != std::string::npos && first.back() != ':') {  // "start-end perms offset dev inode path"
      std::string perms, offset, dev, inode, path;
      in >> perms >> offset >> dev >> inode;
      std::getline(in, path);
      path.erase(0, path.find_first_not_of(' '));
      current = nullptr;
      if (path.rfind(pathPrefix, 0) == 0) {
        out.push_back(Mapping{std::stoull(first.substr(0, first.find('-')), nullptr, 16), path, 0, 0});
        current = &out.back();
      }
    } else if (current != nullptr && (first == "Size:" || first == "Rss:")) {
      uint64_t kib = 0;
      in >> kib;
      (first == "Size:" ? current->sizeBytes : current->rssBytes) = kib << 10;
    }
  }
  return out;
}

// The mapping that starts at `addr` (sizeBytes 0 when there is none).
inline Mapping mappingAt(const void* addr) {
  for (const Mapping& m : mappings(""))
    if (m.start == reinterpret_cast<uintptr_t>(addr)) return m;
  return Mapping{};
}

}  // namespace plait::test
