// A huge PLAIT_TIMEOUT / PLAIT_INIT_TIMEOUT (issue 11, item 8): "10G" seconds
// means "wait very long", not an overflowed deadline that has already passed.
// Run by ctest with both variables set to 10G; before the fix every rank's
// init failed at once with a timeout.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness.h"

TEST_CASE("Communicators initialise and reduce under PLAIT_TIMEOUT=10G", "[hugetimeout]") {
  REQUIRE(std::getenv("PLAIT_TIMEOUT") != nullptr);
  auto failed = plait_test::runThreads(3, [](int rank, ncclComm_t comm) -> std::string {
    std::vector<double> buf(4099, rank + 1.0);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclDouble, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("allreduce: ") + ncclGetLastError(comm);
    for (double x : buf)
      if (x != 6.0) return "wrong sum " + std::to_string(x);
    return "";
  });
  for (const auto& f : failed) FAIL_CHECK(f);
  CHECK(failed.empty());
}
