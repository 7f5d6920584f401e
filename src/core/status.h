// Errors by value at module boundaries.
//
// Status carries a code and a human message that says what went wrong and, where possible, what
// to do about it. Result<T> holds either a value or a non-OK Status. Modules may use exceptions
// internally but must catch them at their edge and return a Status.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace plumb {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (bad flag, bad JSON, bad shape)
  kNotFound,            // a file, model, run or key does not exist
  kIoError,             // the OS refused a read/write/connect
  kCorrupt,             // stored data is malformed (truncated file, lying header)
  kUnavailable,         // a peer is down or refused (connection refused, 503)
  kTimeout,             // a deadline passed
  kResourceExhausted,   // out of memory, disk, KV blocks or queue slots
  kFailedPrecondition,  // the system is not in a state that allows this (protocol violation)
  kCancelled,           // the operation was cancelled on purpose
  kUnimplemented,       // not supported (yet); the message says what is
  kInternal,            // a bug in plumb
};

std::string_view code_name(Code c);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

  // Prefixes the message with context: "loading model: <old message>".
  Status with_context(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {Code::kIoError, std::move(m)}; }
inline Status corrupt(std::string m) { return {Code::kCorrupt, std::move(m)}; }
inline Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status timeout_error(std::string m) { return {Code::kTimeout, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
inline Status cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
inline Status unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {Code::kInternal, std::move(m)}; }

// A value or an error. Accessing value() of an error Result is a bug (asserts in debug builds).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace plumb

#define PLUMB_CONCAT_INNER(a, b) a##b
#define PLUMB_CONCAT(a, b) PLUMB_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define PLUMB_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::plumb::Status plumb_status_ = (expr);        \
    if (!plumb_status_.ok()) return plumb_status_; \
  } while (0)

// `PLUMB_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define PLUMB_ASSIGN_OR_RETURN(lhs, expr) \
  PLUMB_ASSIGN_OR_RETURN_IMPL(PLUMB_CONCAT(plumb_result_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): lhs is a declaration ("auto x"), tmp a fresh name.
#define PLUMB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
