// Communicator init reads NCCL_TOPO_FILE (issue 11, item 9), as NCCL users
// expect: ctest runs [badtopo] with a file that has a duplicate bus id (init
// must fail on every rank, naming it) and [goodtopo] with a described
// two-socket host (init and an AllReduce succeed, and NCCL_TOPO_DUMP_FILE
// receives the topology). Before, init ignored the variable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

TEST_CASE("NCCL_TOPO_FILE with a duplicate bus id fails communicator init", "[badtopo]") {
  REQUIRE(std::getenv("NCCL_TOPO_FILE") != nullptr);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<ncclResult_t> results(2, ncclSuccess);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      results[r] = ncclCommInitRank(&comm, 2, id, r);
      errors[r] = ncclGetLastError(nullptr);
      if (results[r] == ncclSuccess) ncclCommDestroy(comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(results[r] != ncclSuccess);
    CHECK(errors[r].find("appears twice") != std::string::npos);
  }
}

TEST_CASE("NCCL_TOPO_FILE describing this host: init and AllReduce work, the dump is written", "[goodtopo]") {
  const char* dump = std::getenv("NCCL_TOPO_DUMP_FILE");
  REQUIRE(dump != nullptr);
  std::remove(dump);
  auto failed = plait_test::runThreads(2, [](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(1000, rank + 1.0f);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return ncclGetLastError(comm);
    for (float x : buf)
      if (x != 3.0f) return "wrong sum";
    return "";
  });
  for (const auto& f : failed) FAIL_CHECK(f);
  std::ifstream in(dump);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("affinity=\"00000000,ffffffff\"") != std::string::npos);  // from the file
}
