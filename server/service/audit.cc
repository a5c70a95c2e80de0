#include "server/service/audit.h"

#include <cstdio>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {
namespace {

// Values come from clients (paths, peer strings): quoted, with quotes, backslashes and
// control characters escaped and the length bounded, so that a request cannot forge or
// break log lines.
std::string Quote(std::string_view value) {
  constexpr size_t kMaxBytes = 256;
  std::string out = "\"";
  for (size_t i = 0; i < value.size() && i < kMaxBytes; ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (value.size() > kMaxBytes) out += "...";
  out += '"';
  return out;
}

std::string Fields(const AuditSource& source, std::string_view token_name) {
  std::string out = "protocol=" + std::string(source.protocol) + " peer=" + Quote(source.peer) +
                    " token=" + (token_name.empty() ? std::string("-") : Quote(token_name)) +
                    " request=" + Quote(source.request);
  if (!source.forwarded_by.empty()) out += " forwarded_by=" + Quote(source.forwarded_by);
  return out;
}

}  // namespace

std::string_view AuthFailureName(AuthFailure reason) {
  switch (reason) {
    case AuthFailure::kMissingToken:
      return "missing_token";
    case AuthFailure::kInvalidToken:
      return "invalid_token";
    case AuthFailure::kRevokedToken:
      return "revoked_token";
    case AuthFailure::kForbidden:
      return "forbidden";
    case AuthFailure::kHostNotAllowed:
      return "host_not_allowed";
  }
  return "other";
}

void AuditLog::Refused(const AuditSource& source, AuthFailure reason, std::string_view token_name,
                       const Status& status) {
  metrics_->RecordAuthFailure(AuthFailureName(reason));
  uint64_t suppressed = 0;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      window_lines_ = 0;
    }
    if (window_lines_ >= kFailureLinesPerSecond) {
      ++suppressed_;
      return;
    }
    ++window_lines_;
    suppressed = std::exchange(suppressed_, 0);
  }
  std::string line = "audit: refused " + Fields(source, token_name) +
                     " reason=" + std::string(AuthFailureName(reason)) +
                     " outcome=" + std::string(WireNameOf(status.code())) +
                     " message=" + Quote(status.message());
  if (suppressed > 0) {
    line += " (" + std::to_string(suppressed) + " earlier refusal line(s) left out: more than " +
            std::to_string(kFailureLinesPerSecond) + " per second)";
  }
  LogWarning(line);
}

void AuditLog::AdminAction(const AuditSource& source, std::string_view token_name,
                           std::string_view action, std::string_view outcome,
                           std::string_view detail) {
  metrics_->RecordAdminAction(action, outcome);
  std::string line =
      "audit: admin " + Fields(source, token_name) + " outcome=" + std::string(outcome);
  if (!detail.empty()) line += " message=" + Quote(detail);
  LogInfo(line);
}

void AuditLog::Note(std::string_view what) { LogInfo("audit: " + std::string(what)); }

}  // namespace kvatlas::server
