// plait/status.hpp — the error vocabulary of Plait's C++ API and internals.
//
// A Status is either OK or a code with a message that names what was wrong
// (the argument, the peer, the operation). Result<T> carries a value or a
// non-OK Status. Neither throws. Both are cheap to move; an OK Status holds
// no allocation.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace plait {

// The codes mirror ncclResult_t so the C boundary maps them one to one.
enum class Code : int {
  kOk = 0,
  kCudaError = 1,        // ncclUnhandledCudaError
  kSystemError = 2,      // an OS call failed (errno is in the message)
  kInternalError = 3,    // a Plait bug or broken invariant
  kInvalidArgument = 4,  // the caller passed something wrong
  kInvalidUsage = 5,     // the call is wrong in this state (or not supported yet)
  kRemoteError = 6,      // a peer died, aborted or timed out
  kInProgress = 7,       // non-blocking work still running: a state, not a failure
};

const char* codeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : rep_(code == Code::kOk ? nullptr : new Rep{code, std::move(message)}) {}
  Status(const Status& other) : rep_(other.rep_ ? new Rep(*other.rep_) : nullptr) {}
  Status(Status&& other) noexcept : rep_(other.rep_) { other.rep_ = nullptr; }
  Status& operator=(const Status& other) {
    if (this != &other) {
      Rep* copy = other.rep_ ? new Rep(*other.rep_) : nullptr;
      delete rep_;
      rep_ = copy;
    }
    return *this;
  }
  Status& operator=(Status&& other) noexcept {
    if (this != &other) {
      delete rep_;
      rep_ = other.rep_;
      other.rep_ = nullptr;
    }
    return *this;
  }
  ~Status() { delete rep_; }

  static Status ok() { return Status(); }
  bool isOk() const { return rep_ == nullptr; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const;
  // "InvalidArgument: sendbuff is null".
  std::string toString() const;

  // Prepends context: "while X: <message>".
  Status& withContext(std::string_view context);

 private:
  // An OK status is one null pointer: the success path allocates and frees
  // nothing (the API's fast path returns many of them per call).
  struct Rep {
    Code code;
    std::string message;
  };
  Rep* rep_ = nullptr;
};

// Helpers so call sites read as sentences.
Status invalidArgument(std::string message);
Status invalidUsage(std::string message);
Status systemError(std::string message);  // appends strerror(errno)
Status internalError(std::string message);
Status remoteError(std::string message);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) { assert(!std::get<Status>(state_).isOk()); }  // NOLINT

  bool isOk() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOk;
    return isOk() ? kOk : std::get<Status>(state_);
  }
  Status takeStatus() { return isOk() ? Status() : std::move(std::get<Status>(state_)); }
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace plait

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define PLAIT_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::plait::Status plait_status_ = (expr);          \
    if (!plait_status_.isOk()) return plait_status_; \
  } while (0)

#define PLAIT_CONCAT_INNER_(a, b) a##b
#define PLAIT_CONCAT_(a, b) PLAIT_CONCAT_INNER_(a, b)
// `PLAIT_ASSIGN_OR_RETURN(auto x, makeX());`
#define PLAIT_ASSIGN_OR_RETURN(lhs, expr)                                        \
  auto PLAIT_CONCAT_(plait_result_, __LINE__) = (expr);                          \
  if (!PLAIT_CONCAT_(plait_result_, __LINE__).isOk())                            \
    return PLAIT_CONCAT_(plait_result_, __LINE__).takeStatus();                  \
  lhs = std::move(PLAIT_CONCAT_(plait_result_, __LINE__)).value()
