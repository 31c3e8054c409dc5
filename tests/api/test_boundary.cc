// The C boundary: an exception thrown inside an entry point comes back as an
// ncclResult_t with the exception's text in ncclGetLastError, never as
// std::terminate in the caller. The entry points below are defined with the
// same PLAIT_API ... PLAIT_API_END as every real one (src/api/api_util.h) and
// throw what the standard library throws inside Plait.
#include <catch2/catch.hpp>

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/api_util.h"

PLAIT_API(ncclResult_t, TestBoundaryThrow, (int kind)) {
  if (kind == 0) throw std::bad_alloc();
  if (kind == 1) {
    std::vector<char> v;
    v.resize(static_cast<size_t>(-1));  // std::length_error, as a negative tunable once did
  }
  if (kind == 2) throw 42;
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(const char*, TestBoundaryThrowString, (int kind)) {
  if (kind == 0) throw std::runtime_error("boom");
  return "fine";
} PLAIT_API_END

namespace {
std::string lastError() { return plait::api::lastError(); }
}  // namespace

TEST_CASE("An exception inside an entry point becomes an error code", "[boundary]") {
  CHECK(ncclTestBoundaryThrow(0) == ncclSystemError);
  CHECK_THAT(lastError(), Catch::Contains("ncclTestBoundaryThrow") && Catch::Contains("out of memory"));
  CHECK(ncclTestBoundaryThrow(1) == ncclInternalError);
  CHECK_THAT(lastError(), Catch::Contains("unexpected C++ exception"));
  CHECK(ncclTestBoundaryThrow(2) == ncclInternalError);
  CHECK_THAT(lastError(), Catch::Contains("unknown type"));
  CHECK(ncclTestBoundaryThrow(3) == ncclSuccess);
  CHECK(pncclTestBoundaryThrow(0) == ncclSystemError);  // the profiler-facing name too
  CHECK(std::string(ncclTestBoundaryThrowString(1)) == "fine");
  CHECK(std::string(ncclTestBoundaryThrowString(0)).find("exception") != std::string::npos);
}
