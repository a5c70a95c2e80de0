// Status: the error value returned by every fallible kvatlas function that has no result.
// A Status is a plain value; copies are independent and safe to use from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "kvatlas/common/export.h"

namespace kvatlas {

enum class StatusCode : uint16_t {
#define KVATLAS_STATUS_CODE(name, number, http, wire) name = number,
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
};

// The HTTP status that a REST answer carrying `code` uses.
[[nodiscard]] KVATLAS_EXPORT int HttpStatusOf(StatusCode code);
// The stable snake_case wire name of `code` ("invalid_argument").
[[nodiscard]] KVATLAS_EXPORT std::string_view WireNameOf(StatusCode code);
// The inverse of WireNameOf; kInternal for unknown names.
[[nodiscard]] KVATLAS_EXPORT StatusCode StatusCodeFromWireName(std::string_view name);
// The stable number, or kInternal if `number` is not in the table.
[[nodiscard]] KVATLAS_EXPORT StatusCode StatusCodeFromNumber(uint32_t number);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status ResourceExhausted(std::string msg) {
    return {StatusCode::kResourceExhausted, std::move(msg)};
  }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {StatusCode::kIOError, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status PayloadTooLarge(std::string msg) {
    return {StatusCode::kPayloadTooLarge, std::move(msg)};
  }
  static Status Unauthenticated(std::string msg) {
    return {StatusCode::kUnauthenticated, std::move(msg)};
  }
  static Status PermissionDenied(std::string msg) {
    return {StatusCode::kPermissionDenied, std::move(msg)};
  }
  static Status WrongGroup(std::string msg) { return {StatusCode::kWrongGroup, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: events[3].block_size must be > 0"
  KVATLAS_EXPORT std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` and ": ".
  KVATLAS_EXPORT Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace kvatlas

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define KVATLAS_RETURN_IF_ERROR(expr) \
  KVATLAS_RETURN_IF_ERROR_IMPL_(KVATLAS_STATUS_CONCAT_(kvatlas_status_, __LINE__), expr)
#define KVATLAS_RETURN_IF_ERROR_IMPL_(var, expr) \
  do {                                           \
    ::kvatlas::Status var = (expr);              \
    if (!var.ok()) return var;                   \
  } while (0)
#define KVATLAS_STATUS_CONCAT_INNER_(a, b) a##b
#define KVATLAS_STATUS_CONCAT_(a, b) KVATLAS_STATUS_CONCAT_INNER_(a, b)
