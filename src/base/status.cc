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

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::toString() const {
  if (isOk()) return "Success";
  return std::string(codeName(rep_->code)) + ": " + rep_->message;
}

Status& Status::withContext(std::string_view context) {
  if (!isOk()) rep_->message = std::string(context) + ": " + rep_->message;
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
