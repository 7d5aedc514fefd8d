// ps::Status and ps::StatusOr<T>: the error type of every fallible call.
//
// A Status is either OK (free: no allocation) or carries a code and a message
// that says what was wrong, where, and what to do. Codes follow the standard
// canonical set; only kUnavailable and kDeadlineExceeded are retryable.
// Thread-compatible: distinct objects may be used from distinct threads.
#ifndef PS_COMMON_STATUS_H_
#define PS_COMMON_STATUS_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ps {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

// "InvalidArgument", "DeadlineExceeded", ...; "Code(<n>)" for unknown values.
std::string StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string_view message);

  static Status Ok() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return ok() ? StatusCode::kOk : state_->code; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  // True for the codes a caller may retry: kUnavailable, kDeadlineExceeded.
  bool IsRetryable() const;

  // Returns a copy whose message is "<prefix>: <message>" (OK stays OK).
  Status WithContext(std::string_view prefix) const;

  // Explicitly drops a Status the caller has decided not to handle.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  // Shared and immutable: copying a Status never allocates.
  std::shared_ptr<const State> state_;
};

Status InvalidArgumentError(std::string_view message);
Status DeadlineExceededError(std::string_view message);
Status NotFoundError(std::string_view message);
Status ResourceExhaustedError(std::string_view message);
Status FailedPreconditionError(std::string_view message);
Status OutOfRangeError(std::string_view message);
Status UnimplementedError(std::string_view message);
Status InternalError(std::string_view message);
Status UnavailableError(std::string_view message);
Status DataLossError(std::string_view message);
Status CancelledError(std::string_view message);
Status AbortedError(std::string_view message);
Status PermissionDeniedError(std::string_view message);

namespace internal {
// Prints "<what> on an error status: <status>" to stderr and aborts: reading
// the value of a StatusOr that holds an error is a programmer bug.
[[noreturn]] void DieOnErrorValue(const Status& status, const char* what);
}  // namespace internal

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok() (an OK status without a value is a programmer bug
  // and becomes kInternal).
  StatusOr(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? InternalError("StatusOr built from OK status")
                            : std::move(status)) {}
  StatusOr(T value)  // NOLINT(google-explicit-constructor)
      : value_(std::move(value)) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok(). On an error each of these aborts the process with the
  // status text on stderr.
  T& value() & { return Checked("StatusOr::value()"); }
  const T& value() const& { return Checked("StatusOr::value()"); }
  T&& value() && { return std::move(Checked("StatusOr::value()")); }
  T& operator*() & { return Checked("StatusOr::operator*"); }
  const T& operator*() const& { return Checked("StatusOr::operator*"); }
  T* operator->() { return &Checked("StatusOr::operator->"); }
  const T* operator->() const { return &Checked("StatusOr::operator->"); }

 private:
  T& Checked(const char* what) {
    if (!value_.has_value()) [[unlikely]] internal::DieOnErrorValue(status_, what);
    return *value_;
  }
  const T& Checked(const char* what) const {
    if (!value_.has_value()) [[unlikely]] internal::DieOnErrorValue(status_, what);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ps

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK Status.
#define PS_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::ps::Status ps_status_ = (expr);             \
    if (!ps_status_.ok()) return ps_status_;      \
  } while (0)

// PS_ASSIGN_OR_RETURN(auto x, MakeX()): assigns the value or returns the error.
#define PS_ASSIGN_OR_RETURN(lhs, expr) \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, expr)
#define PS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // PS_COMMON_STATUS_H_
