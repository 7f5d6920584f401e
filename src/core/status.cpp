#include "core/status.h"

namespace plumb {

std::string_view code_name(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kIoError:
      return "io_error";
    case Code::kCorrupt:
      return "corrupt";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kTimeout:
      return "timeout";
    case Code::kResourceExhausted:
      return "resource_exhausted";
    case Code::kFailedPrecondition:
      return "failed_precondition";
    case Code::kCancelled:
      return "cancelled";
    case Code::kUnimplemented:
      return "unimplemented";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

}  // namespace plumb
