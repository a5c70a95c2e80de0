// AuditLog (docs/security.md §Audit log): one log line for every admin request and every
// refusal by access control, naming the token (never the token itself), the peer address,
// the request and the outcome, and the matching metrics (kvatlas_admin_actions_total,
// kvatlas_auth_failures_total). Lines start with "audit: " so that they can be filtered
// out of the server's log.
//
// Refusals are logged at most kFailureLinesPerSecond per second: a client hammering the
// server with bad tokens cannot flood the log. The next line logged says how many were
// left out; the metrics count every one. Admin actions are never left out.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "kvatlas/common/status.h"
#include "server/service/metrics.h"

namespace kvatlas::server {

enum class AuthFailure {
  kMissingToken,    // no Authorization header, or a binary connection's first frame not kAuth
  kInvalidToken,    // a token that is not configured (or malformed)
  kRevokedToken,    // a connection's token was removed by a reload
  kForbidden,       // a valid token whose role does not allow the request
  kHostNotAllowed,  // a REST request whose Host header is not an allowed name
};

// The metrics label of `reason`: missing_token, invalid_token, revoked_token, forbidden,
// host_not_allowed.
[[nodiscard]] std::string_view AuthFailureName(AuthFailure reason);

// Where a request came from, for the log line.
struct AuditSource {
  std::string_view protocol;  // "rest" or "rpc"
  std::string_view peer;      // the peer's address
  std::string_view request;   // "POST /register", "ingest", ...
  // The server that forwarded the request (X-Kvatlas-Forwarded), empty if none.
  std::string_view forwarded_by = {};
};

class AuditLog {
 public:
  static constexpr uint32_t kFailureLinesPerSecond = 100;

  // `metrics` must outlive the log.
  explicit AuditLog(Metrics* metrics) : metrics_(metrics) {}

  // A refused request or connection. `token_name` is empty when no valid token was shown.
  void Refused(const AuditSource& source, AuthFailure reason, std::string_view token_name,
               const Status& status);

  // An admin request that passed access control, once its outcome is known. `action` is a
  // bounded label (the route: "POST /register"); `outcome` is "ok" or the error's wire name
  // (status_codes.def).
  void AdminAction(const AuditSource& source, std::string_view token_name, std::string_view action,
                   std::string_view outcome, std::string_view detail = {});

  // Anything else worth an audit line (token reloads).
  void Note(std::string_view what);

 private:
  Metrics* metrics_;
  std::mutex mu_;  // guards the rate limiter below
  std::chrono::steady_clock::time_point window_start_{};
  uint32_t window_lines_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace kvatlas::server
