#include "plait/status.hpp"

#include <cerrno>
#include <cstring>

namespace plait {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk: return "Success";
    case Code::kCudaError: return "UnhandledCudaError";
    case Code::kSystemError: return "SystemError";
    case Code::kInternalError: return "InternalError";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kInvalidUsage: return "InvalidUsage";
    case Code::kRemoteError: return "RemoteError";
    case Code::kInProgress: return "InProgress";
  }
  return "UnknownCode";
}

std::string Status::toString() const {
  if (isOk()) return "Success";
  return std::string(codeName(code_)) + ": " + message_;
}

Status& Status::withContext(std::string_view context) {
  if (!isOk()) message_ = std::string(context) + ": " + message_;
  return *this;
}

Status invalidArgument(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }
Status invalidUsage(std::string message) { return Status(Code::kInvalidUsage, std::move(message)); }
Status internalError(std::string message) { return Status(Code::kInternalError, std::move(message)); }
Status remoteError(std::string message) { return Status(Code::kRemoteError, std::move(message)); }
Status systemError(std::string message) {
  int err = errno;
  return Status(Code::kSystemError, std::move(message) + ": " + std::strerror(err) + " (errno " +
                                        std::to_string(err) + ")");
}

}  // namespace plait
