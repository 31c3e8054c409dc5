// no_throw.h — where a C++ exception must stop: the C API boundary and the
// body of every thread the library starts (an exception leaving either is
// std::terminate in the user's process). The library reports errors as
// Status; exceptions come only from the standard library (std::bad_alloc,
// std::length_error, std::system_error from std::thread).
#pragma once

#include <exception>
#include <new>
#include <string>

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

}  // namespace plait
