// Status and Result<T>: errors as values across module boundaries.
//
// A Status is either OK or carries a code and a human-readable message that
// says what was wrong and where ("resources.gpus: must be at least 0").
// Result<T> holds a T or a non-OK Status. Both are cheap to move and have no
// hidden global state; they are safe to use from any thread.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpupool {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is malformed (HTTP 400, CLI exit 2)
  kNotFound,            // HTTP 404
  kAlreadyExists,       // HTTP 409
  kFailedPrecondition,  // the request is valid but the state forbids it (HTTP 409)
  kUnauthenticated,     // HTTP 401
  kPermissionDenied,    // HTTP 403
  kResourceExhausted,   // HTTP 429
  kUnavailable,         // a peer or resource cannot be reached (HTTP 503)
  kDeadlineExceeded,    // HTTP 504
  kInternal,            // a bug or an unexpected environment failure (HTTP 500)
  kDataLoss,            // stored or received data is corrupt: a hash does not match (HTTP 500)
  kAborted,             // the operation belongs to something that is over, e.g. a stale
                        // attempt fenced off by the server (HTTP 409, code "ABORTED")
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  // Internal, "what: <strerror(errno)>", for a failed system call.
  static Status FromErrno(std::string_view what);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: resources.gpus: must be at least 0", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result must not hold an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  // By value, so `for (auto& x : *MakeResult())` never binds to a dead temporary.
  T value() && { return std::get<T>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gpupool

#define GP_CONCAT_INNER_(a, b) a##b
#define GP_CONCAT_(a, b) GP_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define GP_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::gpupool::Status gp_status_ = (expr);   \
    if (!gp_status_.ok()) return gp_status_; \
  } while (0)

// `GP_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define GP_ASSIGN_OR_RETURN(lhs, expr) \
  GP_ASSIGN_OR_RETURN_IMPL_(GP_CONCAT_(gp_result_, __LINE__), lhs, expr)
#define GP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
