// no_throw.h — where a C++ exception must stop: the C API boundary and the
// body of every thread the library starts (an exception leaving either is
// std::terminate in the user's process). The library reports errors as
// Status; exceptions come only from the standard library (std::bad_alloc,
// std::length_error, std::system_error from std::thread).
#pragma once

#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "plait/status.hpp"

namespace plait {

// The Status for the exception being handled; call only inside a catch block.
inline Status statusFromCurrentException() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return Status(Code::kSystemError, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return Status(Code::kInternalError, std::string("unexpected C++ exception: ") + e.what());
  } catch (...) {
    return Status(Code::kInternalError, "unexpected exception of unknown type");
  }
}

// Runs body() and returns its Status, or the exception it threw as a Status.
template <class Body>
Status noThrow(Body&& body) {
  try {
    return body();
  } catch (...) {
    return statusFromCurrentException();
  }
}

// Runs body(i) for every i in [0, n) at the same time: i = 0 on the calling
// thread, the others on the calling thread's pool of workers (worker_pool.h),
// and returns once all returned. Returns each body's Status. A thread that
// cannot be started (std::system_error: no memory, or the process's thread
// limit) leaves its body unrun with an error Status.
template <class Body>
std::vector<Status> runConcurrently(size_t n, Body body) {
  std::vector<Status> results(n);
  std::vector<WorkerJob> jobs(n);
  for (WorkerJob& job : jobs) {
    job.run = [](const WorkerJob& j, size_t i) { return noThrow([&] { return (*static_cast<Body*>(j.data[0]))(i); }); };
    job.data[0] = &body;
  }
  runOnWorkers(n, jobs.data(), results.data());
  return results;
}

}  // namespace plait
