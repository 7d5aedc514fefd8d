#include "common/status.h"

#include <cstdio>
#include <cstdlib>

namespace ps {

std::string StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kUnknown: return "Unknown";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDataLoss: return "DataLoss";
  }
  return "Code(" + std::to_string(static_cast<int>(code)) + ")";
}

Status::Status(StatusCode code, std::string_view message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::string(message)});
  }
}

const std::string& Status::message() const {
  static const std::string* const kEmpty = new std::string();
  return ok() ? *kEmpty : state_->message;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return StatusCodeName(state_->code) + ": " + state_->message;
}

bool Status::IsRetryable() const {
  return code() == StatusCode::kUnavailable ||
         code() == StatusCode::kDeadlineExceeded;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(state_->code, std::string(prefix) + ": " + state_->message);
}

Status InvalidArgumentError(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
Status DeadlineExceededError(std::string_view m) { return {StatusCode::kDeadlineExceeded, m}; }
Status NotFoundError(std::string_view m) { return {StatusCode::kNotFound, m}; }
Status ResourceExhaustedError(std::string_view m) { return {StatusCode::kResourceExhausted, m}; }
Status FailedPreconditionError(std::string_view m) { return {StatusCode::kFailedPrecondition, m}; }
Status OutOfRangeError(std::string_view m) { return {StatusCode::kOutOfRange, m}; }
Status UnimplementedError(std::string_view m) { return {StatusCode::kUnimplemented, m}; }
Status InternalError(std::string_view m) { return {StatusCode::kInternal, m}; }
Status UnavailableError(std::string_view m) { return {StatusCode::kUnavailable, m}; }
Status DataLossError(std::string_view m) { return {StatusCode::kDataLoss, m}; }
Status CancelledError(std::string_view m) { return {StatusCode::kCancelled, m}; }
Status AbortedError(std::string_view m) { return {StatusCode::kAborted, m}; }
Status PermissionDeniedError(std::string_view m) { return {StatusCode::kPermissionDenied, m}; }

namespace internal {

void DieOnErrorValue(const Status& status, const char* what) {
  std::fprintf(stderr, "%s on an error status: %s\n", what, status.ToString().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal

}  // namespace ps
